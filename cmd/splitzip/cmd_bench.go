package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/splitzip/splitzip/gpu"
	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/internal/gpubench"
)

// benchOptions are the flags of bench.
type benchOptions struct {
	Sizes  string
	Runs   int
	Device int
	Codec  string // decode: fixed or entropy
	DTypes string // decode --codec entropy: dtypes, comma separated
	dtypes bool   // --dtype was given
	Layer  bool   // decode: a decoder layer's payloads from one device buffer
	Shapes string // gemv: ROWSxCOLS, comma separated
	Batch  string // gemv: batch sizes, comma separated
}

func newBenchCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure GPU decode, host-to-device bandwidth and load rates",
	}
	var d benchOptions
	dec := &cobra.Command{
		Use:   "decode",
		Short: "Time the GPU decoder in place and out of place against the device copy rate",
		Long: `Time the GPU decoder on N(0, 0.02) and row-scaled BF16 tensors, in place and
out of place, with CUDA events, a warm-up round and the median of --runs
launches, rotating buffers to exceed the L2 cache. In the same run it measures
the device-to-device copy rate (2 GiB, bytes read plus written) and reports
decode GB/s (raw BF16 bytes per second) as a fraction of the ceiling that rate
implies (1.5 bytes read and 2 written per value).

With --codec entropy it times the entropy decoder instead, on trained-looking
tensors of each --dtype (N(0, 0.02) BF16, rounded to F16, F32 with full
mantissas, cast to FP8 with per-row scales; FP8 both as exponents and as
whole bytes; BF16_FEW: the BF16 values with magnitudes below 2^-12 raised to
it, nine exponents, coded in pairs), reporting raw bytes per second against
the ceiling the copy rate implies for the payload read and the values
written. A row says "pairs" where the payload codes pairs of fields.

With --layer it times a Llama-3-8B-shaped decoder layer (seven BF16 matrices,
436 MB) stored as fixed-rate payloads in one device buffer, the layout of an
offload runtime's GPU-memory tier: decoded out of place into their
destinations by one scatter launch from a table in device memory, and by one
decode launch per tensor.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			d.dtypes = cmd.Flags().Changed("dtype")
			return runBenchDecode(g, d)
		},
	}
	dec.Flags().StringVar(&d.Sizes, "size", "512MiB", "tensor sizes, comma separated")
	dec.Flags().IntVar(&d.Runs, "runs", 30, "timed launches per configuration (at least 20)")
	dec.Flags().IntVar(&d.Device, "device", 0, "GPU ordinal")
	dec.Flags().StringVar(&d.Codec, "codec", "fixed", "payloads to time: fixed or entropy")
	dec.Flags().BoolVar(&d.Layer, "layer", false, "time a decoder layer's payloads decoded from one device buffer (--size is ignored)")
	atLeast(dec.Flags(), "runs", 20, "")
	atLeast(dec.Flags(), "device", 0, "")
	dec.Flags().StringVar(&d.DTypes, "dtype", "BF16", "with --codec entropy: dtypes, comma separated (BF16, F16, F32, F8_E4M3, F8_E5M2, BF16_FEW)")
	var h benchOptions
	h2d := &cobra.Command{
		Use:   "h2d",
		Short: "Measure pinned host-to-device copy bandwidth by copy size",
		Args:  args(cobra.NoArgs),
		RunE:  func(*cobra.Command, []string) error { return runBenchH2D(g, h) },
	}
	h2d.Flags().StringVar(&h.Sizes, "size", "1MiB,8MiB,64MiB,256MiB,1GiB", "copy sizes, comma separated")
	h2d.Flags().IntVar(&h.Runs, "runs", 20, "timed copies per size")
	h2d.Flags().IntVar(&h.Device, "device", 0, "GPU ordinal")
	atLeast(h2d.Flags(), "runs", 1, "")
	atLeast(h2d.Flags(), "device", 0, "")
	var m benchOptions
	gemv := &cobra.Command{
		Use:   "gemv",
		Short: "Time matrix-vector products straight from fixed payloads against the same from BF16",
		Long: `Time y = W x for batches of vectors with W held as a fixed payload, decoded in
registers on the way to the multiply (the weights are never written out),
beside the reference kernel of the same reduction order reading W in BF16,
with CUDA events, a warm-up round and the median of --runs launches, matrices
rotated past the L2 cache. W is N(0, 0.02) with each row scaled by a factor
from 0.25 to 1.75, x is N(0, 1). Rates are BF16 bytes of W a second (the effective
weight rate) and, for the fused kernel, payload bytes a second (against the
device copy rate of the same run). The default shapes are Llama-3-8B's.`,
		Args: args(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error { return runBenchGemv(g, m) },
	}
	gemv.Flags().StringVar(&m.Shapes, "shape", "4096x4096,14336x4096,4096x14336,128256x4096", "matrix shapes ROWSxCOLS (a Linear's out x in; COLS a multiple of 16), comma separated")
	gemv.Flags().StringVar(&m.Batch, "batch", "1,8,16", "batch sizes (1 to 16), comma separated")
	gemv.Flags().IntVar(&m.Runs, "runs", 30, "timed launches per configuration (at least 20)")
	gemv.Flags().IntVar(&m.Device, "device", 0, "GPU ordinal")
	atLeast(gemv.Flags(), "runs", 20, "")
	atLeast(gemv.Flags(), "device", 0, "")
	cmd.AddCommand(dec, h2d, gemv, newBenchLoadCommand(g), newBenchEntropyCommand(g))
	return cmd
}

// parseGemv parses bench gemv's --shape and --batch.
func parseGemv(o benchOptions) ([]gpubench.GemvShape, []int, error) {
	var shapes []gpubench.GemvShape
	for _, f := range strings.Split(o.Shapes, ",") {
		var sh gpubench.GemvShape
		if _, err := fmt.Sscanf(f, "%dx%d", &sh.Rows, &sh.Cols); err != nil || sh.Rows == 0 || sh.Cols == 0 || sh.Cols%gpu.GemvColumns != 0 || fmt.Sprintf("%dx%d", sh.Rows, sh.Cols) != f {
			return nil, nil, usageError{fmt.Errorf("--shape: bad shape %q (want ROWSxCOLS with COLS a multiple of 16, such as 4096x14336)", f)}
		}
		shapes = append(shapes, sh)
	}
	var batches []int
	for _, f := range strings.Split(o.Batch, ",") {
		var b int
		if _, err := fmt.Sscanf(f, "%d", &b); err != nil || b < 1 || b > gpu.MaxGemvBatch || fmt.Sprint(b) != f {
			return nil, nil, usageError{fmt.Errorf("--batch: bad batch %q (want 1 to %d, comma separated)", f, gpu.MaxGemvBatch)}
		}
		batches = append(batches, b)
	}
	if o.Runs < 20 {
		return nil, nil, usageError{fmt.Errorf("--runs must be at least 20")}
	}
	return shapes, batches, nil
}

func runBenchGemv(g *globals, o benchOptions) error {
	shapes, batches, err := parseGemv(o)
	if err != nil {
		return err
	}
	ctx, err := openGPU(o.Device)
	if err != nil {
		return err
	}
	defer ctx.Close()
	rep, err := gpubench.BenchGemv(ctx, shapes, batches, o.Runs)
	if err != nil {
		return err
	}
	if g.JSON {
		return printJSON(g.stdout, "bench_gemv", rep)
	}
	w := g.stdout
	fmt.Fprintf(w, "%s: device-to-device copy %.0f GB/s (read+write)\n", rep.Device, rep.CopyGBps)
	for _, r := range rep.Results {
		fmt.Fprintf(w, "%6d x %-6d batch %2d  fused %8.1f us (%5.0f GB/s of weights, %5.0f GB/s of payload)  reference %8.1f us (%5.0f GB/s)  %.2fx  (%d runs, %d sets)\n",
			r.Rows, r.Cols, r.Batch, r.Fused.MedianUs, r.Fused.GBps, r.PayloadGBps, r.Reference.MedianUs, r.Reference.GBps, r.Speedup, r.Fused.Runs, r.Fused.SetsRotate)
	}
	return nil
}

func parseSizes(s string) ([]uint64, error) {
	var out []uint64
	for _, f := range strings.Split(s, ",") {
		n, err := parseSize(f)
		if err != nil || n < 2 {
			return nil, usageError{fmt.Errorf("--size: bad size %q (want sizes of at least 2 bytes, comma separated, such as 512MiB,64MiB)", f)}
		}
		out = append(out, n)
	}
	return out, nil
}

func runBenchDecode(g *globals, o benchOptions) error {
	sizes, err := parseSizes(o.Sizes)
	if err != nil {
		return err
	}
	if o.Runs < 20 {
		return usageError{fmt.Errorf("--runs must be at least 20")}
	}
	var dtypes []string
	switch o.Codec {
	case "fixed":
		if o.dtypes {
			return usageError{errors.New("--dtype picks the entropy benchmark's dtypes: with --codec entropy only (the fixed codec codes BF16)")}
		}
	case "entropy":
		for _, dt := range strings.Split(o.DTypes, ",") {
			if !slices.Contains(gpubench.EntropyDTypes, dt) {
				return usageError{fmt.Errorf("--dtype %q: want some of %s", dt, strings.Join(gpubench.EntropyDTypes, ", "))}
			}
			dtypes = append(dtypes, dt)
		}
	default:
		return usageError{fmt.Errorf("--codec %q: want fixed or entropy", o.Codec)}
	}
	ctx, err := openGPU(o.Device)
	if err != nil {
		return err
	}
	defer ctx.Close()
	if o.Layer {
		return benchDecodeLayer(g, ctx, o.Runs)
	}
	if o.Codec == "entropy" {
		return benchDecodeEntropy(g, ctx, dtypes, sizes, o.Runs)
	}
	rep, err := gpubench.BenchDecode(ctx, sizes, o.Runs)
	if err != nil {
		return err
	}
	if g.JSON {
		return printJSON(g.stdout, "bench_decode", rep)
	}
	w := g.stdout
	fmt.Fprintf(w, "%s: device-to-device copy %.0f GB/s (read+write, %s) -> decode ceiling %.0f GB/s\n",
		rep.Device, rep.CopyGBps, human(rep.CopyBytes), rep.CeilingGBps)
	for _, r := range rep.Results {
		fmt.Fprintf(w, "%-10s %-12s %10s  median %9.1f us  min %9.1f us  %7.0f GB/s  %.3f of ceiling  (%d runs, %d buffer sets)\n",
			r.Data, r.Mode, human(r.RawBytes), r.MedianUs, r.MinUs, r.GBps, r.OfCeiling, r.Runs, r.SetsRotate)
	}
	return nil
}

func benchDecodeEntropy(g *globals, ctx *cuda.Context, dtypes []string, sizes []uint64, runs int) error {
	rep, err := gpubench.BenchEntropy(ctx, dtypes, sizes, runs)
	if err != nil {
		return err
	}
	if g.JSON {
		return printJSON(g.stdout, "bench_decode_entropy", rep)
	}
	w := g.stdout
	fmt.Fprintf(w, "%s: device-to-device copy %.0f GB/s (read+write, %s)\n", rep.Device, rep.CopyGBps, human(rep.CopyBytes))
	for _, r := range rep.Results {
		field := r.Field
		if strings.HasSuffix(r.DType, "_FEW") {
			field = r.DType + " exponent"
		}
		if r.Pairs {
			field += " pairs"
		}
		fmt.Fprintf(w, "%-22s %-12s %10s  %6.3f bits/value  median %9.1f us  min %9.1f us  %7.0f GB/s  ceiling %5.0f  %.3f of it  (%d runs, %d buffer sets)\n",
			field, r.Mode, human(r.RawBytes), r.BitsValue, r.MedianUs, r.MinUs, r.GBps, r.CeilingGBps, r.OfCeiling, r.Runs, r.SetsRotate)
	}
	return nil
}

func benchDecodeLayer(g *globals, ctx *cuda.Context, runs int) error {
	rep, err := gpubench.BenchLayer(ctx, gpubench.Llama8BLayer, runs)
	if err != nil {
		return err
	}
	if g.JSON {
		return printJSON(g.stdout, "bench_decode_layer", rep)
	}
	w := g.stdout
	fmt.Fprintf(w, "%s: device-to-device copy %.0f GB/s (read+write) -> decode ceiling %.0f GB/s\n", rep.Device, rep.CopyGBps, rep.CeilingGBps)
	fmt.Fprintf(w, "layer of %d tensors, %s raw, %s payloads\n", len(rep.Tensors), human(rep.RawBytes), human(rep.Payload))
	for _, r := range []struct {
		name string
		t    gpubench.Timing
	}{{"one scatter launch", rep.Scatter}, {"a launch per tensor", rep.PerTensor}} {
		fmt.Fprintf(w, "%-20s median %9.1f us  min %9.1f us  %7.0f GB/s  %.3f of ceiling  (%d runs)\n",
			r.name, r.t.MedianUs, r.t.MinUs, r.t.GBps, r.t.GBps/rep.CeilingGBps, r.t.Runs)
	}
	return nil
}

func runBenchH2D(g *globals, o benchOptions) error {
	sizes, err := parseSizes(o.Sizes)
	if err != nil {
		return err
	}
	ctx, err := openGPU(o.Device)
	if err != nil {
		return err
	}
	defer ctx.Close()
	res, err := gpubench.BenchH2D(ctx, sizes, o.Runs)
	if err != nil {
		return err
	}
	name, _ := ctx.Name()
	if g.JSON {
		return printJSON(g.stdout, "bench_h2d", map[string]any{"device": name, "results": res})
	}
	for _, r := range res {
		fmt.Fprintf(g.stdout, "%s: pinned host-to-device %10s  median %9.1f us  %6.1f GB/s\n", name, human(r.Bytes), r.MedianUs, r.GBps)
	}
	return nil
}
