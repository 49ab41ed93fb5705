package cudaengine

// Device times of the CUDA engine (Timer): each timed copy or decode is
// bracketed by two events, and TakeTimes merges the spans per kind.

import (
	"time"

	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/gpu/cuda"
)

type timedOp struct {
	decode     bool
	start, end cuda.Event
}

// timed enqueues op on stream st, between two timing events when timing.
// Without its events, the op runs untimed.
func (e *Engine) timed(st cuda.Stream, decode bool, op func() error) error {
	if !e.timing.Load() {
		return op()
	}
	start, err := e.timingEvent(st)
	if err != nil {
		return op()
	}
	if err := op(); err != nil {
		e.ctx.DestroyEvent(start)
		return err
	}
	end, err := e.timingEvent(st)
	if err != nil {
		e.ctx.DestroyEvent(start)
		return nil
	}
	e.mu.Lock()
	e.timedOps = append(e.timedOps, timedOp{decode, start, end})
	e.mu.Unlock()
	return nil
}

// timingEvent records a new timing event on stream st.
func (e *Engine) timingEvent(st cuda.Stream) (cuda.Event, error) {
	ev, err := e.ctx.NewEvent(cuda.EventBlockingSync)
	if err != nil {
		return 0, err
	}
	if err := e.ctx.Record(ev, st); err != nil {
		e.ctx.DestroyEvent(ev)
		return 0, err
	}
	return ev, nil
}

// StartTiming implements Timer: time zero is an event on stream 0.
func (e *Engine) StartTiming() error {
	ev, err := e.timingEvent(e.streams[0])
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.dropTimes()
	e.origin = ev
	e.timing.Store(true)
	return nil
}

// TakeTimes implements Timer; the timed work must have completed.
func (e *Engine) TakeTimes() (engine.DeviceTimes, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	defer e.dropTimes()
	e.timing.Store(false)
	if e.origin == 0 {
		return engine.DeviceTimes{}, nil
	}
	if err := e.ctx.EventSynchronize(e.origin); err != nil {
		return engine.DeviceTimes{}, err
	}
	var copies, decodes []engine.Interval
	for _, op := range e.timedOps {
		if err := e.ctx.EventSynchronize(op.end); err != nil {
			return engine.DeviceTimes{}, err
		}
		a, err := e.ctx.Elapsed(e.origin, op.start)
		if err != nil {
			return engine.DeviceTimes{}, err
		}
		b, err := e.ctx.Elapsed(e.origin, op.end)
		if err != nil {
			return engine.DeviceTimes{}, err
		}
		iv := engine.Interval{Start: time.Duration(float64(a) * 1e6), End: time.Duration(float64(b) * 1e6)}
		if op.decode {
			decodes = append(decodes, iv)
		} else {
			copies = append(copies, iv)
		}
	}
	return engine.BusyTimes(copies, decodes), nil
}

// dropTimes destroys the timing events (e.mu held).
func (e *Engine) dropTimes() {
	for _, op := range e.timedOps {
		e.ctx.DestroyEvent(op.start)
		e.ctx.DestroyEvent(op.end)
	}
	e.timedOps = nil
	if e.origin != 0 {
		e.ctx.DestroyEvent(e.origin)
		e.origin = 0
	}
}
