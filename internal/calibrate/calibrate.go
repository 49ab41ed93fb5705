// Package calibrate measures a host's cost model (costmodel.Profile):
// it generates three checkpoints (tiny tensors of 32 bytes to 4 KiB,
// small ones of 1 to 64 KiB, and a Llama-like one of large tensors),
// compresses each with the fixed and the entropy codec, and loads each
// from the page cache raw, fixed and entropy on the engine given, fitting
// every kind's cost a tensor and rate from the fastest of several runs:
// raw tensors, fixed and entropy payloads (packed, and decoded by one
// launch a pack) of at most SmallBytes from the tiny and small sets
// (whose tensors all are), larger ones from the large set's tensors above
// SmallBytes, at the small pair's time a tensor (their bytes give the
// rate). A codec's loads count its cache's raw tensors (those that failed
// the gate) at the raw pairs. It takes seconds and runs once per host
// (splitzip compress --codec cost on first use, or splitzip calibrate).
package calibrate

import (
	"context"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/splitzip/splitzip/atomicfile"
	"github.com/splitzip/splitzip/costmodel"
	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/load"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/transport"
)

// Options sizes a calibration; the zero value is the default.
type Options struct {
	Tiny  int    // tensors of 32 bytes to 4 KiB (default 2000)
	Small int    // tensors of 1 to 64 KiB (default 2000)
	Large uint64 // bytes of the Llama-like checkpoint (default 256 MiB)
	Runs  int    // loads of each, the fastest counts (default 5)
	// Least is the least time each kind's timed loads add up to, in more
	// runs where Runs take less, up to maxRuns (default 250 ms).
	Least time.Duration
	Dir   string // where to write the checkpoints (default the system's temporary folder)
}

// counts is a number of tensors and their raw bytes.
type counts struct {
	n     int
	bytes uint64
}

func (c *counts) add(size uint64) { c.n++; c.bytes += size }

// minus is what c holds that d does not.
func (c counts) minus(d counts) counts { return counts{c.n - d.n, c.bytes - d.bytes} }

// time is what c costs at cost k.
func (c counts) time(k costmodel.Cost) float64 {
	if c.n == 0 {
		return 0
	}
	return float64(c.n)*k.Tensor + float64(c.bytes)/k.Rate
}

// set is one generated checkpoint and what its loads measured: its
// tensors, those each codec's cache stores as payloads (the others, which
// failed the gate, load raw), of each those of at most SmallBytes (small
// ones have their own pairs), and the fastest load of each kind.
type set struct {
	all, allSmall     counts
	coded, codedSmall map[costmodel.Kind]counts
	wall              map[costmodel.Kind]float64
}

// rawTime is what the tensors of s that the cache of k keeps raw cost at
// p's raw pairs.
func (s *set) rawTime(p *costmodel.Profile, k costmodel.Kind) float64 {
	small := s.allSmall.minus(s.codedSmall[k])
	return small.time(p.RawSmall) + s.all.minus(s.coded[k]).minus(small).time(p.Raw)
}

// tempLabel ends the name of the folder a calibration writes its
// checkpoints and caches in (atomicfile.MkdirTemp names it with the
// process id).
const tempLabel = "calibrate"

// staleAge is how long ago a calibration folder must have been changed
// last for removeStale to take it: a temporary folder shared with other
// PID namespaces (containers, hosts) holds live calibrations whose process
// ids this one cannot see, and a calibration takes seconds to minutes.
const staleAge = time.Hour

// removeStale removes the calibration folders in dir of processes that
// are gone (killed mid-way: a calibration that ends, or is interrupted,
// removes its own), each up to about 0.6 GB, and those of builds before
// 2026-12-07 ("splitzip-calibrate-*", which name no process), where
// nothing in them changed for staleAge.
func removeStale(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		if !e.IsDir() || !(strings.HasSuffix(name, "-"+tempLabel) && atomicfile.Stale(name) || strings.HasPrefix(name, "splitzip-calibrate-")) {
			continue
		}
		p := filepath.Join(dir, name)
		if changedSince(p, time.Now().Add(-staleAge)) {
			continue
		}
		os.RemoveAll(p)
	}
}

// changedSince reports whether the folder p, or a file or folder in it,
// was changed after t (or cannot be looked at).
func changedSince(p string, t time.Time) bool {
	changed := false
	err := filepath.WalkDir(p, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.ModTime().After(t) {
			changed = true
			return filepath.SkipAll
		}
		return nil
	})
	return changed || err != nil
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
	if opts.Least == 0 {
		opts.Least = 250 * time.Millisecond
	}
	dir := opts.Dir
	if dir == "" {
		dir = os.TempDir()
	}
	removeStale(dir)
	tmp, err := atomicfile.MkdirTemp(dir, tempLabel)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	p := costmodel.Default()
	p.Host, p.Device = costmodel.Fingerprint(eng.Name()), eng.Name()
	// Entropy payloads of tensors of up to 256 KiB, packed by every load,
	// have their own costs; larger ones, packed by local loads up to 2 MiB
	// and streamed above, share the large ones' (the sets' tensors are
	// 1-64 KiB or Llama-sized: none measures the range between).
	p.SmallBytes = transport.DefaultSmallBytes
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
		s, err := measureSet(ctx, eng, filepath.Join(tmp, c.name), c.cfg, int64(p.SmallBytes), opts)
		if err != nil {
			return nil, fmt.Errorf("calibrate %s: %w", c.name, err)
		}
		sets = append(sets, s)
	}
	if err := fitProfile(p, sets[0], sets[1], sets[2]); err != nil {
		return nil, err
	}
	p.Measured = time.Now().UTC().Format(time.RFC3339)
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	return p, nil
}

// fitProfile sets p's pairs from what the tiny, small and large sets'
// loads measured.
func fitProfile(p *costmodel.Profile, tiny, small, large *set) error {
	// Tensors of at most SmallBytes: the tiny and small sets, all of
	// whose tensors are. Larger ones: the large set's, less its small
	// ones at the small pair (a large tensor costs the host what a small
	// one does; its bytes give the rate).
	big := large.all.minus(large.allSmall)
	var err error
	p.Raw, err = pairs(&p.RawSmall, tiny.all, tiny.wall[costmodel.Raw], small.all, small.wall[costmodel.Raw], func() (costmodel.Cost, error) {
		return above(big, large.wall[costmodel.Raw], large.allSmall.time(p.RawSmall), p.RawSmall.Tensor, large.all.bytes)
	})
	if err != nil {
		return fmt.Errorf("calibrate: raw: %w", err)
	}
	// A codec's loads, less what its cache's raw tensors cost at the raw
	// pairs, are its payloads' loads.
	// Where noise leaves too little for that, their share of the bytes.
	coded := func(s *set, k costmodel.Kind) float64 {
		w, c := s.wall[k], s.coded[k]
		if t := w - s.rawTime(p, k); t > w/10 {
			return t
		}
		return w * float64(c.bytes) / float64(s.all.bytes)
	}
	fx, fxSmall := large.coded[costmodel.Fixed], large.codedSmall[costmodel.Fixed]
	p.Fixed, err = pairs(&p.FixedSmall, tiny.coded[costmodel.Fixed], coded(tiny, costmodel.Fixed), small.coded[costmodel.Fixed], coded(small, costmodel.Fixed), func() (costmodel.Cost, error) {
		return above(fx.minus(fxSmall), coded(large, costmodel.Fixed), fxSmall.time(p.FixedSmall), p.FixedSmall.Tensor, fx.bytes)
	})
	if err != nil {
		return fmt.Errorf("calibrate: fixed: %w", err)
	}
	// The tiny and small sets' entropy payloads are all packed; a large
	// one costs the host what a fixed payload does (the same lookup,
	// read, check and launch).
	en, enSmall := large.coded[costmodel.Entropy], large.codedSmall[costmodel.Entropy]
	p.Entropy, err = pairs(&p.EntropySmall, tiny.coded[costmodel.Entropy], coded(tiny, costmodel.Entropy), small.coded[costmodel.Entropy], coded(small, costmodel.Entropy), func() (costmodel.Cost, error) {
		return above(en.minus(enSmall), coded(large, costmodel.Entropy), enSmall.time(p.EntropySmall), p.Fixed.Tensor, en.bytes)
	})
	if err != nil {
		return fmt.Errorf("calibrate: entropy: %w", err)
	}
	return nil
}

// pairs fits a kind's small pair (into *small) from the tiny and small
// sets (s1 in t1 seconds, s2 in t2) and returns its large pair, which
// large fits from the large set given *small. The small pair's rate is at
// most the large one's: small tensors' bytes cross the same links,
// packed, and a faster rate is what two sets whose time goes mostly to
// their tensors' count give from noise (the small entropy pair's rate
// moved from 31.8 to 385.6 GB/s between three calibrations on an H100,
// past what PCIe carries); the small pair is then fitted at that rate
// (atRate) and the large one again.
func pairs(small *costmodel.Cost, s1 counts, t1 float64, s2 counts, t2 float64, large func() (costmodel.Cost, error)) (costmodel.Cost, error) {
	*small = fit(s1, t1, s2, t2)
	l, err := large()
	if err != nil || small.Rate <= l.Rate {
		return l, err
	}
	*small = atRate(l.Rate, s1, t1, s2, t2)
	return large()
}

// above is the pair of a kind's tensors above SmallBytes in one set:
// its load of w seconds less what its other tensors cost (other) leaves
// the big ones' n at tensor seconds each plus their bytes at the rate;
// where noise leaves too little for that, their share (of allBytes) of
// the load.
func above(big counts, w, other, tensor float64, allBytes uint64) (costmodel.Cost, error) {
	if big.bytes == 0 {
		return costmodel.Cost{}, fmt.Errorf("%w: no tensor above %d bytes to fit", costmodel.ErrProfile, transport.DefaultSmallBytes)
	}
	rest := w - other - float64(big.n)*tensor
	if rest <= w/10 {
		rest = w * float64(big.bytes) / float64(allBytes)
	}
	return costmodel.Cost{Tensor: min(tensor, costmodel.MaxTensorCost), Rate: min(float64(big.bytes)/rest, costmodel.MaxRate)}, nil
}

// fit solves t = n*Tensor + b/Rate for two sets (s1 in t1 seconds, s2 in
// t2). Where noise leaves no positive pair: a time a tensor below zero
// (the bytes explain it all) is zero, at the rate of both sets' bytes
// together; a rate below zero is the second set's (the one of larger
// tensors), with what it leaves of the first set's time as its time a
// tensor. (The first set's whole time a tensor, as this once took, put a
// fixed payload's cost at 5.4 µs in one calibration of three and 0.2 in
// the others.)
func fit(s1 counts, t1 float64, s2 counts, t2 float64) costmodel.Cost {
	c := solve(s1, t1, s2, t2)
	// Within what a profile may hold (a rate past it: bytes cost nothing
	// the timer sees).
	c.Tensor, c.Rate = min(c.Tensor, costmodel.MaxTensorCost), min(c.Rate, costmodel.MaxRate)
	return c
}

// atRate is the pair of two sets (s1 in t1 seconds, s2 in t2) at a given
// rate: the time a tensor that fits both best (least squares), at least
// zero.
func atRate(rate float64, s1 counts, t1 float64, s2 counts, t2 float64) costmodel.Cost {
	f1, f2 := float64(s1.n), float64(s2.n)
	r1, r2 := t1-float64(s1.bytes)/rate, t2-float64(s2.bytes)/rate
	tensor := 0.0
	if d := f1*f1 + f2*f2; d > 0 {
		tensor = max(0, (f1*r1+f2*r2)/d)
	}
	return costmodel.Cost{Tensor: min(tensor, costmodel.MaxTensorCost), Rate: rate}
}

// solve is fit's solution before its bounds.
func solve(s1 counts, t1 float64, s2 counts, t2 float64) costmodel.Cost {
	f1, f2, c1, c2 := float64(s1.n), float64(s2.n), float64(s1.bytes), float64(s2.bytes)
	inv := (t2*f1 - t1*f2) / (c2*f1 - c1*f2) // 1/Rate
	tensor := (t1 - c1*inv) / f1
	switch {
	case inv > 0 && tensor >= 0:
		return costmodel.Cost{Tensor: tensor, Rate: 1 / inv}
	case inv > 0:
		return costmodel.Cost{Tensor: 0, Rate: (c1 + c2) / (t1 + t2)}
	}
	rate := c2 / t2
	return costmodel.Cost{Tensor: max(0, (t1-c1/rate)/f1), Rate: rate}
}

// measureCodec compresses src into out with the codec of k and records
// in s its tensors and the fastest of opts.Runs loads of it (and, for the
// fixed cache, of the raw path, which reads the same source).
func measureCodec(ctx context.Context, eng engine.Engine, src, out string, k costmodel.Kind, smallBytes int64, opts Options, s *set) error {
	codec := map[costmodel.Kind]string{costmodel.Fixed: pipeline.CodecFixed, costmodel.Entropy: pipeline.CodecEntropy}[k]
	if _, err := pipeline.Compress(ctx, src, pipeline.CompressOptions{Output: out, Codec: codec, NoSync: true}); err != nil {
		return err
	}
	c, err := shardcache.OpenContext(ctx, out)
	if err != nil {
		return err
	}
	defer c.Close()
	from, err := c.PickSource("")
	if err != nil {
		return err
	}
	var all, allSmall, coded, small counts
	for _, sh := range from.Shards {
		for _, t := range sh.Tensors {
			all.add(t.Size)
			if int64(t.Size) <= smallBytes {
				allSmall.add(t.Size)
			}
			if t.Payload() {
				coded.add(t.Size)
				if int64(t.Size) <= smallBytes {
					small.add(t.Size)
				}
			}
		}
	}
	if coded.n == 0 {
		return fmt.Errorf("%s: no tensor stored as a %s payload", out, k)
	}
	s.all, s.allSmall, s.coded[k], s.codedSmall[k] = all, allSmall, coded, small
	kinds := []costmodel.Kind{k}
	if k == costmodel.Fixed {
		kinds = append(kinds, costmodel.Raw)
	}
	for _, kind := range kinds {
		w, err := fastest(ctx, eng, c, from, kind == costmodel.Raw, opts)
		if err != nil {
			return fmt.Errorf("%s load: %w", kind, err)
		}
		s.wall[kind] = w
	}
	return nil
}

// measureSet writes the checkpoint cfg in dir, compresses it with each
// codec, and returns the fastest of opts.Runs loads of each kind.
func measureSet(ctx context.Context, eng engine.Engine, dir string, cfg synth.Config, smallBytes int64, opts Options) (*set, error) {
	src := filepath.Join(dir, "model")
	if _, err := synth.Write(ctx, src, cfg); err != nil {
		return nil, err
	}
	s := &set{coded: map[costmodel.Kind]counts{}, codedSmall: map[costmodel.Kind]counts{}, wall: map[costmodel.Kind]float64{}}
	for _, k := range []costmodel.Kind{costmodel.Fixed, costmodel.Entropy} {
		if err := measureCodec(ctx, eng, src, filepath.Join(dir, k.String()), k, smallBytes, opts, s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// fastest is the shortest wall seconds of loads of src (after one that
// warms the page cache and the staging up): opts.Runs of them, and more,
// up to maxRuns, until they add up to opts.Least: the fastest of five
// loads of a millisecond moved by a factor of three between calibrations.
func fastest(ctx context.Context, eng engine.Engine, c *shardcache.Cache, src *shardcache.Source, raw bool, opts Options) (float64, error) {
	l, err := load.Open(eng, c, src, load.Options{Raw: raw})
	if err != nil {
		return 0, err
	}
	defer l.Close()
	best, spent := math.Inf(1), 0.0
	for i := 0; i <= opts.Runs || spent < opts.Least.Seconds() && i <= maxRuns; i++ {
		r, err := l.Run(ctx)
		if err != nil {
			return 0, err
		}
		if i > 0 {
			best = math.Min(best, r.Wall.Seconds())
			spent += r.Wall.Seconds()
		}
	}
	return best, nil
}

// maxRuns bounds the loads fastest times.
const maxRuns = 100
