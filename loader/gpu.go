package loader

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/splitzip/splitzip/engine/cudaengine"
	"github.com/splitzip/splitzip/gpu"
	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/load"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/transport"
	"github.com/splitzip/splitzip/vmm"
)

// gpuState is one device's context and, per caller stream, the transport
// that uploads on it.
type gpuState struct {
	ctx     *cuda.Context
	mu      sync.Mutex
	streams map[cuda.Stream]*streamTransport
	evs     map[cuda.Event]*batch
	dec     *gpu.Decoder // for Scatter, loaded on first use
	gemv    *gpu.Gemv    // for Gemv, loaded on first use
}

// streamTransport is a load's transports (load.NewTransports) on an
// engine that enqueues on one caller stream. Their pinned staging buffers
// persist until the loader is closed; the engine is shared (acquire,
// release).
type streamTransport struct {
	eng    *cudaengine.Engine
	ts     *load.Transports
	dev    int
	stream cuda.Stream
}

// batch is what an upload event covers.
type batch struct {
	st     *streamTransport
	fences []transport.Fence
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
	g := &gpuState{ctx: ctx, streams: map[cuda.Stream]*streamTransport{}, evs: map[cuda.Event]*batch{}}
	l.gpus[d] = g
	return g, nil
}

// engines are shared by the loaders of a process, one per (device,
// stream), and reference-counted: a loader takes one with acquire when it
// first uploads on a stream and gives it back when it closes. An engine
// no loader holds stays idle, with its context, its decode kernel and the
// pinned staging buffers that closed transports freed (at most
// keepPinned), until ReleaseIdle closes it: a handle opened after another
// closed (one load after another, as a transformers load opens and closes
// one) neither pins memory nor loads the kernel again, which costs tens of
// milliseconds a load.
var engines = struct {
	sync.Mutex
	m map[engineKey]*sharedEngine
}{m: map[engineKey]*sharedEngine{}}

type engineKey struct {
	dev int
	s   cuda.Stream
}

type sharedEngine struct {
	e    *cudaengine.Engine
	ctx  *cuda.Context
	refs int
}

// keepPinned is how much freed staging memory an engine keeps, idle or not.
const keepPinned = 1 << 30

// acquire returns the engine of stream s of device d, making it on first
// use, and counts a reference to it.
func acquire(d int, s cuda.Stream) (*cudaengine.Engine, error) {
	engines.Lock()
	defer engines.Unlock()
	k := engineKey{d, s}
	if se, ok := engines.m[k]; ok {
		se.refs++
		return se.e, nil
	}
	lib, err := cuda.Open()
	if err != nil {
		return nil, err
	}
	ctx, err := lib.NewContext(d)
	if err != nil {
		return nil, err
	}
	e, err := cudaengine.NewOn(ctx, s)
	if err != nil {
		ctx.Close()
		return nil, err
	}
	e.KeepPinned(keepPinned)
	engines.m[k] = &sharedEngine{e: e, ctx: ctx, refs: 1}
	return e, nil
}

// release gives back a reference from acquire. An engine left without
// one stays idle until ReleaseIdle, or until another engine of its device
// becomes idle: one idle engine a device at most, so that streams made
// and destroyed one after another (an offload runtime's) leave no pinned
// memory behind.
func release(d int, s cuda.Stream) {
	engines.Lock()
	defer engines.Unlock()
	k := engineKey{d, s}
	se, ok := engines.m[k]
	if !ok || se.refs == 0 {
		return
	}
	if se.refs--; se.refs > 0 {
		return
	}
	for ok, o := range engines.m {
		if ok != k && ok.dev == d && o.refs == 0 {
			delete(engines.m, ok)
			o.e.Close()
			o.ctx.Close()
		}
	}
}

// ReleaseIdle closes the engines no open loader uses, with their contexts
// and pinned staging memory, and returns how many it closed. Loaders
// opened later make new ones.
func ReleaseIdle() int {
	engines.Lock()
	defer engines.Unlock()
	n := 0
	for k, se := range engines.m {
		if se.refs > 0 {
			continue
		}
		delete(engines.m, k)
		se.e.Close()
		se.ctx.Close()
		n++
	}
	return n
}

// SetResident makes the loader's uploads keep what they read in pinned
// memory, payloads and raw tensor bytes, once per upload stream: a later
// upload of the same tensor on that stream reads no file and checks
// nothing again (the pinned-host tier of an offload runtime). Pinned
// memory then grows to the bytes uploaded. It must be called before the
// first upload; after, it is ErrInvalid.
func (l *Loader) SetResident(on bool) error {
	if l.uploading.Load() {
		return fmt.Errorf("%w: residency is set before the first upload", ErrInvalid)
	}
	l.resident.Store(on)
	return nil
}

// SetShared, with on, makes the loader's uploads resident (SetResident)
// with the resident copies of the payloads in one host copy that the
// processes of this machine loading the same payloads share (package
// nodeshare, load.Options.Share): the first upload stream of the first
// process reads and checks every payload into it; other streams and
// processes attach and read none. The copy is freed when the last
// process holding it closes its handle or exits. dir is the folder of
// the copies' holders files ("": $SPLITZIP_SHARE_DIR as Go read it at
// start, else /dev/shm/splitzip-UID; load.Options.ShareDir). It must be
// called before the first upload; after, it is ErrInvalid.
func (l *Loader) SetShared(on bool, dir string) error {
	if l.uploading.Load() {
		return fmt.Errorf("%w: sharing is set before the first upload", ErrInvalid)
	}
	l.shared.Store(on)
	l.shareDir.Store(&dir)
	if on {
		l.resident.Store(true)
		if l.staging.Shared == nil {
			lay := transport.LayoutShared(l.c, l.specs)
			l.staging.Shared = &lay
		}
	}
	return nil
}

// transportFor returns this loader's transport on stream s of device d,
// creating it on first use.
func (l *Loader) transportFor(g *gpuState, d int, s cuda.Stream) (*streamTransport, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if st, ok := g.streams[s]; ok {
		return st, nil
	}
	eng, err := acquire(d, s)
	if err != nil {
		return nil, err
	}
	l.uploading.Store(true)
	o := l.opts
	o.Resident = l.resident.Load()
	o.Share = o.Resident && l.shared.Load()
	// The shared copy's regions (each layer's fixed payloads) upload
	// with one copy and one scatter a region when a batch holds a whole
	// one; payloads are packed privately only where the copy lacks them.
	o.ResidentPacks = o.Share
	if dir := l.shareDir.Load(); dir != nil {
		o.ShareDir = *dir
	}
	ts, err := load.NewTransports(eng, l.c, l.staging, o)
	if err != nil {
		release(d, s)
		return nil, err
	}
	t := &streamTransport{eng: eng, ts: ts, dev: d, stream: s}
	g.streams[s] = t
	return t, nil
}

// Upload enqueues on the caller's stream the transfer of tensor i into the
// device range [dst, dst+capacity) of device d and returns an event after
// it. It is UploadBatch of one tensor.
func (l *Loader) Upload(i, d int, dst, capacity uint64, stream uintptr) (uintptr, error) {
	return l.UploadBatch([]int{i}, d, []uint64{dst}, []uint64{capacity}, stream)
}

// UploadBatch enqueues on the caller's stream (of device d, in its primary
// context) the transfer of tensors idx[k] into the device ranges
// [dsts[k], dsts[k]+caps[k]) and returns one event recorded after all of
// them. Payloads are copied compressed and decoded in place, small tensors
// packed several to a copy, others copied raw; reads run in parallel.
// Everything is checked before anything is enqueued: indices, capacities,
// destinations, and that no source shard changed since compression. An
// error found while reading (a payload failing its checksum, a short read)
// is returned after the rest has been enqueued, naming the tensor; the
// event is then not returned and the failed tensor's range holds garbage.
func (l *Loader) UploadBatch(idx []int, d int, dsts, caps []uint64, stream uintptr) (uintptr, error) {
	if len(dsts) != len(idx) || len(caps) != len(idx) {
		return 0, fmt.Errorf("%w: %d indices, %d destinations, %d capacities", ErrInvalid, len(idx), len(dsts), len(caps))
	}
	bs := make([]*vmm.Binding, len(idx))
	shards := map[*shardcache.Shard]string{}
	for k, i := range idx {
		t, err := l.Tensor(i)
		if err != nil {
			return 0, err
		}
		switch {
		case caps[k] < t.Size:
			return 0, fmt.Errorf("tensor %q: %w: a destination of %d bytes for %d", t.Name, ErrTooSmall, caps[k], t.Size)
		case dsts[k] == 0 && t.Size > 0:
			return 0, fmt.Errorf("tensor %q: %w: null destination", t.Name, ErrInvalid)
		case t.Compressed && dsts[k]%16 != 0:
			return 0, fmt.Errorf("tensor %q: %w: destination %#x of a compressed tensor is not 16-byte aligned", t.Name, ErrInvalid, dsts[k])
		}
		// A raw tensor is read where its bytes are: the source slice, or
		// its copy in the cache when the source is absent.
		path, off := t.Shard, t.Offset
		if !t.Compressed {
			// An entropy payload without its source keeps its source
			// slice: the payload transport decodes it on the host.
			if path, off, err = l.rawSlice(t); errors.Is(err, shardcache.ErrHostDecode) {
				path, off = t.Shard, t.Offset
			} else if err != nil {
				return 0, err
			}
		} else {
			shards[t.shard] = t.Shard
		}
		bs[k] = &vmm.Binding{Spec: vmm.Spec{Name: t.Name, DType: t.DType, Shape: t.Shape, Shard: path, Offset: off, Size: t.Size,
			Ref: &t.hit},
			Index: i, Addr: vmm.Ptr(dsts[k])}
	}
	for sh, path := range shards {
		// An absent source is no error for payloads; a remote cache's
		// sources are never read here.
		if _, err := l.c.SourcePresent(sh, path); err != nil {
			return 0, err
		}
	}
	g, err := l.device(d)
	if err != nil {
		return 0, err
	}
	s := cuda.Stream(stream)
	st, err := l.transportFor(g, d, s)
	if err != nil {
		return 0, err
	}
	fences := st.ts.Payloads().UploadBatch(context.Background(), bs)
	var failed error
	for _, f := range fences {
		if failed = transport.Failed(f); failed != nil {
			break
		}
	}
	ev, err := g.ctx.NewEvent(cuda.EventDisableTiming | cuda.EventBlockingSync)
	if err != nil {
		return 0, err
	}
	if err := g.ctx.Record(ev, s); err != nil {
		g.ctx.DestroyEvent(ev)
		return 0, err
	}
	if failed != nil {
		// The caller gets no event; the enqueued work stays ordered on
		// its stream.
		g.ctx.DestroyEvent(ev)
		return 0, failed
	}
	g.mu.Lock()
	g.evs[ev] = &batch{st: st, fences: fences}
	g.mu.Unlock()
	return uintptr(ev), nil
}

// EventWait waits for an upload's event and reports errors of its work:
// failed copies or launches, and payloads the decode kernel found corrupt.
func (l *Loader) EventWait(ev uintptr) error {
	g, b, err := l.eventOwner(ev)
	if err != nil {
		return err
	}
	if err := g.ctx.EventSynchronize(cuda.Event(ev)); err != nil {
		return err
	}
	var errs []error
	for _, f := range b.fences {
		errs = append(errs, f.Wait())
	}
	errs = append(errs, b.st.eng.DecodeErrors())
	return errors.Join(errs...)
}

// EventRelease frees an upload's event; the upload may still be running.
func (l *Loader) EventRelease(ev uintptr) error {
	g, _, err := l.eventOwner(ev)
	if err != nil {
		return err
	}
	g.mu.Lock()
	delete(g.evs, cuda.Event(ev))
	g.mu.Unlock()
	return g.ctx.DestroyEvent(cuda.Event(ev))
}

func (l *Loader) eventOwner(ev uintptr) (*gpuState, *batch, error) {
	l.gpuMu.Lock()
	defer l.gpuMu.Unlock()
	for _, g := range l.gpus {
		g.mu.Lock()
		b, ok := g.evs[cuda.Event(ev)]
		g.mu.Unlock()
		if ok {
			return g, b, nil
		}
	}
	return nil, nil, fmt.Errorf("%w: unknown event %#x", ErrInvalid, ev)
}

func (g *gpuState) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for ev := range g.evs {
		g.ctx.EventSynchronize(ev)
		g.ctx.DestroyEvent(ev)
	}
	for _, st := range g.streams {
		st.ts.Close() // its staging memory goes back to the engine
		release(st.dev, st.stream)
	}
	if g.dec != nil {
		g.dec.Close()
	}
	if g.gemv != nil {
		g.gemv.Close()
	}
	g.ctx.Close()
}
