package loader

import (
	"fmt"
	"io"
	"sync"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/gpu"
	"github.com/splitzip/splitzip/gpu/cuda"
)

// gpuState is one device's context, a decoder per caller stream, and a
// pool of pinned buffers.
type gpuState struct {
	ctx  *cuda.Context
	mu   sync.Mutex
	decs map[cuda.Stream]*gpu.Decoder
	bufs []*pinned
	evs  map[cuda.Event]cuda.Stream
}

// pinned is a pinned staging buffer; ev, when set, is the event after the
// last copy from it: the buffer is free once ev has completed.
type pinned struct {
	b  []byte
	ev cuda.Event
}

func (l *Loader) device(d int) (*gpuState, error) {
	l.gpuMu.Lock()
	defer l.gpuMu.Unlock()
	if g, ok := l.gpus[d]; ok {
		return g, nil
	}
	lib, err := cuda.Open()
	if err != nil {
		return nil, err
	}
	n, err := lib.DeviceCount()
	if err != nil {
		return nil, err
	}
	if d < 0 || d >= n {
		return nil, fmt.Errorf("%w: device %d of %d", ErrInvalid, d, n)
	}
	ctx, err := lib.NewContext(d)
	if err != nil {
		return nil, err
	}
	g := &gpuState{ctx: ctx, decs: map[cuda.Stream]*gpu.Decoder{}, evs: map[cuda.Event]cuda.Stream{}}
	l.gpus[d] = g
	return g, nil
}

// buffer returns a free pinned buffer of at least n bytes (g.mu held).
func (g *gpuState) buffer(n uint64) (*pinned, error) {
	for _, p := range g.bufs {
		if uint64(len(p.b)) < n {
			continue
		}
		if p.ev != 0 {
			if done, err := g.ctx.Query(p.ev); err != nil || !done {
				continue
			}
		}
		return p, nil
	}
	b, err := g.ctx.HostAlloc(max(n, 1<<20), 0)
	if err != nil {
		return nil, err
	}
	p := &pinned{b: b}
	g.bufs = append(g.bufs, p)
	return p, nil
}

// Upload enqueues on the caller's stream the transfer of tensor i into the
// device range [dst, dst+capacity) of device d and returns an event after
// it. Compressed tensors are copied as payloads and decoded in place.
func (l *Loader) Upload(i, d int, dst, capacity uint64, stream uintptr) (uintptr, error) {
	t, err := l.Tensor(i)
	if err != nil {
		return 0, err
	}
	if capacity < t.Size {
		return 0, fmt.Errorf("tensor %q: %w: %d bytes for %d", t.Name, ErrTooSmall, capacity, t.Size)
	}
	if dst == 0 && t.Size > 0 {
		return 0, fmt.Errorf("tensor %q: %w: null destination", t.Name, ErrInvalid)
	}
	g, err := l.device(d)
	if err != nil {
		return 0, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	s := cuda.Stream(stream)
	p, err := g.buffer(t.Stored)
	if err != nil {
		return 0, err
	}
	data := p.b[:t.Stored]
	var h codec.Header
	if t.Compressed {
		f, _, err := l.c.OpenObject(t.Key)
		if err != nil {
			return 0, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		_, err = io.ReadFull(f, data)
		f.Close()
		if err != nil {
			return 0, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		if h, err = codec.ParseHeader(data); err == nil && codec.Checksum(data) != h.Checksum {
			err = codec.ErrChecksum
		}
		if err == nil && (!h.InPlace || 2*h.Values != t.Size) {
			err = fmt.Errorf("%w: payload does not fit the tensor", codec.ErrCorrupt)
		}
		if err != nil {
			return 0, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
	} else if err := l.readSource(t, data); err != nil {
		return 0, err
	}
	if err := g.ctx.CopyHtoDAsync(cuda.DevicePtr(dst), data, s); err != nil {
		return 0, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	if t.Compressed {
		dec, ok := g.decs[s]
		if !ok {
			if dec, err = gpu.NewDecoder(g.ctx); err != nil {
				return 0, err
			}
			g.decs[s] = dec
		}
		if err := dec.LaunchInPlace(cuda.DevicePtr(dst), &h, s); err != nil {
			return 0, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
	}
	ev, err := g.ctx.NewEvent(cuda.EventDisableTiming)
	if err != nil {
		return 0, err
	}
	if err := g.ctx.Record(ev, s); err != nil {
		g.ctx.DestroyEvent(ev)
		return 0, err
	}
	// The buffer's previous event belongs to an earlier upload's caller.
	p.ev = ev
	g.evs[ev] = s
	return uintptr(ev), nil
}

// EventWait waits for an upload's event and reports decode errors of its stream.
func (l *Loader) EventWait(ev uintptr) error {
	g, s, err := l.eventOwner(ev)
	if err != nil {
		return err
	}
	if err := g.ctx.EventSynchronize(cuda.Event(ev)); err != nil {
		return err
	}
	g.mu.Lock()
	dec := g.decs[s]
	g.mu.Unlock()
	if dec != nil {
		return dec.TakeError(s)
	}
	return nil
}

// EventRelease frees an upload's event.
func (l *Loader) EventRelease(ev uintptr) error {
	g, _, err := l.eventOwner(ev)
	if err != nil {
		return err
	}
	g.mu.Lock()
	delete(g.evs, cuda.Event(ev))
	for _, p := range g.bufs {
		if p.ev == cuda.Event(ev) {
			// Releasing waits for the upload, so the buffer is free after.
			g.ctx.EventSynchronize(p.ev)
			p.ev = 0
		}
	}
	g.mu.Unlock()
	return g.ctx.DestroyEvent(cuda.Event(ev))
}

func (l *Loader) eventOwner(ev uintptr) (*gpuState, cuda.Stream, error) {
	l.gpuMu.Lock()
	defer l.gpuMu.Unlock()
	for _, g := range l.gpus {
		g.mu.Lock()
		s, ok := g.evs[cuda.Event(ev)]
		g.mu.Unlock()
		if ok {
			return g, s, nil
		}
	}
	return nil, 0, fmt.Errorf("%w: unknown event %#x", ErrInvalid, ev)
}

func (g *gpuState) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for s, d := range g.decs {
		g.ctx.StreamSynchronize(s)
		d.Close()
	}
	for ev := range g.evs {
		g.ctx.EventSynchronize(ev)
		g.ctx.DestroyEvent(ev)
	}
	for _, p := range g.bufs {
		g.ctx.FreeHost(p.b)
	}
	g.ctx.Close()
}
