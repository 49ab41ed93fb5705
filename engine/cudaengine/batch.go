package cudaengine

// Batched copies. The H200's copy engine spends a few microseconds on
// each copy from the host: queued one by one, 256 KiB copies moved 10-22
// GB/s and 1 MiB ones 47, against 54-55 GB/s for either in batches of 64
// enqueued with one cuMemcpyBatchAsync (scripts/h2d-batch-probe.py,
// docs/PERF.md). So the submitter of an engine with decode streams, given
// many requests at once, enqueues the small host copies bound for one
// stream with one batched call, then their decodes and events in the
// order they came. Copies above batchBytes go one by one: batching the
// 1.5-3 MiB payloads of a MoE checkpoint made its resident re-faults
// slower (52-58 GB/s against 63), each payload's decode then waiting for
// its whole batch. In loads, batching copies of at most 1 MiB measured
// no gain beyond the runs' spread; engines without decode streams (two
// or more upload streams, or a caller's stream) do not batch.

import (
	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/gpu"
	"github.com/splitzip/splitzip/gpu/cuda"
)

// maxBatch is the most copies one batched call enqueues.
const maxBatch = 64

// batchBytes is the largest copy batched.
const batchBytes = 1 << 20

// batchable reports whether r is a host copy of at most batchBytes, with
// or without an in-place decode, that may share a batched call.
func batchable(r *request) bool {
	return r.wait == nil && r.items == 0 && r.w.N == 0 && len(r.w.Src) > 0 && len(r.w.Src) <= batchBytes
}

// runAll enqueues a run of pending requests in their order on each
// stream. With decode streams (an engine of one upload stream; batched
// copies ran on the H200 only beside decode streams), host copies for a
// stream are held and enqueued together (see flush) before that stream's
// next other request, before any cross-stream wait (whose event may be
// one of theirs), before a copy landing where a held one writes (a
// batch's copies run in any order), and at the end.
func (e *Engine) runAll(batch []request) {
	if len(e.dstreams) == 0 || !e.ctx.Library().HasBatchCopy() {
		for _, r := range batch {
			e.run(r)
		}
		return
	}
	held := make([][]*request, len(e.streams))
	flushAll := func() {
		for s := range held {
			e.flush(s, held[s])
			held[s] = held[s][:0]
		}
	}
	for i := range batch {
		r := &batch[i]
		switch {
		case r.wait != nil:
			flushAll()
			e.run(*r)
		case batchable(r):
			if overlaps(held[r.s], r.w) || len(held[r.s]) == maxBatch {
				e.flush(r.s, held[r.s])
				held[r.s] = held[r.s][:0]
			}
			held[r.s] = append(held[r.s], r)
		default:
			e.flush(r.s, held[r.s])
			held[r.s] = held[r.s][:0]
			e.run(*r)
		}
	}
	flushAll()
}

// overlaps reports whether w's copy lands where a held request writes:
// its copy's destination or its decode's output. In the batch, w's copy
// may run before the held copies and before their decodes, which would
// otherwise have run first.
func overlaps(held []*request, w engine.Work) bool {
	lo, hi := uint64(w.Dst), uint64(w.Dst)+uint64(len(w.Src))
	for _, r := range held {
		if a := uint64(r.w.Dst); a < hi && lo < a+writes(r.w) {
			return true
		}
	}
	return false
}

// writes returns how many bytes from w.Dst a host copy w writes, with
// its in-place decode.
func writes(w engine.Work) uint64 {
	n := uint64(len(w.Src))
	if w.Decode != nil {
		n = max(n, w.Decode.DecodedSize())
	}
	return n
}

// flush enqueues held requests of stream s: their copies with one batched
// call, then, in order, each one's decode (on s, or all on s's decode
// stream, made to wait once for the batch) and event. A failed batch
// fails every request in it.
func (e *Engine) flush(s int, held []*request) {
	switch len(held) {
	case 0:
		return
	case 1:
		e.run(*held[0])
		return
	}
	st := e.streams[s]
	dsts := make([]cuda.DevicePtr, len(held))
	srcs := make([][]byte, len(held))
	for i, r := range held {
		dsts[i], srcs[i] = cuda.DevicePtr(r.w.Dst), r.w.Src
	}
	err := e.timed(st, false, func() error { return e.ctx.CopyBatchAsync(dsts, srcs, st) })
	e.batched.Add(uint64(len(held)))
	var ds cuda.Stream
	var dec *gpu.Decoder
	var derr error
	for _, r := range held {
		last, rerr := st, err
		if rerr == nil && r.w.Decode != nil {
			if dec == nil && derr == nil {
				ds, dec, derr = e.decodeOn(s)
			}
			if rerr = derr; rerr == nil {
				last, rerr = ds, e.launchDecode(ds, dec, r.w)
			}
		}
		r.ev.ev, r.ev.err = e.fence(last, rerr)
		if r.ev.ev != 0 {
			e.track(r.ev)
		}
		close(r.ev.ready)
	}
}
