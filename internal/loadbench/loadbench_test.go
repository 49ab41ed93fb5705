package loadbench

import (
	"context"
	"errors"
	"testing"

	"github.com/splitzip/splitzip/engine/hostengine"
	"github.com/splitzip/splitzip/internal/fixture"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/load"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/transport"
)

// TestRepeat: every run faults everything in again (the payloads moved
// once a run), the first is checked, and no run is refused.
func TestRepeat(t *testing.T) {
	c, src := fixture.Compressed(t, synth.Config{Bytes: 1 << 20, Shards: 2, Seed: 3}, pipeline.CompressOptions{})
	eng := hostengine.New(2)
	defer eng.Close()
	one, err := Repeat(context.Background(), eng, c, src, load.Options{Check: true}, 1)
	if err != nil {
		t.Fatal(err)
	}
	three, err := Repeat(context.Background(), eng, c, src, load.Options{Check: true}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !one.Checked || !three.Checked || len(one.Runs) != 1 || len(three.Runs) != 3 {
		t.Fatalf("reports: %+v, %+v", one, three)
	}
	if three.MovedBytes != 3*one.MovedBytes {
		t.Errorf("three runs moved %d bytes, one run %d", three.MovedBytes, one.MovedBytes)
	}
	if _, err := Repeat(context.Background(), eng, c, src, load.Options{}, 0); !errors.Is(err, transport.ErrOption) {
		t.Errorf("no runs: %v", err)
	}
}

// TestCompare: medians of first runs and of repeats, apart, and their
// ratios.
func TestCompare(t *testing.T) {
	rep := func(rates ...float64) *load.Report {
		r := &load.Report{}
		for _, x := range rates {
			r.Runs = append(r.Runs, load.RunReport{GBps: x})
		}
		return r
	}
	c := Compare([]*load.Report{rep(1, 10), rep(3, 30), rep(2, 20)}, []*load.Report{rep(4, 60), rep(2, 40), rep(6)})
	want := Comparison{ColdRaw: 2, ColdZip: 4, ColdRatio: 2, WarmRaw: 20, WarmZip: 60, WarmRatio: 3}
	if c != want {
		t.Errorf("got %+v, want %+v", c, want)
	}
	if c := Compare([]*load.Report{rep(2)}, []*load.Report{rep(1)}); c.WarmRatio != 0 || c.ColdRatio != 0.5 {
		t.Errorf("no repeats: %+v", c)
	}
}

// TestOrder: each round loads both kinds, and each kind goes first in
// every other round.
func TestOrder(t *testing.T) {
	first := 0
	for r := range 6 {
		o := Order(r)
		if o[0] == o[1] {
			t.Fatalf("round %d: %v", r, o)
		}
		if o[0] {
			first++
		}
		if r > 0 && o[0] == Order(r - 1)[0] {
			t.Errorf("rounds %d and %d start with the same kind", r-1, r)
		}
	}
	if first != 3 {
		t.Errorf("raw first in %d of 6 rounds", first)
	}
}
