// Package loadbench measures loads: it repeats a load (package load) to
// time re-faults as an offload runtime's, and sums up alternating raw and
// compressed loads by their medians. It assembles nothing itself.
package loadbench

import (
	"context"
	"fmt"
	"sort"

	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/load"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/transport"
)

// Repeat loads a cached source onto eng and faults everything in runs
// times (evicting in between, as an offload runtime re-faults layers);
// with opts.Check the first run is compared with the source. The report
// has one entry a run.
func Repeat(ctx context.Context, eng engine.Engine, c *shardcache.Cache, src *shardcache.Source, opts load.Options, runs int) (*load.Report, error) {
	if runs < 1 {
		return nil, fmt.Errorf("%w: runs is %d, want 1 or more", transport.ErrOption, runs)
	}
	l, err := load.Open(eng, c, src, opts)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	for i := range runs {
		if _, err := l.Run(ctx); err != nil {
			return nil, err
		}
		if i == 0 && opts.Check {
			if err := l.Check(); err != nil {
				return nil, err
			}
		}
	}
	return l.Report(), nil
}

// Order is the kinds of load of round r of a comparison (counted from 0),
// in turn (raw when true): the first round starts with raw, and the kinds
// take turns starting, so that whatever a load leaves warm for the next
// (or a round's first load pays) falls on each kind in turn.
func Order(r int) [2]bool {
	if r%2 == 0 {
		return [2]bool{true, false}
	}
	return [2]bool{false, true}
}

// Comparison sums up alternating raw and compressed loads by their
// medians: first runs (cold: files read, payloads checked) and later runs
// (repeats) apart.
type Comparison struct {
	ColdRaw   float64 `json:"first_load_raw_gb_per_s"`
	ColdZip   float64 `json:"first_load_splitzip_gb_per_s"`
	ColdRatio float64 `json:"first_load_ratio"`
	WarmRaw   float64 `json:"repeat_raw_gb_per_s,omitempty"`
	WarmZip   float64 `json:"repeat_splitzip_gb_per_s,omitempty"`
	WarmRatio float64 `json:"repeat_ratio,omitempty"`
}

// Compare sums up the reports of raw loads and of compressed ones.
func Compare(raws, zips []*load.Report) Comparison {
	c := Comparison{ColdRaw: median(raws, false), ColdZip: median(zips, false), WarmRaw: median(raws, true), WarmZip: median(zips, true)}
	if c.ColdRaw > 0 {
		c.ColdRatio = c.ColdZip / c.ColdRaw
	}
	if c.WarmRaw > 0 {
		c.WarmRatio = c.WarmZip / c.WarmRaw
	}
	return c
}

// median is the median rate of the reports' first runs, or with warm of
// their later ones (0 when there are none).
func median(reps []*load.Report, warm bool) float64 {
	var x []float64
	for _, r := range reps {
		for i, run := range r.Runs {
			if (i > 0) == warm {
				x = append(x, run.GBps)
			}
		}
	}
	if len(x) == 0 {
		return 0
	}
	sort.Float64s(x)
	return x[len(x)/2]
}
