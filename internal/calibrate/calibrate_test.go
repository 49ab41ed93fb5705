package calibrate

import (
	"context"
	"testing"

	"github.com/splitzip/splitzip/costmodel"
	"github.com/splitzip/splitzip/engine/hostengine"
)

// TestMeasure calibrates on the host engine at a reduced size: the
// profile is valid, names this host, and its costs are what loads of
// each kind cost (a positive time a tensor and rate).
func TestMeasure(t *testing.T) {
	eng := hostengine.New(2)
	defer eng.Close()
	p, err := Measure(context.Background(), eng, Options{Tiny: 400, Small: 60, Large: 8 << 20, Runs: 2, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
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
	t.Logf("raw %+v fixed %+v entropy %+v entropy small %+v", p.Raw, p.Fixed, p.Entropy, p.EntropySmall)
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
	// Noise that makes the solve negative (the large set faster per
	// tensor than the tiny one): the simple estimates.
	got = fit(counts{1000, 1e6}, 1, counts{10, 1e9}, 0.005)
	if got.Tensor != 1e-3 || got.Rate != 2e11 {
		t.Fatalf("fallback %+v", got)
	}
}
