// Package hostengine implements engine.Engine in host memory: copies are
// memcpy, decodes run the Go reference decoder, and streams are goroutines
// that run their operations in order (or, with WithDecodeStreams, their
// decodes beside them, as the CUDA engine may), so transports run and are
// tested with -race on machines without a GPU (load --device cpu). Hooks
// inject faults for tests.
package hostengine

import (
	"fmt"
	"sync"
	"time"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/gpu"
)

var (
	_ engine.Engine = (*Engine)(nil)
	_ engine.Timer  = (*Engine)(nil)
	_ engine.Peered = (*Engine)(nil)
)

// Hooks inject faults into the host engine (tests).
type Hooks struct {
	// Copy and Decode, if set, are called before each operation runs; an
	// error fails the operation (as a failed DMA or launch would). Decode
	// sees an entropy payload's decode with a nil header.
	Copy   func(dst engine.DevPtr, n int) error
	Decode func(dst engine.DevPtr, h *codec.Header) error
	// Map, if set, is called before memory is mapped (out of memory).
	Map func(n uint64) error
	// Scatter, if set, is called before a packed upload of items runs.
	Scatter func(items []engine.ScatterItem) error
}

// Engine implements engine.Engine in host memory. Each stream is a goroutine
// that runs its operations in order, so completion is asynchronous as on
// a GPU and the transports' ordering is really exercised.
type Engine struct {
	mu      sync.Mutex
	ranges  map[engine.DevPtr][]byte // reserved ranges by base
	next    engine.DevPtr
	streams []chan func()
	states  []*streamState
	// dstreams, with WithDecodeStreams, run each stream's decodes beside
	// it; a stream's goroutine closes its decode stream once it ends.
	dstreams []chan func()
	hooks    Hooks
	pinned   uint64
	closed   bool
	// Timing (Timer): op spans from origin, while timing is set.
	timing          bool
	origin          time.Time
	copies, decodes []engine.Interval
}

// Option configures a host engine.
type Option func(*Engine)

// WithHooks injects faults (tests).
func WithHooks(h Hooks) Option { return func(e *Engine) { e.hooks = h } }

// WithDecodeStreams runs each stream's in-place decodes on a goroutine of
// their own, after their copies, while the stream goes on with later
// copies: the order the CUDA engine keeps with decode streams (one upload
// stream), which the engine contract allows, so that transports are
// tested against it too.
func WithDecodeStreams() Option { return func(e *Engine) { e.dstreams = []chan func(){} } }

// New returns a host engine with the given number of streams (at least 1).
func New(streams int, opts ...Option) *Engine {
	e := &Engine{ranges: map[engine.DevPtr][]byte{}, next: 1 << 40}
	for _, o := range opts {
		o(e)
	}
	decodeStreams := e.dstreams != nil
	e.dstreams = nil
	for range max(streams, 1) {
		ch := make(chan func(), 1024)
		e.streams = append(e.streams, ch)
		e.states = append(e.states, &streamState{})
		var dch chan func()
		if decodeStreams {
			dch = make(chan func(), 1024)
			e.dstreams = append(e.dstreams, dch)
			go serve(dch)
		}
		go func() {
			serve(ch)
			if dch != nil {
				close(dch)
			}
		}()
	}
	return e
}

// serve runs a stream's operations until it is closed.
func serve(ch chan func()) {
	for op := range ch {
		op()
	}
}

// Name returns "cpu".
func (e *Engine) Name() string { return "cpu" }

// Pinned allocates ordinary memory.
func (e *Engine) Pinned(n uint64) ([]byte, error) {
	e.mu.Lock()
	e.pinned += n
	e.mu.Unlock()
	return make([]byte, n), nil
}

// FreePinned forgets the memory.
func (e *Engine) FreePinned(b []byte) error {
	e.mu.Lock()
	e.pinned -= uint64(len(b))
	e.mu.Unlock()
	return nil
}

// PinnedBytes returns the pinned memory allocated and not freed.
func (e *Engine) PinnedBytes() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pinned
}

// ReservedRanges returns how many address ranges are reserved and not
// released (leak accounting in tests).
func (e *Engine) ReservedRanges() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.ranges)
}

// Granularity is 64 KiB.
func (e *Engine) Granularity() uint64 { return 64 << 10 }

// Reserve reserves an address range; memory comes with Map.
func (e *Engine) Reserve(size uint64) (engine.DevPtr, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.next
	e.next += engine.DevPtr(size+e.Granularity()) &^ engine.DevPtr(e.Granularity()-1)
	e.ranges[p] = make([]byte, 0, size) // backing allocated lazily by Map
	return p, nil
}

// Map backs [p, p+n) with memory.
func (e *Engine) Map(p engine.DevPtr, n uint64) error {
	if e.hooks.Map != nil {
		if err := e.hooks.Map(n); err != nil {
			return err
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	base, b, err := e.find(p, n)
	if err != nil {
		return err
	}
	if end := uint64(p-base) + n; end > uint64(len(b)) {
		e.ranges[base] = b[:end]
	}
	return nil
}

// Unmap is a no-op for host memory beyond bookkeeping.
func (e *Engine) Unmap(p engine.DevPtr, n uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, _, err := e.find(p, n)
	return err
}

// Release frees a reserved range.
func (e *Engine) Release(p engine.DevPtr, size uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.ranges[p]; !ok {
		return fmt.Errorf("cpu engine: release of unknown range %#x", p)
	}
	delete(e.ranges, p)
	return nil
}

// find returns the range holding [p, p+n).
func (e *Engine) find(p engine.DevPtr, n uint64) (engine.DevPtr, []byte, error) {
	for base, b := range e.ranges {
		if p >= base && uint64(p-base)+n <= uint64(cap(b)) {
			return base, b, nil
		}
	}
	return 0, nil, fmt.Errorf("cpu engine: [%#x, +%d) is outside every reserved range", p, n)
}

// mem returns the mapped host bytes of [p, p+n).
func (e *Engine) mem(p engine.DevPtr, n uint64) ([]byte, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	base, b, err := e.find(p, n)
	if err != nil {
		return nil, err
	}
	off := uint64(p - base)
	if off+n > uint64(len(b)) {
		return nil, fmt.Errorf("cpu engine: [%#x, +%d) is not mapped", p, n)
	}
	return b[off : off+n], nil
}

// Streams returns the number of streams.
func (e *Engine) Streams() int { return len(e.streams) }

// cpuEvent completes when its stream reaches it.
type cpuEvent struct {
	done chan struct{}
	err  error
}

func (ev *cpuEvent) Wait() error { <-ev.done; return ev.err }

func (ev *cpuEvent) Done() bool {
	select {
	case <-ev.done:
		return true
	default:
		return false
	}
}

// streamState carries a stream's first error to its next event; only the
// stream's goroutine touches it.
type streamState struct{ err error }

func (e *Engine) state(s int) *streamState { return e.states[s] }

// StartTiming implements Timer.
func (e *Engine) StartTiming() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.timing, e.origin, e.copies, e.decodes = true, time.Now(), nil, nil
	return nil
}

// TakeTimes implements Timer.
func (e *Engine) TakeTimes() (engine.DeviceTimes, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.timing = false
	return engine.BusyTimes(e.copies, e.decodes), nil
}

// timed runs op, recording its span as a copy or a decode when timing.
func (e *Engine) timed(decode bool, op func() error) error {
	t0 := time.Now()
	err := op()
	e.mu.Lock()
	if e.timing {
		iv := engine.Interval{Start: t0.Sub(e.origin), End: time.Since(e.origin)}
		if decode {
			e.decodes = append(e.decodes, iv)
		} else {
			e.copies = append(e.copies, iv)
		}
	}
	e.mu.Unlock()
	return err
}

func (e *Engine) enqueue(s int, op func() error) error {
	st, err := e.stream(s)
	if err != nil {
		return err
	}
	e.streams[s] <- func() {
		if st.err == nil {
			st.err = op()
		}
	}
	return nil
}

// stream checks a stream index and that the engine is open. Sends happen
// after the check without the lock: Close must not race with submissions
// (callers close an engine once its transports are closed).
func (e *Engine) stream(s int) (*streamState, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, fmt.Errorf("cpu engine: closed")
	}
	if s < 0 || s >= len(e.streams) {
		return nil, fmt.Errorf("cpu engine: no stream %d", s)
	}
	return e.state(s), nil
}

// Submit implements engine.Engine: w's copy, decode or scatter and the
// event run as one operation of stream s, so nothing another goroutine
// submits to s comes between them. The event carries the stream's first
// error since the previous event, and clears it.
func (e *Engine) Submit(s int, w engine.Work) (engine.Event, error) {
	if w.Decode != nil && w.Entropy != nil {
		return nil, fmt.Errorf("cpu engine: a decode and an entropy decode in one submission")
	}
	var run []func() error
	switch {
	case w.Items != nil:
		if err := gpu.PutScatterTable(w.Src, w.Items, uint64(len(w.Src))); err != nil {
			return nil, err
		}
		its := append([]engine.ScatterItem(nil), w.Items...)
		// As on a GPU: the packed buffer is copied to staging memory,
		// then scattered from there.
		var staged []byte
		run = append(run,
			func() error {
				return e.timed(false, func() error { staged = append([]byte(nil), w.Src...); return nil })
			},
			func() error { return e.timed(true, func() error { return e.scatter(staged, its) }) })
	default:
		switch {
		case w.N > 0 && w.Peer != nil && w.Peer != engine.Engine(e):
			p, ok := w.Peer.(*Engine)
			if !ok {
				return nil, fmt.Errorf("cpu engine: a peer copy from %s, not a cpu engine", w.Peer.Name())
			}
			run = append(run, func() error { return e.timed(false, func() error { return e.copyPeer(w.Dst, p, w.From, w.N) }) })
		case w.N > 0:
			run = append(run, func() error { return e.timed(false, func() error { return e.copyDtoD(w.Dst, w.From, w.N) }) })
		case len(w.Src) > 0:
			run = append(run, func() error { return e.timed(false, func() error { return e.copyHtoD(w.Dst, w.Src) }) })
		}
		if w.Decode != nil {
			hc := *w.Decode
			run = append(run, func() error { return e.timed(true, func() error { return e.decodeInPlace(w.Dst, &hc) }) })
		}
		if w.Entropy != nil {
			hc := *w.Entropy
			run = append(run, func() error { return e.timed(true, func() error { return e.decodeEntropyInPlace(w.Dst, &hc) }) })
		}
	}
	st, err := e.stream(s)
	if err != nil {
		return nil, err
	}
	ev := &cpuEvent{done: make(chan struct{})}
	if e.dstreams != nil && w.Items == nil && (w.Decode != nil || w.Entropy != nil) {
		// The copy on s, the decode on s's decode stream after it: s goes
		// on with later copies meanwhile.
		copies, decode := run[:len(run)-1], run[len(run)-1]
		ds := e.dstreams[s]
		e.streams[s] <- func() {
			for _, op := range copies {
				if st.err == nil {
					st.err = op()
				}
			}
			err := st.err
			st.err = nil
			ds <- func() {
				if err == nil {
					err = decode()
				}
				ev.err = err
				close(ev.done)
			}
		}
		return ev, nil
	}
	e.streams[s] <- func() {
		for _, op := range run {
			if st.err == nil {
				st.err = op()
			}
		}
		ev.err, st.err = st.err, nil
		close(ev.done)
	}
	return ev, nil
}

// copyHtoD runs a copy.
func (e *Engine) copyHtoD(dst engine.DevPtr, src []byte) error {
	if e.hooks.Copy != nil {
		if err := e.hooks.Copy(dst, len(src)); err != nil {
			return err
		}
	}
	d, err := e.mem(dst, uint64(len(src)))
	if err != nil {
		return err
	}
	copy(d, src)
	return nil
}

// copyDtoD runs a copy within device memory.
func (e *Engine) copyDtoD(dst, src engine.DevPtr, n uint64) error { return e.copyFrom(e, dst, src, n) }

// copyPeer runs a copy of n bytes at src in p's memory to dst (a copy
// from another device, which fault hooks see as a copy).
func (e *Engine) copyPeer(dst engine.DevPtr, p *Engine, src engine.DevPtr, n uint64) error {
	if e.hooks.Copy != nil {
		if err := e.hooks.Copy(dst, int(n)); err != nil {
			return err
		}
	}
	return e.copyFrom(p, dst, src, n)
}

// copyFrom copies n bytes at src in p's memory to dst in e's.
func (e *Engine) copyFrom(p *Engine, dst, src engine.DevPtr, n uint64) error {
	from, err := p.mem(src, n)
	if err != nil {
		return err
	}
	to, err := e.mem(dst, n)
	if err != nil {
		return err
	}
	copy(to, from)
	return nil
}

// AllowPeers implements engine.Peered: host engines copy from each
// other's memory without setup; peers must be host engines.
func (e *Engine) AllowPeers(peers []engine.Engine) error {
	for _, p := range peers {
		if _, ok := p.(*Engine); !ok {
			return fmt.Errorf("cpu engine: peer %s is not a cpu engine", p.Name())
		}
	}
	return nil
}

// decodeInPlace runs a decode with the Go reference decoder.
func (e *Engine) decodeInPlace(dst engine.DevPtr, h *codec.Header) error {
	if e.hooks.Decode != nil {
		if err := e.hooks.Decode(dst, h); err != nil {
			return err
		}
	}
	d, err := e.mem(dst, 2*h.Values)
	if err != nil {
		return err
	}
	// The reference decoder works out of place: set the payload aside.
	payload := append([]byte(nil), d[:h.Size]...)
	return codec.Decode(d, payload)
}

// decodeEntropyInPlace runs an entropy payload's decode in place with the
// Go reference (entropy.DecodeInPlace); the Decode hook sees it with a
// nil header.
func (e *Engine) decodeEntropyInPlace(dst engine.DevPtr, h *entropy.Head) error {
	if e.hooks.Decode != nil {
		if err := e.hooks.Decode(dst, nil); err != nil {
			return err
		}
	}
	d, err := e.mem(dst, h.ValueBytes())
	if err != nil {
		return err
	}
	return entropy.DecodeInPlace(d, h.Size)
}

// scatter writes checked items of packed to their ranges; the hooks see
// each raw item as a copy and each payload as a decode.
func (e *Engine) scatter(packed []byte, its []engine.ScatterItem) error {
	if e.hooks.Scatter != nil {
		if err := e.hooks.Scatter(its); err != nil {
			return err
		}
	}
	for _, it := range its {
		d, err := e.mem(engine.DevPtr(it.Dst), it.Size)
		if err != nil {
			return err
		}
		src := packed[it.Src : it.Src+it.Stored]
		if it.Header == nil {
			if e.hooks.Copy != nil {
				if err := e.hooks.Copy(engine.DevPtr(it.Dst), len(src)); err != nil {
					return err
				}
			}
			copy(d, src)
			continue
		}
		if e.hooks.Decode != nil {
			if err := e.hooks.Decode(engine.DevPtr(it.Dst), it.Header); err != nil {
				return err
			}
		}
		if err := codec.Decode(d, src); err != nil {
			return err
		}
	}
	return nil
}

// WaitEvent makes stream s wait for ev.
func (e *Engine) WaitEvent(s int, ev engine.Event) error {
	return e.enqueue(s, func() error { ev.Wait(); return nil })
}

// ReadBack copies device memory to dst.
func (e *Engine) ReadBack(dst []byte, src engine.DevPtr) error {
	d, err := e.mem(src, uint64(len(dst)))
	if err != nil {
		return err
	}
	copy(dst, d)
	return nil
}

// Close stops the streams.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.closed {
		e.closed = true
		for _, ch := range e.streams {
			close(ch)
		}
	}
	return nil
}
