package entropy

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/splitzip/splitzip/internal/synth"
)

// codeFor builds the 12-bit code of syms' frequencies.
func codeFor(t testing.TB, syms []byte) (*Code, *Table) {
	t.Helper()
	c := codeLimited(t, syms, 12)
	return c, NewTable(c)
}

// codeLimited builds the code of syms' frequencies, no code longer than
// limit bits.
func codeLimited(t testing.TB, syms []byte, limit int) *Code {
	t.Helper()
	freq := make([]uint64, 256)
	histogram(freq, syms)
	return codeOfFreq(t, freq, limit)
}

// codeOfFreq builds the code of the symbol frequencies freq, no code
// longer than limit bits.
func codeOfFreq(t testing.TB, freq []uint64, limit int) *Code {
	t.Helper()
	ls, err := Lengths(freq, limit)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCode(ls, limit)
	if err != nil {
		t.Fatal(err)
	}
	return c
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

// TestMultiSymbolLanes: full chunks (16,384 symbols, and the 8,192 of a
// full chunk of pair symbols) and chunks that are not full but hold at
// least partialLanesMin symbols (lanes of unequal counts, lane counts of
// 32) decode through the several-symbols lookup
// (its assembly loop where there is one, and its Go loop) exactly
// as through the one-symbol reference path, and corrupted ones (bits
// flipped, lanes cut short) fail or decode the same on all, never
// panicking.
func TestMultiSymbolLanes(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	sizes := []int{16384, 8192, 4096, 5000, 12345, 8191, 16383} // full, then partial chunks
	for trial := range 8 * len(sizes) {
		sigma := []float64{0.02, 0.5, 1e-3, 3}[trial%4]
		n := sizes[trial/4%len(sizes)]
		c, syms := chunkCode(t, synth.Normal(rng, n, sigma))
		enc, err := EncodeChunk(nil, c, syms, 8)
		if err != nil {
			t.Fatal(err)
		}
		if enc[0] != ModeCoded {
			continue
		}
		fast := NewTable(c)
		fast.multiTable() // built, as a payload's full chunks leave it: every chunk of 32 lanes then takes it
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
			a, err := decodeThreeWays(fast, slow, src, n)
			switch {
			case err != nil:
				t.Fatalf("trial %d flip %d: %v", trial, flip, err)
			case flip == 0 && (a == nil || !bytes.Equal(a, syms)):
				t.Fatalf("trial %d: the clean chunk does not decode to its symbols", trial)
			}
		}
	}
}

// FuzzFullChunk damages a full chunk (16,384 symbols in 32 lanes, or a
// full chunk of pair symbols' 8,192: the chunks the several-symbols
// lookup and its assembly decode), or a chunk of 32 lanes that is not
// full (12,345 or 5,000 symbols, its table built), at the
// offsets and with the bytes the fuzzer gives, and requires the fast path
// (assembly where there is one), its Go loop and the one-symbol reference
// to agree: the same symbols or all failing, none panicking.
func FuzzFullChunk(f *testing.F) {
	f.Add(uint64(1), uint16(100), byte(0x10), uint16(0), byte(0), uint16(0))
	f.Add(uint64(2), uint16(9000), byte(0xff), uint16(40), byte(0x01), uint16(300))
	f.Add(uint64(3), uint16(0), byte(0), uint16(0), byte(0), uint16(1))
	f.Add(uint64(9), uint16(5000), byte(0x08), uint16(0), byte(0), uint16(0))      // 12,345 symbols
	f.Add(uint64(14), uint16(2000), byte(0x80), uint16(77), byte(0x02), uint16(5)) // 5,000 symbols
	f.Fuzz(func(t *testing.T, seed uint64, off1 uint16, x1 byte, off2 uint16, x2 byte, cut uint16) {
		rng := rand.New(rand.NewPCG(seed, seed>>32))
		sigma := []float64{0.02, 0.5, 1e-3, 3}[seed%4]
		n := []int{16384, 8192, 12345, 5000}[seed>>2%4] // full chunks, then 32 lanes not full
		c, syms := chunkCode(t, synth.Normal(rng, n, sigma))
		enc, err := EncodeChunk(nil, c, syms, 8)
		if err != nil || enc[0] != ModeCoded {
			return
		}
		src := bytes.Clone(enc)
		src[int(off1)%len(src)] ^= x1
		src[int(off2)%len(src)] ^= x2
		src = src[:len(src)-int(cut)%len(src)]
		fast := NewTable(c)
		fast.multiTable() // built: every chunk of 32 lanes takes it
		slow := &Table{MaxLen: fast.MaxLen, Entries: fast.Entries, single: true}
		if _, err := decodeThreeWays(fast, slow, src, n); err != nil {
			t.Fatal(err)
		}
	})
}

// decodeThreeWays decodes a full chunk's src (n symbols) through table
// fast (its assembly lane loop where there is one, then its Go loop) and
// through the one-symbol table slow, and returns the symbols (nil when
// all three fail) or an error saying how the three differ.
func decodeThreeWays(fast, slow *Table, src []byte, n int) ([]byte, error) {
	a, b, g := make([]byte, n), make([]byte, n), make([]byte, n)
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

// TestEncodeJoined: coding a lane's symbols two at a time gives the bytes
// of coding them one at a time, for every symbol width it serves, lane
// counts and lengths with odd lanes, and codes of 12-bit words.
func TestEncodeJoined(t *testing.T) {
	rng := rand.New(rand.NewPCG(91, 92))
	for bits := 1; bits <= joinBits; bits++ {
		for _, n := range []int{2, 3, 127, 128, 129, 1000, 4095, 4096, 4097, 16383, 16384} {
			syms := make([]byte, n)
			for i := range syms {
				// Skewed, so that some codes reach the length limit.
				syms[i] = byte(min(int(rng.ExpFloat64()*float64(bits)), 1<<bits-1))
			}
			tab, _ := codeTable(codeLimited(t, syms, 12), bits)
			var total uint64
			for _, s := range syms {
				total += uint64(tab[s] & 31)
			}
			L := lanesFor(n)
			head := bitWriter{buf: []byte{ModeCoded, 0xA5}}
			head.write(0x5, 3) // a head that leaves the lanes unaligned
			size := len(head.buf) + int((uint64(head.nbits)+total+7)/8)
			var joined [1 << (2 * joinBits)]uint32
			joinTable(&joined, &tab, uint(bits))
			want := encodeLanes(head, &tab, syms, L, size, quadBits+1)
			got := encodeJoined(head, &tab, &joined, uint(bits), syms, L, size)
			if !bytes.Equal(got, want) {
				t.Fatalf("%d bits, %d symbols: joined differ at byte %d", bits, n, firstDiff(got, want))
			}
		}
	}
}

// TestEncodeLanesQuad holds the four-codes-a-store lane writer (and the
// pair writer) to the one-code-at-a-time writer, for codes limited to 12,
// quadBits and quadBits+1 bits (the last takes the one-code path itself),
// every symbol width, chunk sizes around the lane and group boundaries,
// and heads that leave the lanes at every bit offset.
func TestEncodeLanesQuad(t *testing.T) {
	rng := rand.New(rand.NewPCG(93, 94))
	longest := map[int]bool{}
	for _, limit := range []int{12, quadBits, quadBits + 1} {
		for bits := 1; bits <= 8; bits++ {
			for _, n := range []int{1, 2, 31, 32, 33, 127, 128, 129, 255, 1000, 4095, 4096, 4097, 16384} {
				// Fibonacci counts (the deepest code trees), shuffled, so
				// that rare symbols reach the limit.
				syms := make([]byte, 0, n)
				for k, f, g := 0, 1, 1; len(syms) < n; k, f, g = k+1, g, f+g {
					for j := 0; j < f && len(syms) < n; j++ {
						syms = append(syms, byte(min(k, 1<<bits-1)))
					}
				}
				rng.Shuffle(n, func(i, j int) { syms[i], syms[j] = syms[j], syms[i] })
				tab, maxLen := codeTable(codeLimited(t, syms, limit), bits)
				longest[maxLen] = true
				if n > 1000 && n%2 == 0 {
					// The same code over its longest codes' symbols: the
					// most bits a group of four can carry.
					var long []byte
					for sym := range 1 << bits {
						if int(tab[sym]&31) >= maxLen-1 {
							long = append(long, byte(sym))
						}
					}
					for i := range syms {
						syms[i] = long[rng.IntN(len(long))]
					}
				}
				L := lanesFor(n)
				head := bitWriter{buf: []byte{ModeCoded}}
				head.write(uint64(rng.Uint32()), n%8+int(rng.IntN(9)))
				want := bitWriter{buf: slices.Clone(head.buf), acc: head.acc, nbits: head.nbits}
				for lane := range L {
					for i := lane; i < n; i += L {
						want.write(uint64(tab[syms[i]]>>5), int(tab[syms[i]]&31))
					}
				}
				ref := want.flush()
				size := len(ref)
				got := encodeLanes(head, &tab, syms, L, size, maxLen)
				if !bytes.Equal(got, ref) {
					t.Fatalf("limit %d, %d bits, %d symbols (longest code %d): lanes differ at byte %d", limit, bits, n, maxLen, firstDiff(got, ref))
				}
				if bits <= joinBits && maxLen <= joinLen {
					var joined [1 << (2 * joinBits)]uint32
					joinTable(&joined, &tab, uint(bits))
					if got := encodeJoined(head, &tab, &joined, uint(bits), syms, L, size); !bytes.Equal(got, ref) {
						t.Fatalf("limit %d, %d bits, %d symbols: joined differ at byte %d", limit, bits, n, firstDiff(got, ref))
					}
				}
			}
		}
	}
	if !longest[quadBits] || !longest[quadBits+1] {
		t.Fatalf("no chunk had a code of %d or of %d bits: %v", quadBits, quadBits+1, longest)
	}
}

// refEncodeChunk is EncodeChunk's format written plainly: lane lengths
// summed one symbol at a time, every field and code through bitWriter.
func refEncodeChunk(c *Code, syms []byte, bits int) []byte {
	n := len(syms)
	if n == 0 {
		return []byte{ModeRaw}
	}
	if constant(syms) {
		return []byte{ModeConstant, syms[0]}
	}
	L := lanesFor(n)
	laneBits := make([]uint64, L)
	var total uint64
	for i, s := range syms {
		laneBits[i%L] += uint64(c.Lengths[s])
		total += uint64(c.Lengths[s])
	}
	mean := total / uint64(L)
	var dev uint64
	for _, b := range laneBits {
		dev = max(dev, max(b, mean)-min(b, mean))
	}
	w := 1 + bitLen(dev)
	bw := bitWriter{}
	if 8+32+5+uint64(w*L)+total >= 8+uint64(bits*n) {
		bw.write(ModeRaw, 8)
		for _, s := range syms {
			bw.write(uint64(s), bits)
		}
		return bw.flush()
	}
	bw.write(ModeCoded, 8)
	bw.write(total, 32)
	bw.write(uint64(w), 5)
	for _, b := range laneBits {
		if b >= mean {
			bw.write(b-mean, w)
		} else {
			bw.write(1<<(w-1)|(mean-b), w)
		}
	}
	for lane := range L {
		for i := lane; i < n; i += L {
			bw.write(uint64(c.Codes[syms[i]]), int(c.Lengths[syms[i]]))
		}
	}
	return bw.flush()
}

// TestEncodeChunkReference holds EncodeChunk, whichever way it sums and
// codes the lanes (vector sums, lanes coded first, pairs, wide codes), to
// refEncodeChunk byte for byte, after a prefix in dst, and checks that a
// symbol of no code is refused on every path.
func TestEncodeChunkReference(t *testing.T) {
	for _, asm := range []bool{true, false} {
		saved := useCodeAsm
		useCodeAsm = useCodeAsm && asm
		t.Run(fmt.Sprintf("asm=%v", useCodeAsm), testEncodeChunkReference)
		useCodeAsm = saved
	}
}

func testEncodeChunkReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(95, 96))
	for _, limit := range []int{12, quadBits, quadBits + 1} {
		for bits := 1; bits <= 8; bits++ {
			for _, n := range []int{1, 2, 33, 128, 129, 1000, 4096, 4097, 16383, 16384} {
				for _, scale := range []float64{0.3, 1.5, 8, 60} {
					syms := make([]byte, n)
					for i := range syms {
						syms[i] = byte(min(int(rng.ExpFloat64()*scale), 1<<bits-1))
					}
					c := codeLimited(t, syms, limit)
					want := refEncodeChunk(c, syms, bits)
					got, err := EncodeChunk([]byte{0xEE, 0x11, 0x22}, c, syms, bits)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got[3:], want) || got[0] != 0xEE {
						t.Fatalf("limit %d, %d bits, %d symbols, scale %g: differs at byte %d", limit, bits, n, scale, firstDiff(got[3:], want))
					}
					if constant(syms) {
						continue
					}
					// A symbol the code lacks, placed in a random lane.
					missing := -1
					for s := range 1 << bits {
						if c.Lengths[s] == 0 {
							missing = s
							break
						}
					}
					if missing < 0 {
						continue
					}
					bad := slices.Clone(syms)
					bad[rng.IntN(n)] = byte(missing)
					if _, err := EncodeChunk(nil, c, bad, bits); !errors.Is(err, ErrCode) {
						t.Fatalf("limit %d, %d bits, %d symbols: symbol %d of no code: %v", limit, bits, n, missing, err)
					}
				}
			}
		}
	}
}

// FuzzEncodeChunk holds EncodeChunk to refEncodeChunk on any symbols of
// any width, coded with the 12-bit or the quadBits-bit code of their own
// counts, through the assembly and the Go lane coders.
func FuzzEncodeChunk(f *testing.F) {
	f.Add([]byte{8, 0, 1, 2, 3, 200, 200, 200})
	f.Add(bytes.Repeat([]byte{5, 1, 2, 3, 4, 4, 4, 4, 4, 4}, 700))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 2 {
			return
		}
		bits, limit := 1+int(in[0]%8), 12
		if in[1]&1 != 0 {
			limit = quadBits
		}
		syms := slices.Clone(in[2:])
		for i := range syms {
			syms[i] &= byte(1<<bits - 1)
		}
		c := codeLimited(t, syms, limit)
		want := refEncodeChunk(c, syms, bits)
		for _, asm := range []bool{true, false} {
			saved := useCodeAsm
			useCodeAsm = useCodeAsm && asm
			got, err := EncodeChunk(nil, c, syms, bits)
			useCodeAsm = saved
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("asm %v, %d bits, %d symbols: differs at byte %d", asm, bits, len(syms), firstDiff(got, want))
			}
		}
	})
}

// TestTablesMatchReference: NewTable and newMultiTable, built without a
// branch a symbol, give the entries of the plain definitions (a code's
// 2^(MaxLen-l) entries; up to three codes a lookup, while they fit) for
// codes of one symbol, of every length up to MaxLen, skewed and flat.
func TestTablesMatchReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for trial := range 60 {
		freq := make([]uint64, MaxSymbols)
		used := []int{1, 2, 3, 17, 256}[trial%5]
		for range used {
			// Geometric weights make codes of every length up to MaxLen.
			freq[rng.IntN(MaxSymbols)] += 1 + uint64(1)<<rng.IntN(40)
		}
		c := codeOfFreq(t, freq, MaxLen)
		want := make([]uint16, 1<<MaxLen)
		for s := range MaxSymbols {
			if l := int(c.Lengths[s]); l > 0 {
				for v := range 1 << (MaxLen - l) {
					want[int(c.Codes[s])<<(MaxLen-l)|v] = uint16(s) | uint16(l)<<8
				}
			}
		}
		tab := NewTable(c)
		if !slices.Equal(tab.Entries, want) {
			t.Fatalf("trial %d: NewTable differs from the definition", trial)
		}
		mt := newMultiTable(tab.Entries, nil)
		for v := range uint32(1 << MaxLen) {
			var syms, count, bits uint32
			for count < 3 {
				e := want[(v<<bits)&(1<<MaxLen-1)]
				l := uint32(e >> 8)
				if l == 0 || bits+l > MaxLen {
					break
				}
				syms |= uint32(e&0xff) << (8 * count)
				count++
				bits += l
			}
			var w uint32
			if count > 0 {
				w = syms | count<<24 | bits<<26
			}
			if mt[v] != w {
				t.Fatalf("trial %d (%d symbols): multi entry %#x is %#x, want %#x", trial, used, v, mt[v], w)
			}
		}
		// The pools' tables, last used for another code, give the same.
		pt := pooledTable(c)
		if !slices.Equal(pt.Entries, want) || *pt.multiTable() != *mt {
			t.Fatalf("trial %d: a pooled table differs", trial)
		}
		pt.release()
	}
}

// TestMultiTableOfNoCode: a table whose entries are no prefix code (a
// Table built by hand) gives some multi-symbol table, without a panic
// or a loop that never ends.
func TestMultiTableOfNoCode(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for range 50 {
		e := make([]uint16, 1<<MaxLen)
		for i := range e {
			e[i] = uint16(rng.Uint32())
		}
		newMultiTable(e, nil)
	}
}

// TestChunkLongerThanFull: DecodeChunk of more symbols than a payload's
// chunk holds (its own callers never ask it) decodes them through the
// one-symbol path, with the multi-symbol table built, never overrunning
// the lane buffers.
func TestChunkLongerThanFull(t *testing.T) {
	n := Lanes*laneSyms + 4000
	c, syms := chunkCode(t, synth.Normal(rand.New(rand.NewPCG(3, 4)), n, 0.02))
	enc, err := EncodeChunk(nil, c, syms, 8)
	if err != nil {
		t.Fatal(err)
	}
	tab := NewTable(c)
	tab.multiTable()
	got := make([]byte, n)
	if _, err := DecodeChunk(tab, enc, 8, got); err != nil || !bytes.Equal(got, syms) {
		t.Fatalf("%d symbols: %v", n, err)
	}
}
