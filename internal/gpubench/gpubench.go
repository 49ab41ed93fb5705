// Package gpubench times the GPU decoder and host-to-device copies for
// `splitzip bench` (CUDA events, warm-up, medians, buffers rotated past
// the L2 cache).
package gpubench

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sort"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/gpu"
	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/internal/synth"
)

// DecodeResult is one timed configuration of BenchDecode.
type DecodeResult struct {
	Data string `json:"data"` // "normal" or "rowscaled"
	Timing
	OfCeiling float64 `json:"fraction_of_ceiling"` // GBps over the copy-derived ceiling
}

// Timing is one timed decode configuration: its launches' median and
// fastest times and the raw bytes a second of the median.
type Timing struct {
	Mode       string  `json:"mode"`      // "in-place" or "out-of-place"
	RawBytes   uint64  `json:"raw_bytes"` // decoded size
	Payload    uint64  `json:"payload_bytes"`
	Runs       int     `json:"runs"`
	MedianUs   float64 `json:"median_us"`
	MinUs      float64 `json:"min_us"`
	GBps       float64 `json:"gb_per_s"` // raw bytes per second, 1e9
	SetsRotate int     `json:"buffer_sets"`
}

// DecodeReport is what BenchDecode measured.
type DecodeReport struct {
	Device      string         `json:"device"`
	CopyBytes   uint64         `json:"copy_bytes"`
	CopyGBps    float64        `json:"copy_gb_per_s"`    // device-to-device, bytes read plus written
	CeilingGBps float64        `json:"ceiling_gb_per_s"` // decode ceiling: copy rate * 2 / 3.5
	Results     []DecodeResult `json:"results"`
}

// BenchDecode times the decoder on N(0, 0.02) and row-scaled BF16 tensors
// of the given sizes (bytes of BF16), in place and out of place, with CUDA
// events, one warm-up round and the median of at least runs launches, and
// measures the device-to-device copy rate in the same run. Inputs are
// rotated among enough buffer sets to exceed the L2 cache several times.
func BenchDecode(ctx *cuda.Context, sizes []uint64, runs int) (*DecodeReport, error) {
	b, err := newBench(ctx, runs)
	if err != nil {
		return nil, err
	}
	defer b.close()
	d, s, l2 := b.d, b.s, b.l2
	rep := &DecodeReport{Device: b.name, CopyBytes: copyBytes, CopyGBps: b.copyGBps}
	rep.CeilingGBps = rep.CopyGBps * 2 / 3.5
	rng := rand.New(rand.NewPCG(20261129, 1))
	for _, size := range sizes {
		for _, data := range []string{"normal", "rowscaled"} {
			v := make([]byte, size&^1)
			spread := 0.0
			if data == "rowscaled" {
				spread = 1.5
			}
			synth.FillNormal(rng, v, 0.02, spread, 4096)
			p, st, err := codec.Encode(v)
			if err != nil {
				return nil, err
			}
			h, err := codec.ParseHeader(p)
			if err != nil {
				return nil, err
			}
			sets := rotations(l2, size)
			for _, inPlace := range []bool{true, false} {
				if inPlace && !st.InPlace {
					continue
				}
				r, err := benchOne(ctx, d, s, v, p, &h, inPlace, sets, runs)
				if err != nil {
					return nil, fmt.Errorf("%s %d bytes: %w", data, size, err)
				}
				r.Data = data
				r.OfCeiling = r.GBps / rep.CeilingGBps
				rep.Results = append(rep.Results, *r)
			}
		}
	}
	return rep, nil
}

// copyBytes is what the device copy rate is measured with.
const copyBytes = 2 << 30

// bench is what a decode benchmark holds: a decoder, a stream, the
// device's name and L2 size, and its copy rate, measured first.
type bench struct {
	ctx      *cuda.Context
	d        *gpu.Decoder
	s        cuda.Stream
	name     string
	l2       int
	copyGBps float64
}

func newBench(ctx *cuda.Context, runs int) (*bench, error) {
	d, err := gpu.NewDecoder(ctx)
	if err != nil {
		return nil, err
	}
	b := &bench{ctx: ctx, d: d}
	b.name, _ = ctx.Name()
	b.l2, _ = ctx.Attribute(cuda.AttrL2CacheSize)
	if b.s, err = ctx.NewStream(); err != nil {
		d.Close()
		return nil, err
	}
	if b.copyGBps, err = benchCopy(ctx, b.s, copyBytes, runs); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

func (b *bench) close() {
	b.ctx.DestroyStream(b.s)
	b.d.Close()
}

func benchCopy(ctx *cuda.Context, s cuda.Stream, n uint64, runs int) (float64, error) {
	a, err := ctx.Alloc(n)
	if err != nil {
		return 0, err
	}
	defer ctx.Free(a)
	b, err := ctx.Alloc(n)
	if err != nil {
		return 0, err
	}
	defer ctx.Free(b)
	ctx.MemsetD8Async(a, 0x3c, n, s)
	times, err := timeRuns(ctx, s, runs, 1, nil, func(int) error { return ctx.CopyDtoDAsync(b, a, n, s) })
	if err != nil {
		return 0, err
	}
	return 2 * float64(n) / (median(times) * 1e-3) / 1e9, nil
}

// Launches are timed behind a busy GPU: before every feedLaunches of
// them the stream gets a memset of feedBytes (about 0.1 ms on an H100),
// untimed, during which the host queues the next launches. A launch
// shorter than the host's time to queue one (a driver call and two event
// records, several µs through purego) is otherwise timed with the host's
// gap before it: its start event runs as soon as it is queued on an idle
// GPU, the launch only when the host has made it.
const (
	feedBytes    = 256 << 20
	feedLaunches = 8
)

// timeRuns runs fn over sets in rounds (a warm-up round first), calling
// prepare before each round untimed, and returns each launch's time in
// ms, each timed behind a busy GPU (feedBytes).
func timeRuns(ctx *cuda.Context, s cuda.Stream, runs, sets int, prepare func() error, fn func(set int) error) ([]float64, error) {
	rounds := 1 + (runs+sets-1)/sets
	start := make([]cuda.Event, sets)
	end := make([]cuda.Event, sets)
	for i := range sets {
		start[i], _ = ctx.NewEvent(cuda.EventDefault)
		end[i], _ = ctx.NewEvent(cuda.EventDefault)
		defer ctx.DestroyEvent(start[i])
		defer ctx.DestroyEvent(end[i])
	}
	feed, err := ctx.Alloc(feedBytes)
	if err != nil {
		return nil, fmt.Errorf("the buffer that keeps the GPU busy while launches are queued: %w", err)
	}
	defer ctx.Free(feed)
	var times []float64
	for r := range rounds {
		if prepare != nil {
			if err := prepare(); err != nil {
				return nil, err
			}
		}
		for i := range sets {
			if i%feedLaunches == 0 {
				if err := ctx.MemsetD8Async(feed, 0, feedBytes, s); err != nil {
					return nil, err
				}
			}
			ctx.Record(start[i], s)
			if err := fn(i); err != nil {
				return nil, err
			}
			ctx.Record(end[i], s)
		}
		if err := ctx.StreamSynchronize(s); err != nil {
			return nil, err
		}
		if r == 0 {
			continue // warm-up
		}
		for i := range sets {
			ms, err := ctx.Elapsed(start[i], end[i])
			if err != nil {
				return nil, err
			}
			times = append(times, float64(ms))
		}
	}
	return times, nil
}

func benchOne(ctx *cuda.Context, d *gpu.Decoder, s cuda.Stream, v, p []byte, h *codec.Header, inPlace bool, sets, runs int) (*DecodeResult, error) {
	tm, err := timed(ctx, s, v, p, inPlace, sets, runs, launcher{
		inPlace: func(b cuda.DevicePtr) error { return d.LaunchInPlace(b, h, s) },
		out:     func(dst, src cuda.DevicePtr) error { return d.LaunchOutOfPlace(dst, src, h, s) },
		errs:    func() error { return d.TakeError(s) },
	})
	if err != nil {
		return nil, err
	}
	// A kernel built with SZ_TRACE: its last launch's blocks (kernel work).
	if t, err := d.Trace(s); err != nil {
		return nil, err
	} else if t != nil {
		fmt.Fprintf(os.Stderr, "trace %s %d bytes, last launch: %s\n", modeName(inPlace), len(v), t)
	}
	return &DecodeResult{Timing: tm}, nil
}

// timed is timeDecode's times summed up.
func timed(ctx *cuda.Context, s cuda.Stream, v, p []byte, inPlace bool, sets, runs int, l launcher) (Timing, error) {
	times, err := timeDecode(ctx, s, v, p, inPlace, sets, runs, l)
	if err != nil {
		return Timing{}, err
	}
	return timing(modeName(inPlace), times, uint64(len(v)), uint64(len(p)), sets), nil
}

// timing sums up launch times (ms) of work on raw bytes (payload bytes
// read), rotated among sets of buffers; GBps is raw bytes a second.
func timing(mode string, times []float64, raw, payload uint64, sets int) Timing {
	med, mn := median(times), minimum(times)
	return Timing{Mode: mode, RawBytes: raw, Payload: payload, Runs: len(times), MedianUs: med * 1e3, MinUs: mn * 1e3,
		GBps: float64(raw) / (med * 1e-3) / 1e9, SetsRotate: sets}
}

// rotations is how many copies of size bytes exceed an L2 cache of l2
// bytes four times (at least one), so that timed launches read memory.
func rotations(l2 int, size uint64) int {
	return int(max(1, (4*uint64(l2)+size-1)/size))
}

// launcher is a decoder's launches for timeDecode.
type launcher struct {
	inPlace func(buf cuda.DevicePtr) error
	out     func(dst, src cuda.DevicePtr) error
	errs    func() error // the kernel's errors, once the stream is done
}

// timeDecode times the decode of payload p into the values v, in place
// or out of place, rotating among sets of buffers (in place, the payload
// is copied back into each before every round, untimed), and checks that
// the last output is v.
func timeDecode(ctx *cuda.Context, s cuda.Stream, v, p []byte, inPlace bool, sets, runs int, l launcher) ([]float64, error) {
	n := uint64(len(v))
	pristine, err := ctx.Alloc(uint64(len(p)))
	if err != nil {
		return nil, err
	}
	defer ctx.Free(pristine)
	if err := ctx.CopyHtoDAsync(pristine, p, s); err != nil {
		return nil, err
	}
	bufs := make([]cuda.DevicePtr, sets)
	for i := range bufs {
		if bufs[i], err = ctx.Alloc(n); err != nil {
			return nil, err
		}
		defer ctx.Free(bufs[i])
	}
	prepare := func() error {
		for _, b := range bufs {
			if err := ctx.CopyDtoDAsync(b, pristine, uint64(len(p)), s); err != nil {
				return err
			}
		}
		return nil
	}
	launch := func(i int) error { return l.inPlace(bufs[i]) }
	if !inPlace {
		srcs := make([]cuda.DevicePtr, sets)
		for i := range srcs {
			if srcs[i], err = ctx.Alloc(uint64(len(p))); err != nil {
				return nil, err
			}
			defer ctx.Free(srcs[i])
			if err := ctx.CopyDtoDAsync(srcs[i], pristine, uint64(len(p)), s); err != nil {
				return nil, err
			}
		}
		prepare = nil
		launch = func(i int) error { return l.out(bufs[i], srcs[i]) }
	}
	for i := range bufs {
		ctx.MemsetD8Async(bufs[i], 0xA5, n, s) // poison
	}
	times, err := timeRuns(ctx, s, runs, sets, prepare, launch)
	if err != nil {
		return nil, err
	}
	if err := l.errs(); err != nil {
		return nil, err
	}
	// The last output of the timed runs must be the tensor.
	got := make([]byte, n)
	if err := ctx.CopyDtoHAsync(got, bufs[sets-1], s); err != nil {
		return nil, err
	}
	if err := ctx.StreamSynchronize(s); err != nil {
		return nil, err
	}
	if !bytes.Equal(got, v) {
		return nil, fmt.Errorf("benchmark output differs from the tensor")
	}
	return times, nil
}

func modeName(inPlace bool) string {
	if inPlace {
		return "in-place"
	}
	return "out-of-place"
}

func minimum(x []float64) float64 {
	m := math.Inf(1)
	for _, t := range x {
		m = min(m, t)
	}
	return m
}

// H2DResult is one copy size of BenchH2D.
type H2DResult struct {
	Bytes    uint64  `json:"bytes"`
	Runs     int     `json:"runs"`
	MedianUs float64 `json:"median_us"`
	GBps     float64 `json:"gb_per_s"`
}

// BenchH2D measures pinned host-to-device copy bandwidth by copy size.
func BenchH2D(ctx *cuda.Context, sizes []uint64, runs int) ([]H2DResult, error) {
	var maxSize uint64
	for _, sz := range sizes {
		maxSize = max(maxSize, sz)
	}
	host, err := ctx.HostAlloc(maxSize, 0)
	if err != nil {
		return nil, err
	}
	defer ctx.FreeHost(host)
	for i := range host {
		host[i] = byte(i * 131)
	}
	dev, err := ctx.Alloc(maxSize)
	if err != nil {
		return nil, err
	}
	defer ctx.Free(dev)
	s, err := ctx.NewStream()
	if err != nil {
		return nil, err
	}
	defer ctx.DestroyStream(s)
	var out []H2DResult
	for _, sz := range sizes {
		times, err := timeRuns(ctx, s, runs, 1, nil, func(int) error { return ctx.CopyHtoDAsync(dev, host[:sz], s) })
		if err != nil {
			return nil, err
		}
		med := median(times)
		out = append(out, H2DResult{Bytes: sz, Runs: len(times), MedianUs: med * 1e3, GBps: float64(sz) / (med * 1e-3) / 1e9})
	}
	return out, nil
}

func median(x []float64) float64 {
	y := append([]float64(nil), x...)
	sort.Float64s(y)
	if len(y) == 0 {
		return 0
	}
	if len(y)%2 == 1 {
		return y[len(y)/2]
	}
	return (y[len(y)/2-1] + y[len(y)/2]) / 2
}
