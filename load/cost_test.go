package load

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/splitzip/splitzip/costmodel"
	"github.com/splitzip/splitzip/engine/hostengine"
	"github.com/splitzip/splitzip/internal/fixture"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/pipeline"
)

// TestCostReadsRawFromSource: with a cost model that finds every payload
// dearer than its raw bytes, a load reads each tensor from its source:
// with the cache's objects gone it still loads, bit for bit (Check), and
// reports the setting; without the model that load fails; and a model
// that finds payloads cheaper reads them.
func TestCostReadsRawFromSource(t *testing.T) {
	c, src := fixture.Compressed(t, synth.Config{Bytes: 3 << 20, Shards: 2, Seed: 5}, pipeline.CompressOptions{})
	dear, cheap := costmodel.Default(), costmodel.Default()
	dear.Fixed.Tensor, dear.Entropy.Tensor = 1, 1
	cheap.Raw.Tensor = 1
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
