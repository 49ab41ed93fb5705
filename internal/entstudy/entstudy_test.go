package entstudy

import (
	"math/rand/v2"
	"testing"

	"github.com/splitzip/splitzip/internal/synth"
)

// TestStudy: on N(0, 0.02) BF16 and its casts, every coder lands between
// the entropy bound and the dtype's raw width, bit-packed lanes no larger
// than padded ones, and the fixed-rate payload near its 12 bits.
func TestStudy(t *testing.T) {
	raw := synth.Normal(rand.New(rand.NewPCG(1, 2)), 1<<18, 0.02)
	st := New()
	if err := st.Add("BF16", raw); err != nil {
		t.Fatal(err)
	}
	if err := st.Cast(raw, 512); err != nil {
		t.Fatal(err)
	}
	if err := st.Add("I64", raw); err != nil { // not a float: ignored
		t.Fatal(err)
	}
	width := map[string]float64{"BF16": 16, "F16": 16, "F32": 32, "F8_E4M3": 8, "F8_E5M2": 8}
	res := st.Results()
	if len(res) != 7 {
		t.Fatalf("%d results, want 7 (FP8 twice)", len(res))
	}
	for _, r := range res {
		if r.Values != 1<<18 || r.Bound <= 0 || r.Packed < r.Bound || r.Canonical < r.Packed || r.Huff0 < r.Bound ||
			r.Canonical > width[r.DType] || r.Packed-r.Bound > 0.2 {
			t.Errorf("%+v", r)
		}
		if r.DType == "BF16" && (r.Fixed < 11.9 || r.Fixed > 12.2) {
			t.Errorf("fixed-rate BF16 at %.3f bits/value", r.Fixed)
		}
	}
}
