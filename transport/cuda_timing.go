package transport

// Device times of the CUDA engine (Timer): each timed copy or decode is
// bracketed by two events, and TakeTimes merges the spans per kind.

import (
	"time"

	"github.com/splitzip/splitzip/gpu/cuda"
)

type timedOp struct {
	decode     bool
	start, end cuda.Event
}

// timed enqueues op on stream s, between two timing events when timing.
// Without its events, the op runs untimed.
func (e *CUDAEngine) timed(s int, decode bool, op func() error) error {
	if !e.timing.Load() {
		return op()
	}
	start, err := e.timingEvent(s)
	if err != nil {
		return op()
	}
	if err := op(); err != nil {
		e.ctx.DestroyEvent(start)
		return err
	}
	end, err := e.timingEvent(s)
	if err != nil {
		e.ctx.DestroyEvent(start)
		return nil
	}
	e.mu.Lock()
	e.timedOps = append(e.timedOps, timedOp{decode, start, end})
	e.mu.Unlock()
	return nil
}

// timingEvent records a new timing event on stream s.
func (e *CUDAEngine) timingEvent(s int) (cuda.Event, error) {
	ev, err := e.ctx.NewEvent(cuda.EventBlockingSync)
	if err != nil {
		return 0, err
	}
	if err := e.ctx.Record(ev, e.streams[s]); err != nil {
		e.ctx.DestroyEvent(ev)
		return 0, err
	}
	return ev, nil
}

// StartTiming implements Timer: time zero is an event on stream 0.
func (e *CUDAEngine) StartTiming() error {
	ev, err := e.timingEvent(0)
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
func (e *CUDAEngine) TakeTimes() (DeviceTimes, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	defer e.dropTimes()
	e.timing.Store(false)
	if e.origin == 0 {
		return DeviceTimes{}, nil
	}
	if err := e.ctx.EventSynchronize(e.origin); err != nil {
		return DeviceTimes{}, err
	}
	var copies, decodes []interval
	for _, op := range e.timedOps {
		if err := e.ctx.EventSynchronize(op.end); err != nil {
			return DeviceTimes{}, err
		}
		a, err := e.ctx.Elapsed(e.origin, op.start)
		if err != nil {
			return DeviceTimes{}, err
		}
		b, err := e.ctx.Elapsed(e.origin, op.end)
		if err != nil {
			return DeviceTimes{}, err
		}
		iv := interval{time.Duration(float64(a) * 1e6), time.Duration(float64(b) * 1e6)}
		if op.decode {
			decodes = append(decodes, iv)
		} else {
			copies = append(copies, iv)
		}
	}
	return busyTimes(copies, decodes), nil
}

// dropTimes destroys the timing events (e.mu held).
func (e *CUDAEngine) dropTimes() {
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
