package calibrate

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/splitzip/splitzip/atomicfile"
	"github.com/splitzip/splitzip/costmodel"
	"github.com/splitzip/splitzip/engine/hostengine"
)

// TestMeasure calibrates on the host engine at a reduced size: the
// profile is valid, names this host, and its costs are what loads of
// each kind cost (a positive time a tensor and rate).
func TestMeasure(t *testing.T) {
	eng := hostengine.New(2)
	defer eng.Close()
	// Folders a killed calibration left (its process id runs no more),
	// and an older build's, unchanged for an hour, are removed; one of a
	// process id this one does not see that changed lately (another PID
	// namespace's, live) is kept; the calibration's own goes when it ends.
	dir := t.TempDir()
	old := time.Now().Add(-2 * staleAge)
	folder := func(name string, at time.Time) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Join(p, "large"), 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(filepath.Join(p, "large"), at, at)
		os.Chtimes(p, at, at)
		return p
	}
	folder(atomicfile.TempPrefix+"9999999-x1-"+tempLabel, old)
	folder("splitzip-calibrate-12345", old)
	live := folder(atomicfile.TempPrefix+"9999998-x2-"+tempLabel, time.Now())
	p, err := Measure(context.Background(), eng, Options{Tiny: 400, Small: 60, Large: 8 << 20, Runs: 2, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 || ents[0].Name() != filepath.Base(live) {
		t.Errorf("left in the calibration's folder: %v, want only %s", ents, filepath.Base(live))
	}
	if err := p.Check(); err != nil {
		t.Fatal(err)
	}
	if p.Host != costmodel.Fingerprint("cpu") || p.Device != "cpu" || p.Measured == "default" {
		t.Fatalf("profile of %q (%q), measured %q", p.Host, p.Device, p.Measured)
	}
	if p.SmallBytes != 256<<10 {
		t.Errorf("small bytes %d, want the transport's packing threshold", p.SmallBytes)
	}
	t.Logf("raw %+v raw small %+v fixed %+v fixed small %+v entropy %+v entropy small %+v", p.Raw, p.RawSmall, p.Fixed, p.FixedSmall, p.Entropy, p.EntropySmall)
}

func TestFit(t *testing.T) {
	// 1 µs a tensor and 10 GB/s: recovered from two sets.
	got := fit(counts{1000, 1e6}, 1000*1e-6+1e6/10e9, counts{10, 1e9}, 10*1e-6+1e9/10e9)
	if d := got.Tensor - 1e-6; d > 1e-12 || d < -1e-12 {
		t.Fatalf("tensor %g", got.Tensor)
	}
	if d := got.Rate/10e9 - 1; d > 1e-6 || d < -1e-6 {
		t.Fatalf("rate %g", got.Rate)
	}
	// Bytes that cost the timer nothing: a rate within a profile's bound.
	if got := fit(counts{1000, 1e6}, 1e-3, counts{10, 1e9}, 1.0000001e-5); got.Rate != costmodel.MaxRate {
		t.Fatalf("a rate past the bound: %+v", got)
	}
	// Noise that makes the rate negative (the large set faster per
	// byte than the small one can be): the large set's rate, the rest of
	// the small set's time a tensor.
	got = fit(counts{1000, 1e6}, 1, counts{10, 1e9}, 0.005)
	if got.Rate != 2e11 || math.Abs(got.Tensor-(1-1e6/2e11)/1000) > 1e-15 {
		t.Fatalf("fallback for a negative rate %+v", got)
	}
	// Noise that makes the time a tensor negative (bytes explain more
	// than all): none, at both sets' rate.
	got = fit(counts{1000, 1e6}, 1e6/10e9*0.5, counts{10, 1e9}, 1e9/10e9)
	if got.Tensor != 0 || math.Abs(got.Rate/((1e6+1e9)/(1e6/10e9*0.5+1e9/10e9))-1) > 1e-12 {
		t.Fatalf("fallback for a negative time a tensor %+v", got)
	}
}

// TestPairsRate: a small pair whose fit is faster than its kind's large
// pair takes the large one's rate, its time a tensor fitted again at that
// rate, and the large pair is fitted again with it; one at or below it
// stays as fitted.
func TestPairsRate(t *testing.T) {
	s1, s2 := counts{1000, 1e6}, counts{100, 1e8}
	at := func(tensor, rate float64, c counts) float64 { return float64(c.n)*tensor + float64(c.bytes)/rate }
	calls := 0
	large := func(k costmodel.Cost) func() (costmodel.Cost, error) {
		return func() (costmodel.Cost, error) { calls++; return k, nil }
	}
	// Fitted at 400 GB/s, 2 µs a tensor; the large pair's 40 GB/s.
	var small costmodel.Cost
	got, err := pairs(&small, s1, at(2e-6, 400e9, s1), s2, at(2e-6, 400e9, s2), large(costmodel.Cost{Tensor: 1e-6, Rate: 40e9}))
	if err != nil || got.Rate != 40e9 || small.Rate != 40e9 || small.Tensor < 0 || calls != 2 {
		t.Fatalf("capped: small %+v, large %+v, %d fits of the large pair, %v", small, got, calls, err)
	}
	// The time a tensor at 40 GB/s that fits both sets best.
	want := atRate(40e9, s1, at(2e-6, 400e9, s1), s2, at(2e-6, 400e9, s2))
	if small != want {
		t.Errorf("small %+v, want %+v", small, want)
	}
	// At 4 GB/s, below the large pair's: as fitted.
	calls = 0
	got, err = pairs(&small, s1, at(2e-6, 4e9, s1), s2, at(2e-6, 4e9, s2), large(costmodel.Cost{Tensor: 1e-6, Rate: 40e9}))
	if err != nil || math.Abs(small.Rate/4e9-1) > 1e-9 || math.Abs(small.Tensor/2e-6-1) > 1e-9 || calls != 1 || got.Rate != 40e9 {
		t.Fatalf("not capped: small %+v, large %+v, %d fits, %v", small, got, calls, err)
	}
	// atRate recovers the time a tensor at the true rate.
	if k := atRate(4e9, s1, at(2e-6, 4e9, s1), s2, at(2e-6, 4e9, s2)); math.Abs(k.Tensor/2e-6-1) > 1e-9 || k.Rate != 4e9 {
		t.Errorf("atRate at the true rate: %+v", k)
	}
}
