package cudaengine

// Submissions: what goroutines submit is enqueued on the streams by one
// goroutine at a time, the submitter, so driver calls never contend and
// no submitting goroutine waits for a lock held across them.

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"

	"github.com/splitzip/splitzip/codec/payload"
	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/gpu"
	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/scatter"
)

// ErrClosed is returned by Submit and WaitEvent on a closed engine.
var ErrClosed = errors.New("cuda engine: closed")

// request is one submission, or (wait set) a cross-stream wait whose
// outcome goes to reply.
type request struct {
	s int
	w engine.Work // its Items taken out by Submit: the scatter's counts below
	// items and units of a scatter (items > 0): what the launch needs of
	// w.Items, counted by Submit so that the caller may reuse them.
	items int
	units uint64
	// ent is the batch launch of w's entropy payloads (ent.Count > 0),
	// whose descriptors Submit wrote at w.EntropyAt; staged is where w's
	// staged bytes end (w.Staged(), kept when w.Entropy is let go).
	ent    gpu.EntropyBatch
	staged uint64
	ev     *cudaEvent
	wait   *cudaEvent
	reply  chan error
}

// cudaEvent is an engine event: the event recorded after a submission's
// work, once the submitter has enqueued it (ready closed). err is what
// failed while enqueueing that work; Wait returns it once the work that
// was enqueued has finished.
//
// Record reclaims completed events once many are live, marking them done
// before recording them again for later submissions, so waiting for one
// returns at once. Events block rather than spin in Wait: transports wait
// on many at once (a staging buffer's last copy, each binding's fence),
// and spinning threads would take the cores the file readers need.
type cudaEvent struct {
	e     *Engine
	ready chan struct{}
	ev    cuda.Event // 0: none could be recorded (the stream was synchronized instead)
	err   error
	done  atomic.Bool // completed (and perhaps recorded again)
}

func (c *cudaEvent) Wait() error {
	if c.done.Load() {
		return c.err
	}
	<-c.ready
	if c.ev == 0 {
		return c.err
	}
	err := c.e.ctx.EventSynchronize(c.ev)
	if c.done.Load() {
		return c.err // reclaimed while we waited: it had completed
	}
	if err == nil {
		c.done.Store(true)
		return c.err
	}
	return errors.Join(c.err, err)
}

func (c *cudaEvent) Done() bool {
	if c.done.Load() {
		return true
	}
	select {
	case <-c.ready:
	default:
		return false
	}
	if c.ev == 0 {
		return true
	}
	done, err := c.e.ctx.Query(c.ev)
	if done && err == nil {
		c.done.Store(true)
	}
	return done || err != nil
}

// Submit implements engine.Engine. The work goes to the submitter (see
// send); the event returned is ready once it has been enqueued, and a
// failed copy or launch is its error. What callers have in flight is
// bounded by their staging buffers, each held until its event completes.
func (e *Engine) Submit(s int, w engine.Work) (engine.Event, error) {
	if s < 0 || s >= len(e.streams) {
		return nil, fmt.Errorf("cuda engine: no stream %d", s)
	}
	r := request{s: s, w: w, staged: w.Staged()}
	if len(w.Entropy) > 0 {
		if err := w.CheckEntropy(); err != nil {
			return nil, err
		}
		if w.Items == nil {
			r.items = -1 // the staging buffer is copied, no scatter launched
		}
	}
	if w.Items != nil {
		if err := scatter.Put(w.TableDst(), w.Items, w.Staged()); err != nil {
			return nil, err
		}
		if w.Table != nil {
			r.w.Table = w.Table[:scatter.TableBytes(len(w.Items))]
		}
		// The table is written (into Src, or Table); the launch needs only
		// the counts.
		r.items, r.units, r.w.Items = len(w.Items), scatter.Units(w.Items), nil
		if r.items == 0 {
			r.items = -1 // an empty table: nothing to launch, but no plain copy either
		}
	}
	if len(w.Entropy) > 0 {
		if err := w.PutEntropy(); err != nil {
			return nil, err
		}
		r.ent, r.w.Entropy = gpu.PlanEntropyBatch(w.Entropy), nil
	}
	// The submitter launches later: the head is the submission's own.
	r.w.Decode = payload.Clone(w.Decode)
	c := &cudaEvent{e: e, ready: make(chan struct{})}
	r.ev = c
	if err := e.send(r); err != nil {
		return nil, err
	}
	return c, nil
}

// WaitEvent makes stream s wait for ev, in submission order.
func (e *Engine) WaitEvent(s int, ev engine.Event) error {
	c, ok := ev.(*cudaEvent)
	if !ok || c.e != e {
		return ev.Wait()
	}
	if c.done.Load() {
		return nil
	}
	if s < 0 || s >= len(e.streams) {
		return fmt.Errorf("cuda engine: no stream %d", s)
	}
	reply := make(chan error, 1)
	if err := e.send(request{s: s, wait: c, reply: reply}); err != nil {
		return err
	}
	return <-reply
}

// send hands r to the submitter: when no goroutine is submitting, the
// caller becomes the submitter and enqueues r, and whatever others hand
// over meanwhile, itself; otherwise r waits for the one submitting.
// Either way one goroutine at a time calls the driver to enqueue, in the
// order requests arrived, and no other waits for it (a dedicated
// submitter thread woken for each request was 10% slower on the H200's
// 16 MiB copies: the wake-ups delayed every copy).
func (e *Engine) send(r request) error {
	e.qmu.Lock()
	if e.closed {
		e.qmu.Unlock()
		return ErrClosed
	}
	e.pending = append(e.pending, r)
	if e.draining {
		e.qmu.Unlock()
		return nil
	}
	e.draining = true
	e.qmu.Unlock()
	e.drain()
	return nil
}

// drain enqueues pending requests until there are none, then gives up
// the submitter's role.
func (e *Engine) drain() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var batch []request
	for {
		e.qmu.Lock()
		batch, e.pending = e.pending, batch[:0]
		if len(batch) == 0 {
			e.draining = false
			e.idle.Broadcast()
			e.qmu.Unlock()
			return
		}
		e.qmu.Unlock()
		e.runAll(batch)
		clear(batch)
	}
}

// run enqueues one request.
func (e *Engine) run(r request) {
	if r.wait != nil {
		r.reply <- e.waitEvent(r.s, r.wait)
		return
	}
	r.ev.ev, r.ev.err = e.submit(r)
	if r.ev.ev != 0 {
		e.track(r.ev)
	}
	close(r.ev.ready)
}

// stopSubmitting refuses later requests and waits for the submitter to
// finish those already handed over.
func (e *Engine) stopSubmitting() {
	e.qmu.Lock()
	defer e.qmu.Unlock()
	e.closed = true
	for e.draining {
		e.idle.Wait()
	}
}

// waitEvent enqueues the wait of stream s for c, recorded earlier.
func (e *Engine) waitEvent(s int, c *cudaEvent) error {
	<-c.ready // submitted before this request: already closed
	if c.ev == 0 || c.done.Load() {
		return c.err
	}
	err := e.ctx.StreamWaitEvent(e.streams[s], c.ev)
	if err != nil && c.done.Load() {
		return nil
	}
	return err
}

// submit enqueues r's work and an event after it on its stream, as the
// submitter. When no event can be recorded, it waits for the stream
// instead, so that nothing of the work is running once it returns.
func (e *Engine) submit(r request) (cuda.Event, error) {
	s, w := r.s, r.w
	last := e.streams[s]
	err := e.enqueueCopy(r)
	if err == nil && w.Decode != nil {
		var ds cuda.Stream
		var dec *gpu.Decoder
		if ds, dec, err = e.decodeOn(s); err == nil {
			last, err = ds, e.launchDecode(ds, dec, w)
		}
	}
	return e.fence(last, err)
}

// fence records the event after work that ended on stream last with err
// (see submit).
func (e *Engine) fence(last cuda.Stream, err error) (cuda.Event, error) {
	ev, rerr := e.record(last)
	if rerr != nil {
		return 0, errors.Join(err, rerr, e.ctx.StreamSynchronize(last))
	}
	return ev, err
}

// enqueueCopy enqueues r's copy, or its copy and scatter, on its stream.
func (e *Engine) enqueueCopy(r request) error {
	s, w := r.s, r.w
	st := e.streams[s]
	switch {
	case r.items < 0 && r.ent.Count == 0:
		return nil
	case r.items != 0:
		return e.scatter(s, w, r.staged, max(r.items, 0), r.units, r.ent)
	case w.N > 0 && w.Peer != nil && w.Peer != engine.Engine(e):
		p, ok := w.Peer.(*Engine)
		if !ok {
			return fmt.Errorf("cuda engine: a peer copy from %s, not a CUDA engine", w.Peer.Name())
		}
		return e.timed(st, false, func() error {
			return e.ctx.CopyPeerAsync(cuda.DevicePtr(w.Dst), cuda.DevicePtr(w.From), p.ctx, w.N, st)
		})
	case w.N > 0:
		return e.timed(st, false, func() error { return e.ctx.CopyDtoDAsync(cuda.DevicePtr(w.Dst), cuda.DevicePtr(w.From), w.N, st) })
	case len(w.Src) > 0:
		return e.timed(st, false, func() error { return e.ctx.CopyHtoDAsync(cuda.DevicePtr(w.Dst), w.Src, st) })
	}
	return nil
}

// launchDecode enqueues w's in-place decode on ds with dec (see decodeOn).
func (e *Engine) launchDecode(ds cuda.Stream, dec *gpu.Decoder, w engine.Work) error {
	switch h := w.Decode.(type) {
	case *payload.Fixed:
		return e.timed(ds, true, func() error { return dec.LaunchInPlace(cuda.DevicePtr(w.Dst), &h.Header, ds) })
	case *payload.Entropy:
		return e.timed(ds, true, func() error { return dec.LaunchEntropyInPlace(cuda.DevicePtr(w.Dst), h.Head, ds) })
	}
	return fmt.Errorf("cuda engine: %w: %v", payload.ErrKind, w.Decode.Kind())
}

// scatter enqueues on stream s the copy of w's packed staging buffer
// Src, whose table is written (or is w.Table, copied over its room), into
// the stream's staging memory (grown as needed), the scatter kernel over
// its items (if any) and the batch decode of its entropy payloads (if
// any), whose descriptors lie at w.EntropyAt; staged is where its staged
// bytes end.
func (e *Engine) scatter(s int, w engine.Work, staged uint64, items int, units uint64, ent gpu.EntropyBatch) error {
	packed, table := w.Src, w.Table
	n := uint64(len(packed))
	if e.stageCap[s] < n {
		// Earlier scatters on s may still read the old staging memory.
		if err := e.ctx.StreamSynchronize(e.streams[s]); err != nil {
			return err
		}
		if e.stage[s] != 0 {
			e.ctx.Free(e.stage[s])
			e.stage[s], e.stageCap[s] = 0, 0
		}
		p, err := e.ctx.Alloc(max(n, 8<<20))
		if err != nil {
			return err
		}
		e.stage[s], e.stageCap[s] = p, max(n, 8<<20)
	}
	st := e.streams[s]
	err := e.timed(st, false, func() error {
		if len(table) == 0 {
			return e.ctx.CopyHtoDAsync(e.stage[s], packed, st)
		}
		// The table from its own buffer, then what follows its room.
		tb := uint64(len(table))
		if err := e.ctx.CopyHtoDAsync(e.stage[s], table, st); err != nil || n <= tb {
			return err
		}
		return e.ctx.CopyHtoDAsync(e.stage[s]+cuda.DevicePtr(tb), packed[tb:], st)
	})
	if err != nil {
		return err
	}
	if items > 0 {
		if err := e.timed(st, true, func() error { return e.decs[s].LaunchScatter(e.stage[s], staged, items, units, st) }); err != nil {
			return err
		}
	}
	if ent.Count == 0 {
		return nil
	}
	return e.timed(st, true, func() error { return e.decs[s].LaunchEntropyBatch(e.stage[s], w.EntropyAt, ent, st) })
}

// reclaimAt is the number of live events at which the submitter takes
// back the completed ones.
const reclaimAt = 4096

// maxFree bounds the completed events kept to be recorded again.
const maxFree = 8192

// record records an event on stream st: a completed one taken back, or a
// new one.
func (e *Engine) record(st cuda.Stream) (cuda.Event, error) {
	var ev cuda.Event
	e.mu.Lock()
	if n := len(e.free); n > 0 {
		ev, e.free = e.free[n-1], e.free[:n-1]
	}
	e.mu.Unlock()
	if ev == 0 {
		var err error
		if ev, err = e.ctx.NewEvent(cuda.EventDisableTiming | cuda.EventBlockingSync); err != nil {
			return 0, err
		}
	}
	if err := e.ctx.Record(ev, st); err != nil {
		e.ctx.DestroyEvent(ev)
		return 0, err
	}
	return ev, nil
}

// track adds a recorded event to the live ones, taking back the completed
// ones when there are many.
func (e *Engine) track(c *cudaEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.events) >= max(reclaimAt, e.reclaimNext) {
		e.reclaim()
		e.reclaimNext = 2 * len(e.events) // pending events: do not rescan each time
	}
	e.events = append(e.events, c)
}

// reclaim takes completed events back (e.mu held): their wrappers are
// marked done, so nothing calls the driver on them again, and record
// records them anew (creating an event costs a driver call).
func (e *Engine) reclaim() {
	live := e.events[:0]
	for _, c := range e.events {
		// Keep what has not completed, and what failed on the device:
		// its Wait must still report the error.
		if done, err := e.ctx.Query(c.ev); err != nil || !done {
			live = append(live, c)
			continue
		}
		c.done.Store(true)
		if len(e.free) < maxFree {
			e.free = append(e.free, c.ev)
		} else {
			e.ctx.DestroyEvent(c.ev)
		}
	}
	clear(e.events[len(live):])
	e.events = live
}
