// Package cudaengine implements engine.Engine on an NVIDIA GPU through the
// CUDA driver (package gpu/cuda, no cgo): VMM ranges for the weight arena,
// pinned host memory, upload streams, the decode and scatter kernels of
// package gpu, and events; it implements engine.Timer with CUDA events.
package cudaengine

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/gpu"
	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/vmm"
)

var (
	_ engine.Engine        = (*Engine)(nil)
	_ engine.Timer         = (*Engine)(nil)
	_ engine.DecodeErrorer = (*Engine)(nil)
	_ engine.Peered        = (*Engine)(nil)
)

// Engine implements engine.Engine on an NVIDIA GPU: VMM for the arena,
// pinned host memory, upload streams, each with a decoder, and for an
// engine of one upload stream a decode stream beside it (decode.go).
type Engine struct {
	ctx      *cuda.Context
	external bool // the context and stream belong to the caller
	streams  []cuda.Stream
	decs     []*gpu.Decoder
	dstreams []decodeStream // one per upload stream, or none (see New)
	gran     uint64
	readS    cuda.Stream

	// The submitter (submit.go), one goroutine at a time, enqueues all
	// work on the streams: driver calls from many threads at once contend
	// in the driver (on the H200 a load of 9,555 tensors spent 5.1 s of
	// its readers' time in lock-free enqueues), and a lock around them
	// made every reader wait for the others' calls. qmu guards pending,
	// draining and closed; only the submitter touches stage and stageCap,
	// each stream's device staging memory for scatters, until Close.
	qmu      sync.Mutex
	idle     sync.Cond // draining became false
	pending  []request
	draining bool
	closed   bool
	stage    []cuda.DevicePtr
	stageCap []uint64
	batched  atomic.Uint64 // copies enqueued in batches of two or more

	// peers are the contexts of the engines AllowPeers named: Map grants
	// their devices access, and peer copies may read from them.
	peers []*cuda.Context

	mu          sync.Mutex
	maps        map[vmm.Ptr]cuda.MemHandle
	events      []*cudaEvent // live events
	free        []cuda.Event // completed events, recorded again by Record
	reclaimNext int
	pinned      map[*byte]uint64
	timing      atomic.Bool // Timer: bracket copies and decodes with timing events
	origin      cuda.Event  // Timer: time zero
	timedOps    []timedOp
	spare       map[uint64][][]byte // freed pinned buffers kept for reuse, by size
	kept        uint64              // bytes in spare
	keep        uint64              // most bytes spare may hold
	hugePages   bool                // pinned buffers of 2 MiB and more on huge pages (SPLITZIP_PINNED_PAGES)

	errMu    sync.Mutex
	errWords []byte // DecodeErrors' copies of the decoders' error words (pinned)
}

// New opens device ordinal with the given number of upload streams. An
// engine of one upload stream decodes on a stream beside it (decode.go).
func New(ordinal, streams int) (*Engine, error) {
	return newEngine(ordinal, streams, streams <= 1)
}

// newEngine is New, with a decode stream beside each upload stream when
// decodeStreams is set.
func newEngine(ordinal, streams int, decodeStreams bool) (*Engine, error) {
	huge, err := pinnedPages(os.Getenv("SPLITZIP_PINNED_PAGES"))
	if err != nil {
		return nil, err
	}
	l, err := cuda.Open()
	if err != nil {
		return nil, err
	}
	ctx, err := l.NewContext(ordinal)
	if err != nil {
		return nil, err
	}
	e := &Engine{ctx: ctx, maps: map[vmm.Ptr]cuda.MemHandle{}, pinned: map[*byte]uint64{}, hugePages: huge}
	e.idle.L = &e.qmu
	if e.gran, err = ctx.Granularity(false); err != nil {
		return nil, err
	}
	if e.readS, err = ctx.NewStream(); err != nil {
		return nil, err
	}
	for range max(streams, 1) {
		s, err := ctx.NewStream()
		if err != nil {
			e.Close()
			return nil, err
		}
		d, err := gpu.NewDecoder(ctx)
		if err != nil {
			ctx.DestroyStream(s)
			e.Close()
			return nil, err
		}
		e.streams = append(e.streams, s)
		e.decs = append(e.decs, d)
		e.stage = append(e.stage, 0)
		e.stageCap = append(e.stageCap, 0)
		if !decodeStreams {
			continue
		}
		ds, err := newDecodeStream(ctx)
		if err != nil {
			e.Close()
			return nil, err
		}
		e.dstreams = append(e.dstreams, ds)
	}
	return e, nil
}

// NewOn returns an engine whose one upload stream is s, a
// stream the caller owns in ctx (0 is the legacy default stream): copies,
// decodes and events go on it in order, with no decode stream beside it.
// Close leaves s and ctx open.
func NewOn(ctx *cuda.Context, s cuda.Stream) (*Engine, error) {
	huge, err := pinnedPages(os.Getenv("SPLITZIP_PINNED_PAGES"))
	if err != nil {
		return nil, err
	}
	e := &Engine{ctx: ctx, external: true, maps: map[vmm.Ptr]cuda.MemHandle{}, pinned: map[*byte]uint64{}, hugePages: huge}
	e.idle.L = &e.qmu
	if e.gran, err = ctx.Granularity(false); err != nil {
		return nil, err
	}
	d, err := gpu.NewDecoder(ctx)
	if err != nil {
		return nil, err
	}
	e.streams, e.decs = []cuda.Stream{s}, []*gpu.Decoder{d}
	e.stage, e.stageCap = []cuda.DevicePtr{0}, []uint64{0}
	if e.readS, err = ctx.NewStream(); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// Name returns the device name.
func (e *Engine) Name() string {
	n, _ := e.ctx.Name()
	return n
}

// KeepPinned makes FreePinned keep up to limit bytes of freed buffers
// for Pinned to hand out again (same size), so that transports created
// and closed in turn on a long-lived engine do not pin memory each time.
func (e *Engine) KeepPinned(limit uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.keep = limit
	if e.spare == nil {
		e.spare = map[uint64][][]byte{}
	}
}

// Pinned maps anonymous memory (mapHost: huge pages for buffers of 2 MiB
// and more) and registers it with the driver, which pins already-touched
// pages about ten times faster than cuMemHostAlloc.
func (e *Engine) Pinned(n uint64) ([]byte, error) {
	size := hostSize(n, e.hugePages)
	e.mu.Lock()
	if l := e.spare[size]; len(l) > 0 {
		b := l[len(l)-1]
		e.spare[size] = l[:len(l)-1]
		e.kept -= size
		e.mu.Unlock()
		return b[:n], nil
	}
	e.mu.Unlock()
	b, err := mapHost(n, e.hugePages)
	if err != nil {
		return nil, fmt.Errorf("pinning %d bytes: %w", n, err)
	}
	if err := e.ctx.HostRegister(b, cuda.HostRegisterPortable); err != nil {
		unmapHost(b)
		return nil, err
	}
	e.mu.Lock()
	e.pinned[&b[0]] = uint64(len(b))
	e.mu.Unlock()
	return b[:n], nil
}

// FreePinned unregisters and unmaps memory from Pinned.
func (e *Engine) FreePinned(b []byte) error {
	b = b[:cap(b)]
	if len(b) == 0 {
		return nil
	}
	e.mu.Lock()
	n, ok := e.pinned[&b[0]]
	if ok && e.kept+n <= e.keep {
		e.spare[n] = append(e.spare[n], b[:n])
		e.kept += n
		e.mu.Unlock()
		return nil
	}
	delete(e.pinned, &b[0])
	e.mu.Unlock()
	if !ok {
		return fmt.Errorf("cuda engine: freeing memory it did not pin")
	}
	b = b[:n]
	err := e.ctx.HostUnregister(b)
	if uerr := unmapHost(b); err == nil {
		err = uerr
	}
	return err
}

// Register pins b, memory this engine did not allocate that the device
// only reads (a shared segment mapped read-only), for every context of
// the process (engine.Registrar).
func (e *Engine) Register(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return e.ctx.HostRegister(b, cuda.HostRegisterPortable|cuda.HostRegisterReadOnly)
}

// Unregister unpins memory from Register.
func (e *Engine) Unregister(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return e.ctx.HostUnregister(b)
}

// Granularity returns the VMM allocation granularity.
func (e *Engine) Granularity() uint64 { return e.gran }

// Reserve reserves a virtual range.
func (e *Engine) Reserve(size uint64) (vmm.Ptr, error) {
	p, err := e.ctx.AddressReserve(size, e.gran)
	return vmm.Ptr(p), err
}

// Map creates physical memory for [p, p+n) and maps it with access for
// the device and its peers (AllowPeers).
func (e *Engine) Map(p vmm.Ptr, n uint64) error {
	h, err := e.ctx.MemCreate(n)
	if err != nil {
		return err
	}
	if err := e.ctx.MemMap(cuda.DevicePtr(p), n, h, e.peers...); err != nil {
		e.ctx.MemRelease(h)
		return err
	}
	e.mu.Lock()
	e.maps[p] = h
	e.mu.Unlock()
	return nil
}

// AllowPeers implements engine.Peered: peers are CUDA engines (of other
// devices, or of this one) that this one copies from or that copy from
// it. Call it before Map: memory mapped later grants their devices
// access. It fails when a peer is not a CUDA engine or its device cannot
// access this one's memory.
func (e *Engine) AllowPeers(peers []engine.Engine) error {
	var ctxs []*cuda.Context
	for _, p := range peers {
		o, ok := p.(*Engine)
		if !ok {
			return fmt.Errorf("cuda engine: peer %s is not a CUDA engine", p.Name())
		}
		if o == e {
			continue
		}
		for _, pair := range [][2]*cuda.Context{{e.ctx, o.ctx}, {o.ctx, e.ctx}} {
			ok, err := pair[0].CanAccessPeer(pair[1])
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("cuda engine: %s and %s cannot access each other's memory (no peer access)", e.Name(), o.Name())
			}
		}
		ctxs = append(ctxs, o.ctx)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.maps) > 0 {
		return fmt.Errorf("cuda engine: AllowPeers after memory was mapped")
	}
	e.peers = ctxs
	return nil
}

// Unmap unmaps [p, p+n) and releases its memory.
func (e *Engine) Unmap(p vmm.Ptr, n uint64) error {
	e.mu.Lock()
	h, ok := e.maps[p]
	delete(e.maps, p)
	e.mu.Unlock()
	if !ok {
		return fmt.Errorf("cuda engine: %#x is not mapped", p)
	}
	if err := e.ctx.MemUnmap(cuda.DevicePtr(p), n); err != nil {
		return err
	}
	return e.ctx.MemRelease(h)
}

// Release frees a reserved range.
func (e *Engine) Release(p vmm.Ptr, size uint64) error {
	return e.ctx.AddressFree(cuda.DevicePtr(p), size)
}

// Streams returns the number of upload streams.
func (e *Engine) Streams() int { return len(e.streams) }

// ReadBack copies device memory to dst and waits.
func (e *Engine) ReadBack(dst []byte, src vmm.Ptr) error {
	if err := e.ctx.CopyDtoHAsync(dst, cuda.DevicePtr(src), e.readS); err != nil {
		return err
	}
	return e.ctx.StreamSynchronize(e.readS)
}

// DecodeErrors returns the decode kernels' error reports since the last
// call (every decoder's, joined). Call it once the events after the
// decodes have completed: it reads the reports on a stream of its own,
// never touching the upload streams (which, for NewEngineOn, may be gone
// by then). Its first call pins a small buffer for them, which can fail.
func (e *Engine) DecodeErrors() error {
	decs := slices.Clone(e.decs)
	for _, d := range e.dstreams {
		decs = append(decs, d.dec)
	}
	e.errMu.Lock()
	defer e.errMu.Unlock()
	if e.errWords == nil {
		b, err := e.Pinned(uint64(len(decs)) * gpu.ErrorBytes)
		if err != nil {
			return err
		}
		e.errWords = b
	}
	// Every decoder's words in one pinned buffer, then one wait.
	n := gpu.ErrorBytes
	for i, d := range decs {
		if err := d.ReadError(e.errWords[i*n:(i+1)*n], e.readS); err != nil {
			return err
		}
	}
	if err := e.ctx.StreamSynchronize(e.readS); err != nil {
		return err
	}
	var errs []error
	for i, d := range decs {
		if err := d.CheckError(e.errWords[i*n:(i+1)*n], e.readS); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		// The flags were cleared on readS: done before the next call's reads.
		return errors.Join(append(errs, e.ctx.StreamSynchronize(e.readS))...)
	}
	return nil
}

// Close waits for the engine's work and frees everything. The caller's
// stream of NewEngineOn is not touched (it may have been destroyed):
// the engine waits for the events it recorded instead.
func (e *Engine) Close() error {
	e.stopSubmitting()
	e.mu.Lock()
	for _, c := range e.events {
		if e.external {
			e.ctx.EventSynchronize(c.ev)
		}
	}
	e.mu.Unlock()
	for i, s := range e.streams {
		if !e.external {
			e.ctx.StreamSynchronize(s)
		}
		if e.stage[i] != 0 {
			e.ctx.Free(e.stage[i])
		}
		e.decs[i].Close()
		if i < len(e.dstreams) {
			e.dstreams[i].close(e.ctx) // after s: it waits for s's copies
		}
		if !e.external {
			e.ctx.DestroyStream(s)
		}
	}
	e.mu.Lock()
	e.dropTimes()
	for _, c := range e.events {
		c.done.Store(true) // the engine is closing: nothing may wait on it now
		e.ctx.DestroyEvent(c.ev)
	}
	e.events = nil
	for _, ev := range e.free {
		e.ctx.DestroyEvent(ev)
	}
	e.free = nil
	var spare [][]byte
	for _, l := range e.spare {
		spare = append(spare, l...)
	}
	e.spare, e.kept, e.keep = nil, 0, 0
	e.mu.Unlock()
	for _, b := range spare {
		e.FreePinned(b)
	}
	e.errMu.Lock()
	if e.errWords != nil {
		e.FreePinned(e.errWords)
		e.errWords = nil
	}
	e.errMu.Unlock()
	if e.readS != 0 {
		e.ctx.DestroyStream(e.readS)
	}
	if e.external {
		return nil
	}
	return e.ctx.Close()
}

var (
	_ engine.Engine        = (*Engine)(nil)
	_ engine.Peered        = (*Engine)(nil)
	_ engine.Timer         = (*Engine)(nil)
	_ engine.DecodeErrorer = (*Engine)(nil)
)

// PrepareEntropy implements engine.Preparer: every decoder of the engine
// (one an upload stream, and one a decode stream) loads its entropy
// kernels.
func (e *Engine) PrepareEntropy() error { return e.eachDecoder((*gpu.Decoder).PrepareEntropy) }

// PrepareScatter implements engine.Preparer: every decoder of the engine
// looks its scatter kernels up and sets their attributes.
func (e *Engine) PrepareScatter() error { return e.eachDecoder((*gpu.Decoder).PrepareScatter) }

// eachDecoder calls fn on every decoder of the engine (one an upload
// stream, and one a decode stream) and returns the first error.
func (e *Engine) eachDecoder(fn func(*gpu.Decoder) error) error {
	for _, d := range e.decs {
		if err := fn(d); err != nil {
			return err
		}
	}
	for _, d := range e.dstreams {
		if err := fn(d.dec); err != nil {
			return err
		}
	}
	return nil
}

var _ engine.Preparer = (*Engine)(nil)
