package gpubench

import (
	"bytes"
	"fmt"
	"math/rand/v2"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/scatter"
)

// LayerTensor is one weight matrix of a decoder layer.
type LayerTensor struct {
	Name       string `json:"name"`
	Rows, Cols uint64
}

// Llama8BLayer is one decoder layer of a Llama-3-8B-shaped model
// (hidden 4096, 8 key-value heads of 128, intermediate 14336): seven
// BF16 matrices, 436 MB.
var Llama8BLayer = []LayerTensor{
	{"q_proj", 4096, 4096}, {"k_proj", 1024, 4096}, {"v_proj", 1024, 4096}, {"o_proj", 4096, 4096},
	{"gate_proj", 14336, 4096}, {"up_proj", 14336, 4096}, {"down_proj", 4096, 14336},
}

// LayerReport is what BenchLayer measured: a decoder layer's payloads
// decoded out of place from one device buffer into their destinations,
// by one scatter launch from a table in device memory and by one decode
// launch per tensor, in the same run.
type LayerReport struct {
	Device      string        `json:"device"`
	CopyGBps    float64       `json:"copy_gb_per_s"`    // device-to-device, bytes read plus written
	CeilingGBps float64       `json:"ceiling_gb_per_s"` // copy rate * 2 / 3.5
	Tensors     []LayerTensor `json:"tensors"`
	RawBytes    uint64        `json:"raw_bytes"`
	Payload     uint64        `json:"payload_bytes"`
	Scatter     Timing        `json:"scatter"`    // one launch for the layer
	PerTensor   Timing        `json:"per_tensor"` // a launch per tensor, back to back
	OfCeiling   float64       `json:"scatter_fraction_of_ceiling"`
}

// BenchLayer times the decode of one decoder layer of tensors (N(0,
// 0.02) values, scaled per row) stored as fixed-codec payloads in one device
// buffer, the layout of a GPU-memory tier: a scatter table and the
// payloads after it. Both ways are timed with CUDA events (a warm-up
// round, the median of runs launches) and their outputs checked bit for
// bit.
func BenchLayer(ctx *cuda.Context, tensors []LayerTensor, runs int) (*LayerReport, error) {
	b, err := newBench(ctx, runs)
	if err != nil {
		return nil, err
	}
	defer b.close()
	rep := &LayerReport{Device: b.name, CopyGBps: b.copyGBps, CeilingGBps: b.copyGBps * 2 / 3.5, Tensors: tensors}
	rng := rand.New(rand.NewPCG(20261201, 13))
	items := make([]scatter.Item, len(tensors))
	heads := make([]codec.Header, len(tensors))
	payloads := make([][]byte, len(tensors))
	var want []byte
	dstOff := make([]uint64, len(tensors))
	src := scatter.TableBytes(len(tensors))
	for i, t := range tensors {
		v := make([]byte, 2*t.Rows*t.Cols)
		synth.FillNormal(rng, v, 0.02, 1.5, int(t.Cols))
		p, _, err := codec.Encode(v)
		if err != nil {
			return nil, err
		}
		if heads[i], err = codec.ParseHeader(p); err != nil {
			return nil, err
		}
		payloads[i] = p
		dstOff[i] = uint64(len(want))
		want = append(want, v...)
		for len(want)%256 != 0 {
			want = append(want, 0)
		}
		items[i] = scatter.Item{Name: t.Name, Src: src, Stored: uint64(len(p)), Size: uint64(len(v)), Header: &heads[i]}
		src += (uint64(len(p)) + 15) &^ 15
		rep.RawBytes += uint64(len(v))
		rep.Payload += uint64(len(p))
	}
	staged := src
	host := make([]byte, staged)
	for i := range items {
		copy(host[items[i].Src:], payloads[i])
	}
	base, err := ctx.Alloc(staged)
	if err != nil {
		return nil, err
	}
	defer ctx.Free(base)
	dst, err := ctx.Alloc(uint64(len(want)))
	if err != nil {
		return nil, err
	}
	defer ctx.Free(dst)
	for i := range items {
		items[i].Dst = uint64(dst) + dstOff[i]
	}
	if err := scatter.Put(host, items, staged); err != nil {
		return nil, err
	}
	if err := ctx.CopyHtoDAsync(base, host, b.s); err != nil {
		return nil, err
	}
	units := scatter.Units(items)
	check := func() error {
		if err := b.d.TakeError(b.s); err != nil {
			return err
		}
		got := make([]byte, len(want))
		if err := ctx.CopyDtoHAsync(got, dst, b.s); err != nil {
			return err
		}
		if err := ctx.StreamSynchronize(b.s); err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("layer decode output differs from the tensors")
		}
		return ctx.MemsetD8Async(dst, 0xA5, uint64(len(want)), b.s)
	}
	ways := []struct {
		t  *Timing
		fn func(int) error
	}{
		{&rep.Scatter, func(int) error { return b.d.LaunchScatter(base, staged, len(items), units, b.s) }},
		{&rep.PerTensor, func(int) error {
			for i := range items {
				err := b.d.LaunchOutOfPlace(cuda.DevicePtr(items[i].Dst), base+cuda.DevicePtr(items[i].Src), &heads[i], b.s)
				if err != nil {
					return err
				}
			}
			return nil
		}},
	}
	if err := ctx.MemsetD8Async(dst, 0xA5, uint64(len(want)), b.s); err != nil {
		return nil, err
	}
	for _, w := range ways {
		times, err := timeRuns(ctx, b.s, runs, 1, nil, w.fn)
		if err != nil {
			return nil, err
		}
		if err := check(); err != nil {
			return nil, err
		}
		*w.t = timing("out-of-place", times, rep.RawBytes, rep.Payload, 1)
	}
	rep.OfCeiling = rep.Scatter.GBps / rep.CeilingGBps
	return rep, nil
}
