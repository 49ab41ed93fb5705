package load

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/splitzip/splitzip/costmodel"
	"github.com/splitzip/splitzip/engine/hostengine"
	"github.com/splitzip/splitzip/internal/fixture"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/shardcache"
)

// TestCostReadsRawFromSource: with a cost model that finds every payload
// dearer than its raw bytes, a load reads each tensor from its source:
// with the cache's objects gone it still loads, bit for bit (Check), and
// reports the setting; without the model that load fails; and a model
// that finds payloads cheaper reads them.
func TestCostReadsRawFromSource(t *testing.T) {
	c, src := fixture.Compressed(t, synth.Config{Bytes: 3 << 20, Shards: 2, Seed: 5}, pipeline.CompressOptions{})
	dear, cheap := costmodel.Default(), costmodel.Default()
	dear.Fixed.Tensor, dear.FixedSmall.Tensor, dear.Entropy.Tensor = 1, 1, 1
	cheap.Raw.Tensor, cheap.RawSmall.Tensor = 1, 1
	run := func(p *costmodel.Profile) (*Report, error) {
		eng := hostengine.New(2)
		defer eng.Close()
		return Checkpoint(context.Background(), eng, c, src, Options{Cost: p, Check: true})
	}
	if rep, err := run(cheap); err != nil || !rep.Settings.CostModel {
		t.Fatalf("payloads cheaper: %v (%+v)", err, rep)
	}
	objs := filepath.Join(c.Dir(), "objects")
	if err := os.RemoveAll(objs); err != nil {
		t.Fatal(err)
	}
	rep, err := run(dear)
	if err != nil || !rep.Settings.CostModel || !rep.Checked {
		t.Fatalf("payloads dearer, objects gone: %v (%+v)", err, rep)
	}
	if _, err := run(cheap); err == nil {
		t.Fatal("payloads cheaper, objects gone: the load did not need them")
	}
	if _, err := run(nil); err == nil {
		t.Fatal("no cost model, objects gone: the load did not need them")
	}
}

// TestPredicted: a load counts its tensors by the path each took, and
// with a cost model predicts a run as the sum of each tensor's predicted
// time by that path (a raw one by its size: small ones at RawSmall); with
// the model's Cost choice every tensor goes raw and the prediction
// follows; without a model there is none.
func TestPredicted(t *testing.T) {
	c, src := fixture.Compressed(t, synth.Config{Bytes: 3 << 20, Shards: 2, Seed: 7}, pipeline.CompressOptions{})
	p := costmodel.Default()
	p.RawSmall = costmodel.Cost{Tensor: 0.1e-6, Rate: 10e9}
	p.FixedSmall = costmodel.Cost{Tensor: 0.3e-6, Rate: 8e9}
	run := func(o Options) *Report {
		t.Helper()
		eng := hostengine.New(2)
		defer eng.Close()
		rep, err := Checkpoint(context.Background(), eng, c, src, o)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	var asStored float64
	fixed := 0
	for _, sh := range src.Shards {
		for _, tn := range sh.Tensors {
			n := tn.Size
			if tn.Stored == shardcache.StoredFixed {
				asStored += p.Time(costmodel.Fixed, n)
				fixed++
			} else {
				asStored += p.Time(costmodel.Raw, n)
			}
		}
	}
	if fixed == 0 {
		t.Fatal("the fixture has no fixed payloads")
	}
	check := func(what string, rep *Report, want float64, paths map[string]uint64) {
		t.Helper()
		var tensors, bytes uint64
		for k, pc := range rep.Paths {
			tensors += pc.Tensors
			bytes += pc.Bytes
			if pc.Tensors != paths[k] {
				t.Errorf("%s: %d tensors by path %s, want %d", what, pc.Tensors, k, paths[k])
			}
		}
		if tensors != uint64(rep.Tensors) || bytes != rep.RawBytes {
			t.Errorf("%s: paths count %d tensors, %d bytes; the load has %d, %d", what, tensors, bytes, rep.Tensors, rep.RawBytes)
		}
		pr := rep.Predicted
		if pr == nil || math.Abs(pr.Seconds-want) > 1e-9*want || pr.Measured != rep.Runs[0].Wall.Seconds() || pr.Ratio <= 0 {
			t.Fatalf("%s: predicted %+v, want %g s", what, pr, want)
		}
	}
	// Every payload read: the paths are the tensors' forms, priced by the
	// model tensor by tensor.
	rep := run(Options{Profile: p})
	check("as stored", rep, asStored, map[string]uint64{"fixed": uint64(fixed), "raw": uint64(rep.Tensors - fixed)})
	// Small payloads read through (ReadThrough) go the raw path, and are
	// priced so (raw tensors alike, the report not saying which are small).
	p.RawSmall, p.FixedSmall = p.Raw, p.Fixed
	rep = run(Options{Profile: p, ReadThrough: true})
	through := uint64(fixed) - rep.Paths["fixed"].Tensors
	if through == 0 || through >= uint64(fixed) {
		t.Fatalf("read through: %d of %d fixed payloads loaded as such, want some and not all", rep.Paths["fixed"].Tensors, fixed)
	}
	var byPaths float64 // a tensor's cost plus its bytes over a rate: summed by path
	for _, pc := range []struct {
		path string
		cost costmodel.Cost
	}{{"raw", p.Raw}, {"fixed", p.Fixed}} {
		byPaths += float64(rep.Paths[pc.path].Tensors)*pc.cost.Tensor + float64(rep.Paths[pc.path].Bytes)/pc.cost.Rate
	}
	check("read through", rep, byPaths, map[string]uint64{"fixed": uint64(fixed) - through, "raw": uint64(rep.Tensors-fixed) + through})
	dear := costmodel.Default()
	dear.Fixed.Tensor, dear.FixedSmall.Tensor, dear.Entropy.Tensor = 1, 1, 1
	dear.RawSmall = costmodel.Cost{Tensor: 0.2e-6, Rate: 5e9}
	allRawDear, small := 0.0, 0
	for _, sh := range src.Shards {
		for _, tn := range sh.Tensors {
			allRawDear += dear.Time(costmodel.Raw, tn.Size)
			if tn.Size <= dear.SmallBytes {
				small++
			}
		}
	}
	if small == 0 {
		t.Fatal("the fixture has no raw tensor of at most SmallBytes")
	}
	rep = run(Options{Cost: dear})
	check("cost model, payloads dearer", rep, allRawDear, map[string]uint64{"raw": uint64(rep.Tensors)})
	if rep := run(Options{}); rep.Predicted != nil {
		t.Errorf("no cost model: predicted %+v", rep.Predicted)
	}
	// No prediction where the small split cannot hold: a profile of
	// another small threshold, a load that packs nothing.
	other := *p
	other.SmallBytes *= 2
	if rep := run(Options{Profile: &other}); rep.Predicted != nil || !strings.Contains(rep.Unpredicted, "small tensors are those of at most") {
		t.Errorf("a profile of another small threshold: %+v, %q", rep.Predicted, rep.Unpredicted)
	}
	if rep := run(Options{Profile: p, SmallBytes: -1}); rep.Predicted != nil || !strings.Contains(rep.Unpredicted, "packs none") {
		t.Errorf("no packing: %+v, %q", rep.Predicted, rep.Unpredicted)
	}
	// The fastest run after the first, beside the first: none with one
	// run, the least of the later ones with three.
	if pr := run(Options{Profile: p}).Predicted; pr.Fastest != 0 || pr.FastestRatio != 0 {
		t.Errorf("one run: fastest %+v", pr)
	}
	eng := hostengine.New(2)
	defer eng.Close()
	l, err := Open(eng, c, src, Options{Profile: p})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for range 3 {
		if _, err := l.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	rep = l.Report()
	pr := rep.Predicted
	if len(rep.Runs) != 3 || pr == nil {
		t.Fatalf("three runs: %d, predicted %+v", len(rep.Runs), pr)
	}
	least := min(rep.Runs[1].Wall, rep.Runs[2].Wall).Seconds()
	if pr.Fastest != least || pr.FastestRatio != least/pr.Seconds {
		t.Errorf("three runs %v: fastest %+v, want %g s", rep.Runs, pr, least)
	}
}

// TestPredictedEntropyHost: entropy payloads decoded on the device are
// priced by the model's entropy costs; decoded on the host
// (EntropyOnHost), which calibrate does not measure, they leave the load
// with no prediction and the reason in Unpredicted, and their decodes are
// counted as HostDecode (their reads as Read).
func TestPredictedEntropyHost(t *testing.T) {
	c, src := fixture.Compressed(t, synth.Config{Bytes: 3 << 20, Shards: 1, Seed: 9}, pipeline.CompressOptions{Codec: pipeline.CodecEntropy})
	p := costmodel.Default()
	run := func(o Options) *Report {
		t.Helper()
		eng := hostengine.New(2)
		defer eng.Close()
		o.Profile = p
		rep, err := Checkpoint(context.Background(), eng, c, src, o)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	rep := run(Options{})
	if rep.Paths["entropy_packed"].Tensors+rep.Paths["entropy"].Tensors == 0 || rep.Predicted == nil || !(rep.Predicted.Seconds > 0) || rep.Unpredicted != "" {
		t.Fatalf("on the engine: paths %v, predicted %+v, unpredicted %q", rep.Paths, rep.Predicted, rep.Unpredicted)
	}
	if rep.HostDecode != 0 {
		t.Errorf("on the engine: %v decoding on the host", rep.HostDecode)
	}
	// Packed (decoded in the packer's staging) and, with packing off,
	// streamed (hostDecode): their decodes and reads are counted.
	for _, small := range []int64{0, -1} {
		rep = run(Options{EntropyOnHost: true, SmallBytes: small})
		if rep.Paths["entropy_host"].Tensors == 0 || rep.Predicted != nil || rep.Unpredicted == "" {
			t.Fatalf("on the host, small bytes %d: paths %v, predicted %+v, unpredicted %q", small, rep.Paths, rep.Predicted, rep.Unpredicted)
		}
		// Summed over goroutines: at most the run's wall time on each.
		var wall time.Duration
		for _, r := range rep.Runs {
			wall += r.Wall
		}
		if most := wall * time.Duration(runtime.GOMAXPROCS(0)+rep.Settings.Readers); rep.HostDecode <= 0 || rep.HostDecode > most || rep.Read <= 0 {
			t.Errorf("on the host, small bytes %d: read %v, decoded %v (at most %v)", small, rep.Read, rep.HostDecode, most)
		}
	}
}
