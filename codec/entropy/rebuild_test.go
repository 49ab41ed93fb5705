package entropy

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// TestRebuildBF16 rebuilds BF16 values from random symbols and other bits,
// with and without the vector loop, at lengths around its group of 16,
// against the value formula one value at a time.
func TestRebuildBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	f := Fields[0]
	for _, n := range []int{0, 1, 7, 8, 15, 16, 17, 31, 33, 100, 16383, 16384} {
		syms, others := make([]byte, n), make([]byte, n)
		for i := range n {
			syms[i], others[i] = byte(rng.Uint32()), byte(rng.Uint32())
		}
		want := make([]byte, 2*n)
		for i := range n {
			o := uint16(others[i])
			binary.LittleEndian.PutUint16(want[2*i:], o&0x80<<8|uint16(syms[i])<<7|o&0x7f)
		}
		for _, vec := range []bool{true, false} {
			saved := useAVX2
			useAVX2 = useAVX2 && vec
			got := make([]byte, 2*n)
			unpackValues(got, f, others, syms)
			useAVX2 = saved
			if !bytes.Equal(got, want) {
				t.Fatalf("%d values, vector loop %v: differ at byte %d", n, vec && useAVX2, firstDiff(got, want))
			}
		}
	}
}

// TestSplitBF16 splits random BF16 values into exponents and other bits,
// each alone and both at once, with and without the vector loops, at
// lengths around their group of 32, against the bit fields one value at a
// time.
func TestSplitBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	for _, n := range []int{0, 1, 7, 8, 31, 32, 33, 63, 64, 65, 100, 16383, 16384} {
		raw := make([]byte, 2*n)
		for i := range raw {
			raw[i] = byte(rng.Uint32())
		}
		wantS, wantO := make([]byte, n), make([]byte, n)
		for i := range n {
			v := binary.LittleEndian.Uint16(raw[2*i:])
			wantS[i], wantO[i] = byte(v>>7), byte(v>>15<<7|v&0x7f)
		}
		for _, vec := range []bool{true, false} {
			saved := useAVX2
			useAVX2 = useAVX2 && vec
			s, o := make([]byte, n), make([]byte, n)
			splitBF16(s, o, raw)
			s1, o1 := make([]byte, n), make([]byte, n)
			splitBF16(s1, nil, raw)
			splitBF16(nil, o1, raw)
			useAVX2 = saved
			for _, c := range []struct {
				what      string
				got, want []byte
			}{{"exponents", s, wantS}, {"other bits", o, wantO}, {"exponents alone", s1, wantS}, {"other bits alone", o1, wantO}} {
				if !bytes.Equal(c.got, c.want) {
					t.Fatalf("%d values, vector loop %v: %s differ at byte %d", n, vec && useAVX2, c.what, firstDiff(c.got, c.want))
				}
			}
		}
	}
}
