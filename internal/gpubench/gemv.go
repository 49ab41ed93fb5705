package gpubench

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/gpu"
	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/internal/synth"
)

// GemvShape is a weight matrix of rows x cols (a Linear's out x in).
type GemvShape struct {
	Rows uint64 `json:"rows"`
	Cols uint64 `json:"cols"`
}

// Llama8BGemv are the matrix shapes of a Llama-3-8B-shaped model that
// issue 36 names: attention, the MLP's two directions and the vocabulary
// projection.
var Llama8BGemv = []GemvShape{{4096, 4096}, {14336, 4096}, {4096, 14336}, {128256, 4096}}

// GemvResult is one timed product: W x for a batch of vectors, from W's
// fixed payload (Fused) and from W in BF16 by the reference kernel of the
// same reduction order (Reference).
type GemvResult struct {
	GemvShape
	Batch     int     `json:"batch"`
	RawBytes  uint64  `json:"raw_bytes"` // W in BF16
	Payload   uint64  `json:"payload_bytes"`
	Fused     Timing  `json:"fused"`     // GBps: BF16 bytes of W a second (the effective weight rate)
	Reference Timing  `json:"reference"` // the same from W in BF16
	Speedup   float64 `json:"speedup"`   // reference over fused time
	// PayloadGBps is the fused kernel's payload bytes a second: the
	// compressed bytes it reads, against the HBM rate.
	PayloadGBps float64 `json:"payload_gb_per_s"`
}

// GemvReport is what BenchGemv measured.
type GemvReport struct {
	Device   string       `json:"device"`
	CopyGBps float64      `json:"copy_gb_per_s"` // device-to-device, bytes read plus written
	Results  []GemvResult `json:"results"`
}

// BenchGemv times matrix-vector products of each shape and batch with CUDA
// events, a warm-up round and the median of at least runs launches: from
// fixed payloads of real-looking weights (N(0, 0.02) with each row
// scaled by a factor from 0.25 to 1.75) and, in the same run, from the same matrices in
// BF16 by the reference kernel; matrices are rotated among enough copies
// to exceed the L2 cache four times. It measures the device copy rate
// first (the HBM reference).
func BenchGemv(ctx *cuda.Context, shapes []GemvShape, batches []int, runs int) (*GemvReport, error) {
	b, err := newBench(ctx, runs)
	if err != nil {
		return nil, err
	}
	defer b.close()
	g, err := gpu.NewGemv(ctx)
	if err != nil {
		return nil, err
	}
	defer g.Close()
	rep := &GemvReport{Device: b.name, CopyGBps: b.copyGBps}
	rng := rand.New(rand.NewPCG(20261206, 36))
	for _, sh := range shapes {
		res, err := benchShape(ctx, g, b.s, rng, sh, batches, runs, b.l2)
		if err != nil {
			return nil, fmt.Errorf("%d x %d: %w", sh.Rows, sh.Cols, err)
		}
		rep.Results = append(rep.Results, res...)
	}
	return rep, nil
}

// benchShape times one shape at every batch size.
func benchShape(ctx *cuda.Context, g *gpu.Gemv, s cuda.Stream, rng *rand.Rand, sh GemvShape, batches []int, runs, l2 int) ([]GemvResult, error) {
	w := make([]byte, 2*sh.Rows*sh.Cols)
	synth.FillNormal(rng, w, 0.02, 1.5, int(sh.Cols))
	p, _, err := codec.Encode(w)
	if err != nil {
		return nil, err
	}
	h, err := codec.ParseHeader(p)
	if err != nil {
		return nil, err
	}
	sets := rotations(l2, uint64(len(p)))
	var bufs []cuda.DevicePtr
	defer func() {
		for _, d := range bufs {
			ctx.Free(d)
		}
	}()
	put := func(b []byte, n uint64) (cuda.DevicePtr, error) {
		d, err := ctx.Alloc(n)
		if err != nil {
			return 0, err
		}
		bufs = append(bufs, d)
		if b != nil {
			err = ctx.CopyHtoDAsync(d, b, s)
		}
		return d, err
	}
	ps, ws := make([]cuda.DevicePtr, sets), make([]cuda.DevicePtr, sets)
	for i := range sets {
		if ps[i], err = put(p, uint64(len(p))); err != nil {
			return nil, err
		}
		if ws[i], err = put(w, uint64(len(w))); err != nil {
			return nil, err
		}
	}
	maxBatch := 0
	for _, bt := range batches {
		maxBatch = max(maxBatch, bt)
	}
	xb := make([]byte, 2*sh.Cols*uint64(maxBatch))
	synth.FillNormal(rng, xb, 1, 0, 0)
	x, err := put(xb, uint64(len(xb)))
	if err != nil {
		return nil, err
	}
	y, err := put(nil, 2*sh.Rows*uint64(maxBatch))
	if err != nil {
		return nil, err
	}
	var out []GemvResult
	for _, bt := range batches {
		r := GemvResult{GemvShape: sh, Batch: bt, RawBytes: uint64(len(w)), Payload: uint64(len(p))}
		fused, err := timeRuns(ctx, s, runs, sets, nil, func(i int) error { return g.Fixed(ps[i], uint64(len(p)), &h, sh.Rows, sh.Cols, x, y, bt, s) })
		if err == nil {
			err = g.TakeError(s)
		}
		if err != nil {
			return nil, err
		}
		ref, err := timeRuns(ctx, s, runs, sets, nil, func(i int) error { return g.Reference(ws[i], sh.Rows, sh.Cols, x, y, bt, s) })
		if err != nil {
			return nil, err
		}
		r.Fused, r.Reference = timing("gemv", fused, r.RawBytes, r.Payload, sets), timing("gemv", ref, r.RawBytes, r.RawBytes, sets)
		if r.Fused.MedianUs <= 0 {
			return nil, errors.New("a launch took no time")
		}
		r.Speedup = r.Reference.MedianUs / r.Fused.MedianUs
		r.PayloadGBps = float64(r.Payload) / (r.Fused.MedianUs * 1e-6) / 1e9
		out = append(out, r)
	}
	return out, nil
}
