package crc32c

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestUpdate: every length from 0 to 1,100 and some long ones, at every
// alignment of 0 to 15 and from random and all-ones states, give
// hash/crc32's Castagnoli CRC, with each folding the processor has and
// without (the wide one needs AVX-512 with VPCLMULQDQ: on other machines
// it is skipped with a message).
func TestUpdate(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 1<<20+64)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	lens := []int{1 << 16, 1<<16 + 63, 1 << 20, 1<<20 + 17}
	for n := 0; n <= 1100; n++ {
		lens = append(lens, n)
	}
	saved := choice.Load()
	defer choice.Store(saved)
	ways := []int32{folded, tabled}
	if canFoldWide {
		ways = append(ways, foldedWide)
		lens = append(lens, 1<<16+255, 1<<16+256+64, 1<<20-64)
	} else {
		t.Log("no AVX-512 VPCLMULQDQ: the wide folding is not tested here")
	}
	for _, c := range ways {
		fold := map[int32]string{folded: "narrow", foldedWide: "wide", tabled: "none"}[c]
		choice.Store(c)
		for _, n := range lens {
			for _, off := range []int{0, 1, 7, 15} {
				p := buf[off : off+n]
				for _, crc := range []uint32{0, 0xFFFFFFFF, rng.Uint32()} {
					if got, want := Update(crc, p), crc32.Update(crc, table, p); got != want {
						t.Fatalf("folding %s, %d bytes at %d from %#x: %#x, want %#x", fold, n, off, crc, got, want)
					}
				}
			}
		}
	}
	if got, want := Checksum(buf), crc32.Checksum(buf, table); got != want {
		t.Fatalf("Checksum %#x, want %#x", got, want)
	}
}

// TestXPow: x^0 .. x^31 are the single bits of the reflected order,
// x^32 is the polynomial's lower terms, and Combine joins two CRCs as
// hash/crc32 computes the whole, for lengths around the powers' bits.
func TestXPow(t *testing.T) {
	for e := range 32 {
		if got := xPow(uint64(e), 0); got != 1<<(31-e) {
			t.Fatalf("x^%d = %#x", e, got)
		}
	}
	if got := xPow(32, 0); got != poly {
		t.Fatalf("x^32 = %#x, want %#x", got, uint32(poly))
	}
	rng := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 5000)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	for _, cut := range []int{0, 1, 7, 8, 255, 256, 1024, 4999, 5000} {
		a, b := buf[:cut], buf[cut:]
		if got, want := Combine(crc32.Checksum(a, table), crc32.Checksum(b, table), uint64(len(b))), crc32.Checksum(buf, table); got != want {
			t.Fatalf("cut at %d: %#x, want %#x", cut, got, want)
		}
	}
}

// FuzzUpdate compares Update with hash/crc32 on any input and state.
func FuzzUpdate(f *testing.F) {
	f.Add(uint32(0), make([]byte, 300))
	f.Add(uint32(0xFFFFFFFF), []byte("splitzip"))
	f.Fuzz(func(t *testing.T, crc uint32, p []byte) {
		if got, want := Update(crc, p), crc32.Update(crc, table, p); got != want {
			t.Fatalf("%d bytes from %#x: %#x, want %#x", len(p), crc, got, want)
		}
	})
}

// TestPick: the measured choice is one of the ways the processor has,
// made once.
func TestPick(t *testing.T) {
	Update(0, make([]byte, 4096))
	c := choice.Load()
	if canFold && c != folded && c != tabled && (c != foldedWide || !canFoldWide) {
		t.Fatalf("choice %d after a long input", c)
	}
	t.Logf("folding available %v, wide %v; chosen: folded %v, wide %v", canFold, canFoldWide, c == folded, c == foldedWide)
}

// BenchmarkUpdate is the folding on 7 MiB (an entropy payload of 4 Mi
// F16 values) beside hash/crc32 on the same bytes.
func BenchmarkUpdate(b *testing.B) {
	buf := make([]byte, 7<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	for _, wide := range []bool{false, true} {
		b.Run(map[bool]string{false: "fold", true: "fold-wide"}[wide], func(b *testing.B) {
			if !canFold || wide && !canFoldWide {
				b.Skip("no such folding on this processor")
			}
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				fold(0, buf, wide)
			}
		})
	}
	b.Run("hash-crc32", func(b *testing.B) {
		b.SetBytes(int64(len(buf)))
		for b.Loop() {
			crc32.Update(0, table, buf)
		}
	})
}
