package gpubench

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/gpu"
	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/internal/synth"
)

// EntropyResult is one timed configuration of BenchEntropy.
type EntropyResult struct {
	DType     string  `json:"dtype"`
	Field     string  `json:"field"` // the coded field
	Pairs     bool    `json:"pairs"` // coded in pairs of fields (payload version 3)
	BitsValue float64 `json:"bits_per_value"`
	Timing
	// CeilingGBps is the rate the device copy rate allows for the bytes
	// this decode reads (the payload) and writes (the values).
	CeilingGBps float64 `json:"ceiling_gb_per_s"`
	OfCeiling   float64 `json:"fraction_of_ceiling"`
}

// EntropyReport is what BenchEntropy measured.
type EntropyReport struct {
	Device    string          `json:"device"`
	CopyBytes uint64          `json:"copy_bytes"`
	CopyGBps  float64         `json:"copy_gb_per_s"` // device-to-device, bytes read plus written
	Results   []EntropyResult `json:"results"`
}

// EntropyDTypes are the dtypes EntropyValues makes; BF16_FEW is BF16 of
// few exponents.
var EntropyDTypes = []string{"BF16", "F16", "F32", "F8_E4M3", "F8_E5M2", "BF16_FEW"}

// EntropyValues returns n bytes of trained-looking values of dtype:
// N(0, 0.02) BF16, rounded to F16, F32 with full mantissas, or cast to
// FP8 with per-row scales of 4096 values. BF16_FEW is N(0, 0.02) BF16 with
// magnitudes below 2^-12 raised to it: nine exponents, whose payloads code
// pairs of them.
func EntropyValues(rng *rand.Rand, dtype string, n uint64) ([]byte, error) {
	switch dtype {
	case "BF16", "BF16_FEW":
		v := make([]byte, n&^1)
		synth.FillNormal(rng, v, 0.02, 0, 0)
		if dtype == "BF16_FEW" {
			for i := 0; i+2 <= len(v); i += 2 {
				x := binary.LittleEndian.Uint16(v[i:])
				if x&0x7f80 < 0x3980 { // exponent below 2^-12
					binary.LittleEndian.PutUint16(v[i:], x&0x8000|0x3980)
				}
			}
		}
		return v, nil
	case "F32":
		v := make([]byte, n&^3)
		for i := 0; i+4 <= len(v); i += 4 {
			binary.LittleEndian.PutUint32(v[i:], math.Float32bits(float32(rng.NormFloat64()*0.02)))
		}
		return v, nil
	case "F16":
		return synth.Cast(synth.Normal(rng, int(n/2), 0.02), dtype, 4096), nil
	case "F8_E4M3", "F8_E5M2":
		return synth.Cast(synth.Normal(rng, int(n), 0.02), dtype, 4096), nil
	}
	return nil, fmt.Errorf("no entropy payloads for %s", dtype)
}

// BenchEntropy times the entropy decoder on trained-looking tensors of
// each dtype and size (raw bytes), in place and out of place, as
// BenchDecode times the fixed-codec decoder, and measures the device copy
// rate in the same run.
func BenchEntropy(ctx *cuda.Context, dtypes []string, sizes []uint64, runs int) (*EntropyReport, error) {
	b, err := newBench(ctx, runs)
	if err != nil {
		return nil, err
	}
	defer b.close()
	d, s, l2 := b.d, b.s, b.l2
	rep := &EntropyReport{Device: b.name, CopyBytes: copyBytes, CopyGBps: b.copyGBps}
	rng := rand.New(rand.NewPCG(20261201, 1))
	for _, dt := range dtypes {
		for _, size := range sizes {
			v, err := EntropyValues(rng, dt, size)
			if err != nil {
				return nil, err
			}
			for fi, f := range entropy.Fields {
				if f.DType != strings.TrimSuffix(dt, "_FEW") {
					continue
				}
				p, err := entropy.Encode(fi, v, 0)
				if err != nil {
					return nil, err
				}
				h, err := entropy.Check(p)
				if err != nil {
					return nil, err
				}
				sets := rotations(l2, size)
				for _, inPlace := range []bool{true, false} {
					if inPlace && !h.InPlace {
						continue
					}
					r, err := benchEntropyOne(ctx, d, s, v, p, h, inPlace, sets, runs)
					if err != nil {
						return nil, fmt.Errorf("%s %d bytes: %w", f.Name(), size, err)
					}
					r.DType, r.Field, r.Pairs = dt, f.Name(), h.Pairs
					r.BitsValue = 8 * float64(len(p)) / float64(h.Values)
					r.CeilingGBps = rep.CopyGBps * float64(len(v)) / float64(len(v)+len(p))
					r.OfCeiling = r.GBps / r.CeilingGBps
					rep.Results = append(rep.Results, *r)
				}
			}
		}
	}
	return rep, nil
}

func benchEntropyOne(ctx *cuda.Context, d *gpu.Decoder, s cuda.Stream, v, p []byte, h *entropy.Head, inPlace bool, sets, runs int) (*EntropyResult, error) {
	tm, err := timed(ctx, s, v, p, inPlace, sets, runs, launcher{
		inPlace: func(b cuda.DevicePtr) error { return d.LaunchEntropyInPlace(b, h, s) },
		out:     func(dst, src cuda.DevicePtr) error { return d.LaunchEntropyOutOfPlace(dst, src, h, s) },
		errs:    func() error { return d.TakeError(s) },
	})
	if err != nil {
		return nil, err
	}
	return &EntropyResult{Timing: tm}, nil
}
