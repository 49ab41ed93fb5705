package distplan

import (
	"math"
	"testing"

	"github.com/splitzip/splitzip/costmodel"
)

// TestPredict: each rank's prediction is the sum of the cost model's
// times of the tensors it reads, each stored object once, by the path it
// takes; the node's is the slowest rank's, and all raw is never cheaper
// than the model says raw costs.
func TestPredict(t *testing.T) {
	prof := costmodel.Default()
	for _, ranks := range []int{1, 3} {
		p, _ := plan(t, ranks, "")
		p.Predict(prof)
		pr := p.Predicted
		if pr == nil || len(pr.PerRank) != ranks || pr.Host != prof.Host {
			t.Fatalf("%d ranks: prediction %+v", ranks, pr)
		}
		want := make([]float64, ranks)
		wantRaw := make([]float64, ranks)
		counts := make([]int, ranks)
		seen := map[int]bool{} // reads New found, by their place
		for _, tn := range p.Tensors {
			if seen[tn.unit] {
				continue
			}
			seen[tn.unit] = true
			want[tn.Reader] += prof.Time(costKind(tn.Stored), tn.Size)
			wantRaw[tn.Reader] += prof.Time(costmodel.Raw, tn.Size)
			counts[tn.Reader]++
		}
		var slowest float64
		fixed := 0
		for r, c := range pr.PerRank {
			if n := c.Raw + c.Fixed + c.Entropy; n != counts[r] {
				t.Errorf("%d ranks: rank %d reads %d tensors, want %d", ranks, r, n, counts[r])
			}
			if math.Abs(c.Seconds-want[r]) > 1e-12 || math.Abs(c.RawS-wantRaw[r]) > 1e-12 {
				t.Errorf("%d ranks: rank %d predicted %g (raw %g), want %g (%g)", ranks, r, c.Seconds, c.RawS, want[r], wantRaw[r])
			}
			slowest = max(slowest, c.Seconds)
			fixed += c.Fixed
		}
		if pr.Seconds != slowest || pr.PerRank[pr.Slowest].Seconds != slowest {
			t.Errorf("%d ranks: node %g (rank %d), slowest rank %g", ranks, pr.Seconds, pr.Slowest, slowest)
		}
		if fixed == 0 {
			t.Errorf("%d ranks: no fixed payload in the plan's prediction", ranks)
		}
	}
}
