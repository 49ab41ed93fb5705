package entropy

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/splitzip/splitzip/internal/synth"
)

// codeFor builds the 12-bit code of syms' frequencies.
func codeFor(t testing.TB, syms []byte) (*Code, *Table) {
	t.Helper()
	freq := make([]uint64, 256)
	for _, s := range syms {
		freq[s]++
	}
	ls, err := Lengths(freq, 12)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCode(ls, 12)
	if err != nil {
		t.Fatal(err)
	}
	return c, NewTable(c)
}

// TestChunkRoundTrip: every mode, every chunk length that matters (0, 1,
// odd, lane-count boundaries, a full chunk), symbols of 4, 5 and 8 bits,
// decodes bit for bit, and two chunks back to back are each found whole.
func TestChunkRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	gens := map[string]func(n, bits int) []byte{
		"skewed": func(n, bits int) []byte {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(min(int(rng.ExpFloat64()*2), 1<<bits-1))
			}
			return b
		},
		"uniform": func(n, bits int) []byte {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(rng.IntN(1 << bits))
			}
			return b
		},
		"constant": func(n, bits int) []byte { return bytes.Repeat([]byte{byte(1<<bits - 1)}, n) },
		"two": func(n, bits int) []byte {
			b := make([]byte, n)
			b[n/2%max(n, 1)] = 1
			return b
		},
	}
	modes := map[byte]int{}
	for name, gen := range gens {
		for _, bits := range []int{4, 5, 8} {
			for _, n := range []int{1, 2, 3, 127, 128, 129, 1001, 4095, 4096, 4097, 16384} {
				syms := gen(n, bits)
				c, tab := codeFor(t, syms)
				enc, err := EncodeChunk(nil, c, syms, bits)
				if err != nil {
					t.Fatal(err)
				}
				modes[enc[0]]++
				two := append(bytes.Clone(enc), enc...)
				for k := range 2 {
					got := make([]byte, n)
					used, err := DecodeChunk(tab, two[k*len(enc):], bits, got)
					if err != nil || used != len(enc) || !bytes.Equal(got, syms) {
						t.Fatalf("%s bits %d n %d (mode %d): used %d of %d, %v", name, bits, n, enc[0], used, len(enc), err)
					}
				}
			}
		}
	}
	if modes[ModeRaw] == 0 || modes[ModeConstant] == 0 || modes[ModeCoded] == 0 {
		t.Errorf("modes used: %v, want all three", modes)
	}
	empty, _ := EncodeChunk(nil, nil, nil, 8)
	if used, err := DecodeChunk(nil, empty, 8, nil); err != nil || used != 1 {
		t.Errorf("empty chunk: %d, %v", used, err)
	}
}

// TestChunkRejects: truncated chunks and broken headers are errors; no
// input panics or reads past its end.
func TestChunkRejects(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	syms := make([]byte, 5000)
	for i := range syms {
		syms[i] = byte(120 + min(int(rng.ExpFloat64()*3), 20))
	}
	c, tab := codeFor(t, syms)
	enc, _ := EncodeChunk(nil, c, syms, 8)
	if enc[0] != ModeCoded {
		t.Fatalf("mode %d", enc[0])
	}
	got := make([]byte, len(syms))
	for cut := range len(enc) {
		if _, err := DecodeChunk(tab, enc[:cut], 8, got); !errors.Is(err, ErrStream) {
			t.Fatalf("cut at %d: %v", cut, err)
		}
	}
	for r := range 3000 {
		d := bytes.Clone(enc)
		d[rng.IntN(min(len(d), 40))] ^= byte(1 + rng.IntN(255)) // header and lane lengths
		if r%2 == 1 {
			d[rng.IntN(len(d))] ^= byte(1 + rng.IntN(255))
		}
		DecodeChunk(tab, d, 8, got) // an error or other symbols; the payload checksum catches the rest
	}
	if _, err := EncodeChunk(nil, c, []byte{200, 16}, 4); err == nil {
		t.Error("a symbol wider than its bits was encoded")
	}
}

func FuzzDecodeChunk(f *testing.F) {
	syms := []byte{1, 2, 3, 1, 1, 1, 2, 0, 0, 1}
	freq := make([]uint64, 256)
	for _, s := range syms {
		freq[s]++
	}
	ls, _ := Lengths(freq, 12)
	c, _ := NewCode(ls, 12)
	tab := NewTable(c)
	enc, _ := EncodeChunk(nil, c, syms, 8)
	f.Add(enc, 10, 8)
	f.Add([]byte{ModeConstant, 3}, 5, 4)
	f.Add([]byte{ModeRaw, 0xff}, 2, 4)
	f.Fuzz(func(t *testing.T, src []byte, n, bits int) {
		if n < 0 || n > 1<<15 || bits < 1 || bits > 8 {
			return
		}
		used, err := DecodeChunk(tab, src, bits, make([]byte, n))
		if err == nil && (used < 1 || used > len(src)) {
			t.Fatalf("used %d of %d bytes", used, len(src))
		}
	})
}

// TestTranspose8 checks the 8x8 byte transpose against the definition.
func TestTranspose8(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var x, orig [8]uint64
	for i := range x {
		x[i] = rng.Uint64()
	}
	orig = x
	transpose8(&x)
	for i := range 8 {
		for j := range 8 {
			if byte(x[j]>>(8*i)) != byte(orig[i]>>(8*j)) {
				t.Fatalf("byte %d of row %d went to %#x, want %#x", j, i, byte(x[j]>>(8*i)), byte(orig[i]>>(8*j)))
			}
		}
	}
}

// TestMultiSymbolLanes: full chunks decode through the several-symbols
// lookup (its assembly loop where there is one, and its Go loop) exactly
// as through the one-symbol reference path, and corrupted ones (bits
// flipped, lanes cut short) fail or decode the same on all, never
// panicking.
func TestMultiSymbolLanes(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	for trial := range 40 {
		sigma := []float64{0.02, 0.5, 1e-3, 3}[trial%4]
		c, syms := chunkCode(t, synth.Normal(rng, 16384, sigma))
		enc, err := EncodeChunk(nil, c, syms, 8)
		if err != nil {
			t.Fatal(err)
		}
		if enc[0] != ModeCoded {
			continue
		}
		fast := NewTable(c)
		slow := &Table{MaxLen: fast.MaxLen, Entries: fast.Entries, single: true}
		for flip := range 20 {
			src := append([]byte(nil), enc...)
			if flip > 0 {
				for range 1 + rng.IntN(3) {
					i := 8 + rng.IntN(len(src)-8) // past the chunk header
					src[i] ^= byte(1 << rng.IntN(8))
				}
			}
			if flip%5 == 4 {
				src = src[:len(src)-1-rng.IntN(len(src)/2)]
			}
			a, err := decodeThreeWays(fast, slow, src)
			switch {
			case err != nil:
				t.Fatalf("trial %d flip %d: %v", trial, flip, err)
			case flip == 0 && (a == nil || !bytes.Equal(a, syms)):
				t.Fatalf("trial %d: the clean chunk does not decode to its symbols", trial)
			}
		}
	}
}

// FuzzFullChunk damages a full chunk (16,384 symbols in 32 lanes, the
// chunks the several-symbols lookup and its assembly decode) at the
// offsets and with the bytes the fuzzer gives, and requires the fast path
// (assembly where there is one), its Go loop and the one-symbol reference
// to agree: the same symbols or all failing, none panicking.
func FuzzFullChunk(f *testing.F) {
	f.Add(uint64(1), uint16(100), byte(0x10), uint16(0), byte(0), uint16(0))
	f.Add(uint64(2), uint16(9000), byte(0xff), uint16(40), byte(0x01), uint16(300))
	f.Add(uint64(3), uint16(0), byte(0), uint16(0), byte(0), uint16(1))
	f.Fuzz(func(t *testing.T, seed uint64, off1 uint16, x1 byte, off2 uint16, x2 byte, cut uint16) {
		rng := rand.New(rand.NewPCG(seed, seed>>32))
		sigma := []float64{0.02, 0.5, 1e-3, 3}[seed%4]
		c, syms := chunkCode(t, synth.Normal(rng, 16384, sigma))
		enc, err := EncodeChunk(nil, c, syms, 8)
		if err != nil || enc[0] != ModeCoded {
			return
		}
		src := bytes.Clone(enc)
		src[int(off1)%len(src)] ^= x1
		src[int(off2)%len(src)] ^= x2
		src = src[:len(src)-int(cut)%len(src)]
		fast := NewTable(c)
		slow := &Table{MaxLen: fast.MaxLen, Entries: fast.Entries, single: true}
		if _, err := decodeThreeWays(fast, slow, src); err != nil {
			t.Fatal(err)
		}
	})
}

// decodeThreeWays decodes a full chunk's src through table fast (its
// assembly lane loop where there is one, then its Go loop) and through
// the one-symbol table slow, and returns the symbols (nil when all three
// fail) or an error saying how the three differ.
func decodeThreeWays(fast, slow *Table, src []byte) ([]byte, error) {
	a, b, g := make([]byte, 16384), make([]byte, 16384), make([]byte, 16384)
	na, ea := DecodeChunk(fast, src, 8, a)
	nb, eb := DecodeChunk(slow, src, 8, b)
	saved := useLaneAsm
	useLaneAsm = false
	ng, eg := DecodeChunk(fast, src, 8, g)
	useLaneAsm = saved
	switch {
	case (ea == nil) != (eb == nil) || (eg == nil) != (eb == nil):
		return nil, fmt.Errorf("multi-symbol path %v (its Go loop %v), reference %v", ea, eg, eb)
	case ea != nil:
		return nil, nil
	case na != nb || ng != nb || !bytes.Equal(a, b) || !bytes.Equal(g, b):
		return nil, fmt.Errorf("the paths decode differently")
	}
	return a, nil
}

// TestEncodePairs: coding a lane's symbols two at a time gives the bytes
// of coding them one at a time, for every symbol width it serves, lane
// counts and lengths with odd lanes, and codes of 12-bit words.
func TestEncodePairs(t *testing.T) {
	rng := rand.New(rand.NewPCG(91, 92))
	for bits := 1; bits <= pairBits; bits++ {
		for _, n := range []int{2, 3, 127, 128, 129, 1000, 4095, 4096, 4097, 16383, 16384} {
			syms := make([]byte, n)
			for i := range syms {
				// Skewed, so that some codes reach the length limit.
				syms[i] = byte(min(int(rng.ExpFloat64()*float64(bits)), 1<<bits-1))
			}
			c, _ := codeFor(t, syms)
			var tab [MaxSymbols]uint32
			for sym := range 1 << bits {
				if l := c.Lengths[sym]; l > 0 {
					tab[sym] = c.Codes[sym]<<5 | uint32(l)
				}
			}
			var total uint64
			for _, s := range syms {
				total += uint64(tab[s] & 31)
			}
			L := lanesFor(n)
			head := bitWriter{buf: []byte{ModeCoded, 0xA5}}
			head.write(0x5, 3) // a head that leaves the lanes unaligned
			size := len(head.buf) + int((uint64(head.nbits)+total+7)/8)
			var pairs [1 << (2 * pairBits)]uint32
			pairTable(&pairs, &tab, uint(bits))
			want := encodeLanes(head, &tab, syms, L, size)
			got := encodePairs(head, &tab, &pairs, uint(bits), syms, L, size)
			if !bytes.Equal(got, want) {
				t.Fatalf("%d bits, %d symbols: pairs differ at byte %d", bits, n, firstDiff(got, want))
			}
		}
	}
}
