package entropy

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"strings"
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

// TestLaneBitsVec: chunks encode byte for byte the same with the vector
// sum of lane bits as without it, whether it applies (a code's symbols
// within 64 of each other) or declines (wider codes, symbols spread over
// more than 64, a symbol of no code, a chunk not of whole 16-row blocks),
// and where it applies its sums are the lanes' bits.
func TestLaneBitsVec(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 46))
	type gen struct {
		name    string
		width   int // symbols are base + [0, width)
		base    int
		n       int
		maxL    int
		skew    bool
		applies bool // the vector sum takes it (where there is one)
	}
	for _, g := range []gen{
		{"narrow", 20, 100, 16384, MaxLen, true, true},
		{"window of 64", 64, 90, 16384, MaxLen, false, true},
		{"window of 65", 65, 90, 16384, MaxLen, false, false},
		{"near 255", 40, 216, 16384, MaxLen, true, true},
		{"from 0", 30, 0, 16384, MaxLen, true, true},
		{"wide, long codes allowed", 200, 20, 16384, 20, true, false},
		{"not whole blocks", 20, 100, 16384 - 32, MaxLen, true, false},
		{"one block", 10, 120, 512, MaxLen, true, true},
		{"4096 rows", 20, 100, 4096 * Lanes, MaxLen, true, true},
		{"4112 rows", 20, 100, 4112 * Lanes, MaxLen, true, false},
	} {
		syms := make([]byte, g.n)
		for i := range syms {
			v := rng.IntN(g.width)
			if g.skew {
				v = min(v, rng.IntN(g.width), rng.IntN(g.width))
			}
			syms[i] = byte(g.base + v)
		}
		c := codeLimited(t, syms, g.maxL)
		encode := func(vec bool, s []byte) ([]byte, error) {
			saved := useAVX2
			useAVX2 = useAVX2 && vec
			defer func() { useAVX2 = saved }()
			return EncodeChunk(nil, c, s, 8)
		}
		a, ea := encode(true, syms)
		b, eb := encode(false, syms)
		if ea != nil || eb != nil || !bytes.Equal(a, b) {
			t.Fatalf("%s: with the vector sum %v, without %v; equal %v", g.name, ea, eb, bytes.Equal(a, b))
		}
		// A symbol of no code: the same error both ways.
		bad := bytes.Clone(syms)
		bad[rng.IntN(len(bad))] = byte(g.base + g.width + 3)
		if _, ea := encode(true, bad); ea == nil || !strings.Contains(ea.Error(), "has no code") {
			t.Fatalf("%s: a symbol of no code: %v", g.name, ea)
		} else if _, eb := encode(false, bad); eb == nil || ea.Error() != eb.Error() {
			t.Fatalf("%s: a symbol of no code: %v with the vector sum, %v without", g.name, ea, eb)
		}
		// The sums themselves.
		var tab [MaxSymbols]uint32
		for s := range MaxSymbols {
			if l := c.Lengths[s]; l > 0 {
				tab[s] = c.Codes[s]<<5 | uint32(l)
			}
		}
		var got, want [Lanes]uint64
		for i, s := range syms {
			want[i%Lanes] += uint64(tab[s] & 31)
		}
		ok := laneBitsVec(&tab, syms, &got)
		if ok && got != want {
			t.Fatalf("%s: lane bits %v, want %v", g.name, got, want)
		}
		if ok != (g.applies && useAVX2) {
			t.Fatalf("%s: the vector sum took it: %v", g.name, ok)
		}
	}
	// Codes longer than 15 bits (the byte sums of 16 rows would overflow):
	// declined, though the symbols lie close together.
	var tab [MaxSymbols]uint32
	for l := 1; l <= 16; l++ {
		tab[100+l] = uint32(l)
	}
	tab[117] = 16
	syms := make([]byte, 16384)
	for i := range syms {
		syms[i] = byte(101 + rng.IntN(17))
	}
	var got [Lanes]uint64
	if laneBitsVec(&tab, syms, &got) {
		t.Fatal("codes of 16 bits: the vector sum took them")
	}
}

// TestTransposeLanes: the vector transpose of a full chunk's lane-major
// buffer writes what the Go loop does.
func TestTransposeLanes(t *testing.T) {
	rng := rand.New(rand.NewPCG(47, 48))
	var lanes [Lanes * laneStride]byte
	for i := range lanes {
		lanes[i] = byte(rng.Uint32())
	}
	for _, m := range []int{laneSyms, laneSyms / 2} { // full chunks of single fields and of pairs
		want, got := make([]byte, Lanes*m), make([]byte, Lanes*m)
		transposeLanesGo(want, &lanes, m)
		for k := range Lanes {
			for r := range m {
				if want[r*Lanes+k] != lanes[k*laneStride+r] {
					t.Fatalf("Go loop, %d symbols a lane: symbol %d of lane %d misplaced", m, r, k)
				}
			}
		}
		if !transposeLanes(got, &lanes, m) {
			t.Skip("no vector transpose here")
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("vector transpose, %d symbols a lane, differs at byte %d", m, firstDiff(got, want))
		}
	}
}

// TestPackOthers: every field's other bits pack to the bytes a bitWriter
// writes a value at a time (the format), and the values rebuilt from them
// and the symbols are the originals, at lengths around the fast loops'
// reach.
func TestPackOthers(t *testing.T) {
	rng := rand.New(rand.NewPCG(49, 50))
	for fi, f := range Fields {
		if f.Other() == 0 || f.Other() == 8 {
			continue // whole bytes, and BF16 (a byte a value, tested above)
		}
		for _, n := range []int{1, 2, 7, 8, 9, 15, 16, 17, 23, 24, 25, 100, 16383, 16384} {
			raw := make([]byte, n*f.Size)
			for i := range raw {
				raw[i] = byte(rng.Uint32())
			}
			var want bitWriter
			for i := range n {
				want.write(uint64(f.otherBits(value(f, raw, i))), f.Other())
			}
			got := make([]byte, (n*f.Other()+7)/8)
			packOthers(got, f, raw)
			if w := want.flush(); !bytes.Equal(got, w) {
				t.Fatalf("%s, %d values: packed bits differ at byte %d", f.Name(), n, firstDiff(got, w))
			}
			syms := make([]byte, n)
			if err := Fields[fi].Symbols(syms, raw); err != nil {
				t.Fatal(err)
			}
			for _, vec := range []bool{true, false} {
				saved := useAVX2
				useAVX2 = useAVX2 && vec
				back := make([]byte, len(raw))
				unpackValues(back, f, got, syms)
				useAVX2 = saved
				if !bytes.Equal(back, raw) {
					t.Fatalf("%s, %d values, vector loops %v: rebuilt values differ at byte %d", f.Name(), n, vec && useAVX2, firstDiff(back, raw))
				}
			}
		}
	}
}
