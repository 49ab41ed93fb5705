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
	"github.com/splitzip/splitzip/codec/payload"
	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/scatter"
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
	// sees each payload's head (a packed one's too).
	Copy   func(dst engine.DevPtr, n int) error
	Decode func(dst engine.DevPtr, h payload.Head) error
	// Map, if set, is called before memory is mapped (out of memory).
	Map func(n uint64) error
	// Scatter, if set, is called before a packed upload of items runs.
	Scatter func(items []scatter.Item) error
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

// StagingLimit is the host engine's cap on a load's staging (Stager):
// 24 MiB a reader, at least 48 MiB. On dev (2 cores, 2 readers) a 1 GiB
// load from the page cache ran at 19.1-19.6 GB/s (a cache of raw copies)
// and 19.5-23.2 (raw) under 48 MiB, against 11.0-11.9 and 14.0-14.6
// under the transports' 256 MiB: the copies read what the readers wrote
// last, from the cache while few buffers are in flight (2026-12-07).
func (e *Engine) StagingLimit(readers int) int64 {
	return max(48<<20, int64(readers)*24<<20)
}

var _ engine.Stager = (*Engine)(nil)

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
	var run []func() error
	switch {
	case w.Items != nil || len(w.Entropy) > 0:
		// Put checks the items; the table it writes is not what the
		// scatter below reads (it works from the items).
		if len(w.Entropy) > 0 {
			if err := w.CheckEntropy(); err != nil {
				return nil, err
			}
		}
		if err := scatter.Put(w.TableDst(), w.Items, w.Staged()); err != nil {
			return nil, err
		}
		if len(w.Entropy) > 0 {
			if err := w.PutEntropy(); err != nil {
				return nil, err
			}
		}
		ents := append([]scatter.Entropy(nil), w.Entropy...)
		ehs := make([]entropy.Head, len(ents))
		for i := range ents {
			ehs[i] = *ents[i].Head
			ents[i].Head = &ehs[i]
		}
		// The items and their headers are the caller's again once
		// Submit returns (engine.Work): the scatter runs on copies.
		its := append([]scatter.Item(nil), w.Items...)
		hs := make([]codec.Header, len(its))
		for i := range its {
			if its[i].Header != nil {
				hs[i] = *its[i].Header
				its[i].Header = &hs[i]
			}
		}
		// As on a GPU: the packed buffer is copied to staging memory,
		// then scattered from there.
		var staged []byte
		run = append(run,
			func() error {
				return e.timed(false, func() error { staged = append([]byte(nil), w.Src...); return nil })
			},
			func() error { return e.timed(true, func() error { return e.scatter(staged, its) }) },
			func() error { return e.timed(true, func() error { return e.decodeEntropy(staged, ents) }) })
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
			h := payload.Clone(w.Decode)
			run = append(run, func() error { return e.timed(true, func() error { return e.decodeInPlace(w.Dst, h) }) })
		}
	}
	st, err := e.stream(s)
	if err != nil {
		return nil, err
	}
	ev := &cpuEvent{done: make(chan struct{})}
	if e.dstreams != nil && w.Items == nil && w.Decode != nil {
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

var (
	_ engine.Engine = (*Engine)(nil)
	_ engine.Peered = (*Engine)(nil)
	_ engine.Timer  = (*Engine)(nil)
)
