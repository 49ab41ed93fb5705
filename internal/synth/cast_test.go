package synth

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
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

// TestTrained: F32 values are drawn with full mantissas (not a cast, whose
// low 16 bits are zero), other dtypes are Cast's.
func TestTrained(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	bf16 := Normal(rng, 4096, 0.02)
	if got, want := Trained(rng, bf16, 0.02, "F8_E4M3", 512), Cast(bf16, "F8_E4M3", 512); !bytes.Equal(got, want) {
		t.Error("F8_E4M3 values are not Cast's")
	}
	f32 := Trained(rng, bf16, 0.02, "F32", 512)
	if len(f32) != 2*len(bf16) {
		t.Fatalf("%d F32 bytes for %d BF16", len(f32), len(bf16))
	}
	low := 0
	for i := 0; i < len(f32); i += 4 {
		if binary.LittleEndian.Uint16(f32[i:]) != 0 {
			low++
		}
	}
	if low < len(f32)/4*9/10 {
		t.Errorf("only %d of %d F32 values have low mantissa bits", low, len(f32)/4)
	}
}
