package synth

import (
	"math"
	"testing"
)

// TestMinifloat: known encodings of each format, ties to even, and
// saturation.
func TestMinifloat(t *testing.T) {
	for _, c := range []struct {
		m    minifloat
		x    float64
		want uint32
	}{
		{f16, 1, 0x3c00}, {f16, -2, 0xc000}, {f16, 65504, 0x7bff}, {f16, 1e9, 0x7bff},
		{f16, math.Ldexp(1, -24), 0x0001}, {f16, math.Ldexp(1, -14), 0x0400}, {f16, 1 + math.Ldexp(1, -11), 0x3c00},
		{e4m3, 1, 0x38}, {e4m3, 448, 0x7e}, {e4m3, 1000, 0x7e}, {e4m3, -0.5, 0xb0}, {e4m3, math.Ldexp(1, -9), 0x01},
		{e5m2, 1, 0x3c}, {e5m2, 57344, 0x7b}, {e5m2, math.Ldexp(1, -16), 0x01}, {e5m2, 0, 0},
	} {
		if got := c.m.encode(c.x); got != c.want {
			t.Errorf("%+v encode(%g) = %#x, want %#x", c.m, c.x, got, c.want)
		}
	}
}
