package cudaengine

// Decode streams. An in-place decode must follow its payload's copy, but
// the next copy need not follow the decode: it writes another range. On
// one stream it does, and the copy engine waits for every decode. The
// H200 moved 1.6 MB copies queued on one stream at 49 GB/s, 38 GB/s with
// a small kernel after each on the same stream (scripts/h2d-batch-probe.py,
// docs/PERF.md), and a 12-layer MoE's resident re-faults on one upload
// stream ran at 44 GB/s with decodes in the stream, 60-62 beside it. So an
// engine of one upload stream has a decode stream beside it, with a
// decoder of its own: a decode waits there for the copies before it (an
// event recorded after them on the upload stream) while later copies go
// on. With two or more upload streams, another stream's copies fill the
// gaps already, and decode streams measured no faster on the MoE and 3%
// slower on an 8 GiB Llama's re-faults (copies of both streams then run
// at once, which the copy engine does less well than one after another).
// Scatters stay on the upload stream: the next scatter's copy overwrites
// the stream's device staging memory the kernel reads.

import (
	"github.com/splitzip/splitzip/gpu"
	"github.com/splitzip/splitzip/gpu/cuda"
)

// decodeStream is an upload stream's decode stream.
type decodeStream struct {
	s      cuda.Stream
	dec    *gpu.Decoder
	copied cuda.Event // recorded after the copies the next decode waits for
}

// newDecodeStream creates a decode stream with its decoder and event.
func newDecodeStream(ctx *cuda.Context) (decodeStream, error) {
	var d decodeStream
	var err error
	if d.s, err = ctx.NewStream(); err != nil {
		return d, err
	}
	if d.copied, err = ctx.NewEvent(cuda.EventDisableTiming); err != nil {
		ctx.DestroyStream(d.s)
		return decodeStream{}, err
	}
	if d.dec, err = gpu.NewDecoder(ctx); err != nil {
		ctx.DestroyEvent(d.copied)
		ctx.DestroyStream(d.s)
		return decodeStream{}, err
	}
	return d, nil
}

// close waits for the decode stream's work and frees it.
func (d decodeStream) close(ctx *cuda.Context) {
	ctx.StreamSynchronize(d.s)
	d.dec.Close()
	ctx.DestroyEvent(d.copied)
	ctx.DestroyStream(d.s)
}

// decodeOn returns where a decode submitted to upload stream s runs, as
// the submitter: s's decode stream, made to wait for the copies enqueued
// on s so far (a wait captures the event's last record, so one event per
// stream serves every decode), or, without decode streams, s itself.
func (e *Engine) decodeOn(s int) (cuda.Stream, *gpu.Decoder, error) {
	if len(e.dstreams) == 0 {
		return e.streams[s], e.decs[s], nil
	}
	d := e.dstreams[s]
	if err := e.ctx.Record(d.copied, e.streams[s]); err != nil {
		return e.streams[s], nil, err
	}
	if err := e.ctx.StreamWaitEvent(d.s, d.copied); err != nil {
		return e.streams[s], nil, err
	}
	return d.s, d.dec, nil
}
