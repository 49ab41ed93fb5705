package transport

import (
	"sync/atomic"

	"github.com/splitzip/splitzip/engine"
)

// slot is a pinned staging buffer and the event of the last copy from it.
type slot struct {
	buf []byte
	ev  engine.Event
}

// newRing allocates n pinned staging buffers of size bytes; on failure it
// frees what it allocated.
func newRing(eng engine.Engine, n int, size uint64) (chan *slot, error) {
	ring := make(chan *slot, n)
	for range n {
		b, err := eng.Pinned(size)
		if err != nil {
			freeRing(eng, ring)
			return nil, err
		}
		ring <- &slot{buf: b}
	}
	return ring, nil
}

// freeRing closes a ring whose buffers are all back in it, waits for the
// last copy from each and frees them.
func freeRing(eng engine.Engine, ring chan *slot) {
	close(ring)
	for s := range ring {
		if s.ev != nil {
			s.ev.Wait()
		}
		eng.FreePinned(s.buf)
	}
}

// streams picks upload streams round-robin; transports share no lock to
// do so, and none is held across a submission.
type streams struct{ next atomic.Uint64 }

// pick returns the next of eng's streams.
func (r *streams) pick(eng engine.Engine) int {
	return int((r.next.Add(1) - 1) % uint64(eng.Streams()))
}
