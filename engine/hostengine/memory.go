package hostengine

// Memory: pinned buffers are ordinary memory, and device memory is address
// ranges reserved and then backed by Go slices, piece by piece.

import (
	"fmt"

	"github.com/splitzip/splitzip/engine"
)

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
