package transport

import (
	"testing"

	"github.com/splitzip/splitzip/vmm"
)

// TestPathsSmall: a batch's counts by path keep apart the tensors of at
// most DefaultSmallBytes (Stats.Small), also as items read through move
// from their payload's path to the raw one, and add up in Stats.
func TestPathsSmall(t *testing.T) {
	small := &vmm.Binding{Spec: vmm.Spec{Size: DefaultSmallBytes}}
	large := &vmm.Binding{Spec: vmm.Spec{Size: DefaultSmallBytes + 1}}
	var ps paths
	ps.add(PathRaw, small)
	ps.add(PathRaw, large)
	ps.add(PathFixed, small)
	ps.add(PathFixed, small)
	ps.add(PathEntropy, large)
	// One small fixed payload read through: the raw path's now.
	ps.through([]smallItem{{b: small, from: PathFixed, through: true}, {b: small, from: PathFixed}})
	var s Stats
	ps.addTo(&s)
	s = s.add(s) // two batches alike
	want := map[Path][2]PathCount{
		PathRaw:     {{6, 2 * (3*DefaultSmallBytes + 1)}, {4, 4 * DefaultSmallBytes}},
		PathFixed:   {{2, 2 * DefaultSmallBytes}, {2, 2 * DefaultSmallBytes}},
		PathEntropy: {{2, 2 * (DefaultSmallBytes + 1)}, {}},
	}
	for p := range NumPaths {
		if w := want[p]; s.Paths[p] != w[0] || s.Small[p] != w[1] {
			t.Errorf("%s: all %+v, small %+v; want %+v, %+v", p, s.Paths[p], s.Small[p], w[0], w[1])
		}
	}
}
