package pipeline

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sync/semaphore"

	"github.com/splitzip/splitzip/codec"
)

// DefaultMemory is the default memory budget of Compress, Verify and
// Decompress: what their working buffers may hold at once, whatever the
// number of jobs, the core count and the tensor sizes.
const DefaultMemory = 512 << 20

// MinMemory is the smallest budget accepted: a few jobs' working sets.
const MinMemory = 32 << 20

// pieceBytes is how much of a tensor verify and decompress hold at a
// time: a whole number of chunks (a variable for tests).
var pieceBytes = 128 * 2 * codec.ChunkValues

// tableBytes bounds what a job holds per chunk of a payload besides its
// pieces: the encoder's chunk entries and CRCs, the reader's tables.
func tableBytes(size uint64) uint64 {
	return 32 * (size/(2*codec.ChunkValues) + 1)
}

// budget is the memory a run's jobs share: each job holds its share of
// bytes from it while it works on a tensor, so at most the budget is held
// at once and jobs wait when it is spent.
type budget struct {
	sem   *semaphore.Weighted
	total uint64
	mu    sync.Mutex
	free  []*pieces // pieces of jobs that finished, for the next
}

// newBudget returns a budget of memory bytes; 0 means DefaultMemory.
func newBudget(memory uint64) (*budget, error) {
	if memory == 0 {
		memory = DefaultMemory
	}
	if memory < MinMemory {
		return nil, fmt.Errorf("%w: memory budget of %d bytes is below the minimum of %d MiB", ErrOption, memory, MinMemory>>20)
	}
	return &budget{sem: semaphore.NewWeighted(int64(memory)), total: memory}, nil
}

// jobs returns how many jobs to start: want, but no more than the budget
// admits at once at cost bytes each, nor than the n items there are to
// work on, and at least one. A job the budget could never admit would
// only wait, and its goroutine and buffers would count against the memory
// the budget is meant to bound.
func (b *budget) jobs(want, n int, cost uint64) int {
	admitted := (b.total - min(b.total, runBytes)) / max(cost, 1)
	if uint64(want) > admitted {
		want = int(admitted)
	}
	return max(1, min(want, n))
}

// runBytes is what a run holds besides its jobs' shares: the program and
// the Go runtime, the index being built, the writer's buffers. The job
// count leaves it out of the budget (or half the budget, if smaller), so
// that the budget bounds the whole process, not only the jobs.
const runBytes = 24 << 20

// hold takes n bytes of the budget (all of it when n is larger: such a
// job then runs alone) and returns the function that gives them back.
func (b *budget) hold(ctx context.Context, n uint64) (func(), error) {
	n = min(n, b.total)
	if err := b.sem.Acquire(ctx, int64(n)); err != nil {
		return nil, err
	}
	return func() { b.sem.Release(int64(n)) }, nil
}

// take holds a job's share of the budget, its pieces (pieceCost) plus
// extra bytes, and returns the pieces, reused from a finished job when one
// is free, and the function that gives both back. No more pieces are ever
// allocated than the budget admits at once.
func (b *budget) take(ctx context.Context, extra uint64) (*pieces, func(), error) {
	release, err := b.hold(ctx, pieceCost()+extra)
	if err != nil {
		return nil, nil, err
	}
	b.mu.Lock()
	var p *pieces
	if n := len(b.free); n > 0 {
		p, b.free = b.free[n-1], b.free[:n-1]
	} else {
		p = newPieces()
	}
	b.mu.Unlock()
	return p, func() {
		b.mu.Lock()
		b.free = append(b.free, p)
		b.mu.Unlock()
		release()
	}, nil
}
