// Package calibrate measures a host's cost model (costmodel.Profile):
// it generates three checkpoints (tiny tensors of 32 bytes to 4 KiB,
// small ones of 1 to 64 KiB, and a Llama-like one of large tensors),
// compresses each with the fixed and the entropy codec, and loads each
// from the page cache raw, fixed and entropy on the engine given, fitting
// every kind's cost a tensor and rate from the fastest of several runs:
// raw and fixed from the small and large sets (the sizes where the choice
// is made, and where the rate shows), small entropy payloads (decoded on
// the host) from the tiny and small ones. It takes seconds and runs once
// per host (splitzip compress --codec cost on first use, or splitzip
// calibrate).
package calibrate

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/splitzip/splitzip/costmodel"
	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/load"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/shardcache"
)

// Options sizes a calibration; the zero value is the default.
type Options struct {
	Tiny  int    // tensors of 32 bytes to 4 KiB (default 2000)
	Small int    // tensors of 1 to 64 KiB (default 2000)
	Large uint64 // bytes of the Llama-like checkpoint (default 256 MiB)
	Runs  int    // loads of each, the fastest counts (default 5)
	Dir   string // where to write the checkpoints (default the system's temporary folder)
}

// set is one generated checkpoint and what its loads measured.
type set struct {
	name    string
	tensors int
	bytes   uint64
	small   int    // tensors of at most costmodel's SmallBytes
	sbytes  uint64 // their bytes
	wall    map[costmodel.Kind]float64
}

// Measure returns the profile of this host with eng (whose name, with
// the CPU's, is the profile's fingerprint).
func Measure(ctx context.Context, eng engine.Engine, opts Options) (*costmodel.Profile, error) {
	if opts.Tiny == 0 {
		opts.Tiny = 2000
	}
	if opts.Small == 0 {
		opts.Small = 2000
	}
	if opts.Large == 0 {
		opts.Large = 256 << 20
	}
	if opts.Runs == 0 {
		opts.Runs = 5
	}
	tmp, err := os.MkdirTemp(opts.Dir, "splitzip-calibrate-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	p := costmodel.Default()
	p.Host, p.Device = costmodel.Fingerprint(eng.Name()), eng.Name()
	cfgs := []struct {
		name string
		cfg  synth.Config
	}{
		{"tiny", synth.Config{Tiny: opts.Tiny, Shards: 1, Seed: 1}},
		{"small", synth.Config{Small: opts.Small, Shards: 1, Seed: 2}},
		{"large", synth.Config{Bytes: opts.Large, Shards: 1, Seed: 3}},
	}
	var sets []*set
	for _, c := range cfgs {
		s, err := measureSet(ctx, eng, filepath.Join(tmp, c.name), c.cfg, p.SmallBytes, opts.Runs)
		if err != nil {
			return nil, fmt.Errorf("calibrate %s: %w", c.name, err)
		}
		s.name = c.name
		sets = append(sets, s)
	}
	tiny, small, large := sets[0], sets[1], sets[2]
	p.Raw = fit(small.tensors, small.bytes, small.wall[costmodel.Raw], large.tensors, large.bytes, large.wall[costmodel.Raw])
	p.Fixed = fit(small.tensors, small.bytes, small.wall[costmodel.Fixed], large.tensors, large.bytes, large.wall[costmodel.Fixed])
	// Entropy payloads of at most SmallBytes are decoded on the host:
	// the tiny and small sets hold only those.
	p.EntropySmall = fit(tiny.tensors, tiny.bytes, tiny.wall[costmodel.Entropy], small.tensors, small.bytes, small.wall[costmodel.Entropy])
	// The large set's entropy loads, less what its small tensors cost by
	// that fit, give the large payloads' rate; a tensor costs the host
	// what a fixed payload does (the same lookup, read, check and launch).
	rest := large.wall[costmodel.Entropy] - float64(large.small)*p.EntropySmall.Tensor - float64(large.sbytes)/p.EntropySmall.Rate
	n := large.tensors - large.small
	p.Entropy = costmodel.Cost{Tensor: p.Fixed.Tensor, Rate: float64(large.bytes-large.sbytes) / math.Max(rest-float64(n)*p.Fixed.Tensor, 1e-9)}
	p.Measured = time.Now().UTC().Format(time.RFC3339)
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	return p, nil
}

// fit solves t = n*Tensor + b/Rate for two sets (n1 tensors of b1 bytes
// in t1 seconds, n2 of b2 in t2); where the two do not give a positive
// pair (noise), the first set's time a tensor and the second's rate.
func fit(n1 int, b1 uint64, t1 float64, n2 int, b2 uint64, t2 float64) costmodel.Cost {
	f1, f2, c1, c2 := float64(n1), float64(n2), float64(b1), float64(b2)
	inv := (t2*f1 - t1*f2) / (c2*f1 - c1*f2) // 1/Rate
	tensor := (t1 - c1*inv) / f1
	if inv > 0 && tensor >= 0 {
		return costmodel.Cost{Tensor: tensor, Rate: 1 / inv}
	}
	return costmodel.Cost{Tensor: t1 / f1, Rate: c2 / t2}
}

// measureSet writes the checkpoint cfg in dir, compresses it with each
// codec, and returns the fastest of runs loads of each kind.
func measureSet(ctx context.Context, eng engine.Engine, dir string, cfg synth.Config, smallBytes uint64, runs int) (*set, error) {
	src := filepath.Join(dir, "model")
	if _, err := synth.Write(ctx, src, cfg); err != nil {
		return nil, err
	}
	s := &set{wall: map[costmodel.Kind]float64{}}
	for _, k := range []costmodel.Kind{costmodel.Fixed, costmodel.Entropy} {
		out := filepath.Join(dir, k.String())
		codec := map[costmodel.Kind]string{costmodel.Fixed: pipeline.CodecFixed, costmodel.Entropy: pipeline.CodecEntropy}[k]
		if _, err := pipeline.Compress(ctx, src, pipeline.CompressOptions{Output: out, Codec: codec, NoSync: true}); err != nil {
			return nil, err
		}
		c, err := shardcache.Open(out)
		if err != nil {
			return nil, err
		}
		from, err := c.PickSource("")
		if err != nil {
			return nil, err
		}
		if s.tensors == 0 {
			for _, sh := range from.Shards {
				for _, t := range sh.Tensors {
					s.tensors++
					s.bytes += t.Size
					if t.Size <= smallBytes {
						s.small++
						s.sbytes += t.Size
					}
				}
			}
		}
		kinds := []costmodel.Kind{k}
		if k == costmodel.Fixed {
			kinds = append(kinds, costmodel.Raw) // raw loads read the same source
		}
		for _, kind := range kinds {
			w, err := fastest(ctx, eng, c, from, kind == costmodel.Raw, runs)
			if err != nil {
				return nil, fmt.Errorf("%s load: %w", kind, err)
			}
			s.wall[kind] = w
		}
	}
	return s, nil
}

// fastest is the shortest wall seconds of runs loads of src (after one
// that warms the page cache and the staging up).
func fastest(ctx context.Context, eng engine.Engine, c *shardcache.Cache, src *shardcache.Source, raw bool, runs int) (float64, error) {
	l, err := load.Open(eng, c, src, load.Options{Raw: raw})
	if err != nil {
		return 0, err
	}
	defer l.Close()
	best := math.Inf(1)
	for i := 0; i <= runs; i++ {
		r, err := l.Run(ctx)
		if err != nil {
			return 0, err
		}
		if i > 0 {
			best = math.Min(best, r.Wall.Seconds())
		}
	}
	return best, nil
}
