package gpu

import "testing"

// TestPickStages: the decoder's stages on the shared memory of the GPUs
// the fatbin serves (a block may use optin bytes, an SM has perSM, and the
// driver keeps 1 KiB a block), without a GPU.
func TestPickStages(t *testing.T) {
	const static = 5504 // splitzip_decode's own shared memory (ptxas, sm_90)
	occupancy := func(perSM int) func(int) (int, error) {
		return func(s int) (int, error) { return perSM / (s*stageBytes + static + 1024), nil }
	}
	for _, c := range []struct {
		name               string
		want, optin, perSM int
		stages, per        int
		fails              bool
	}{
		{name: "H200 (sm_90)", optin: 232448, perSM: 233472, stages: 3, per: 2},
		{name: "A100 (sm_80)", optin: 166912, perSM: 167936, stages: 2, per: 2},
		{name: "RTX 3090 (sm_86)", optin: 101376, perSM: 102400, stages: 1, per: 2},
		{name: "H200, 6 asked", want: 6, optin: 232448, perSM: 233472, stages: 6, per: 1},
		{name: "sm_86, 3 asked", want: 3, optin: 101376, perSM: 102400, fails: true},
		{name: "too little", optin: 32768, perSM: 65536, fails: true},
	} {
		s, per, err := pickStages(c.want, c.optin, static, occupancy(c.perSM))
		switch {
		case c.fails && err == nil:
			t.Errorf("%s: %d stages, %d blocks an SM; want an error", c.name, s, per)
		case !c.fails && (err != nil || s != c.stages || per != c.per):
			t.Errorf("%s: %d stages, %d blocks an SM, %v; want %d and %d", c.name, s, per, err, c.stages, c.per)
		}
	}
}
