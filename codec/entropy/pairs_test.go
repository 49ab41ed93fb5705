package entropy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/internal/synth"
)

// peaked returns n values of field f whose fields take few values, most
// of them one (a trained tensor's exponents), and whose other bits are
// random: payloads of them code pairs.
func peaked(rng *rand.Rand, f Field, n int) []byte {
	return synth.Peaked(rng, n, f.Size, f.Shift, f.Bits, f.Whole)
}

// TestPairPayloads: values of few, peaked fields are coded in pairs
// (version 3) for every field (where the pair table pays for itself),
// smaller than the same code of single fields, and decode bit for bit (whole, streamed, by chunk ranges, in
// place) at every length around the chunk size, odd lengths included.
func TestPairPayloads(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	C := codec.ChunkValues
	for fi, f := range Fields {
		for _, n := range []int{2, 3, 255, C - 1, C, C + 1, 3*C + 7} {
			raw := peaked(rng, f, n)
			p := roundTrip(t, fi, raw)
			h, err := ParsePayloadHeader(p)
			if err != nil {
				t.Fatal(err)
			}
			if n > 1000 && (h.Version != pairVersion || !h.Pairs) {
				t.Fatalf("%s, %d values: version %d, want pairs", f.Name(), n, h.Version)
			}
			var streamed []byte
			if err := DecodeStream(bytes.NewReader(p), uint64(len(p)), func(_ uint64, b []byte) error { streamed = append(streamed, b...); return nil }); err != nil || !bytes.Equal(streamed, raw) {
				t.Fatalf("%s, %d values streamed: %v", f.Name(), n, err)
			}
			cs, _ := NewCounts(fi)
			if err := cs.Add(raw); err != nil {
				t.Fatal(err)
			}
			single, err := codeOf(fi, cs.n, cs.Freq())
			if err != nil {
				t.Fatal(err)
			}
			pc, err := newPayloadCode(cs)
			if err != nil {
				t.Fatal(err)
			}
			if h.Pairs != (pc.pairs != nil) || h.Pairs && 8*pc.records+pc.bits >= 8*single.records+single.bits {
				t.Fatalf("%s, %d values: pairs take %d bits, single fields %d", f.Name(), n, 8*pc.records+pc.bits, 8*single.records+single.bits)
			}
		}
	}
}

// TestPairLimit: 256 different pairs are coded in pairs, 257 are not.
func TestPairLimit(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	f := Fields[3] // F8_E4M3 exponents: 16 fields, 256 pairs
	for _, distinct := range []int{256, 255} {
		// Every pair (a, b) with a | b<<4 below distinct, pairs of equal
		// fields 200 times as often as the others (which single fields do
		// not capture).
		var raw []byte
		for k := range distinct {
			a, b := k&15, k>>4
			for range 1 + 199*btoi(a == b) {
				raw = append(raw, byte(a<<3)|byte(rng.IntN(8)), byte(b<<3)|byte(rng.IntN(8))|0x80)
			}
		}
		p := roundTrip(t, 3, raw)
		if h, _ := ParsePayloadHeader(p); h.Version != pairVersion || h.Count != distinct {
			t.Errorf("%s, %d pairs: version %d, %d symbols", f.Name(), distinct, h.Version, h.Count)
		}
	}
	// BF16 of 257 pairs: fields one at a time.
	var raw []byte
	for range 100 {
		for k := range 257 {
			raw = binary.LittleEndian.AppendUint16(raw, uint16(100+k%17)<<7)
			raw = binary.LittleEndian.AppendUint16(raw, uint16(100+k/17)<<7)
		}
	}
	p := roundTrip(t, 0, raw)
	if h, _ := ParsePayloadHeader(p); h.Version != 2 {
		t.Errorf("BF16 of 257 pairs: version %d", h.Version)
	}
}

// TestCounts: counts taken in pieces of any size (ending inside a pair
// or not) and merged equal those of the whole, and Freq is the histogram
// of single fields, also where more than 256 different pairs make the
// counts drop pairs (in the whole, in some pieces, or in one side of a
// merge).
func TestCounts(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 46))
	for fi, f := range Fields {
		for _, c := range []struct {
			n    int
			wide bool
		}{{0, false}, {1, false}, {2, false}, {7, false}, {codec.ChunkValues + 9, false}, {3*codec.ChunkValues + 1, true}, {2001, true}} {
			n := c.n
			raw := peaked(rng, f, n)
			if c.wide { // random bytes after the first third: many pairs
				for i := len(raw) / 3; i < len(raw); i++ {
					raw[i] = byte(rng.Uint32())
				}
			}
			whole, _ := NewCounts(fi)
			if err := whole.Add(raw); err != nil {
				t.Fatal(err)
			}
			parts, _ := NewCounts(fi)
			for rest := raw; len(rest) > 0; {
				k := f.Size * (1 + rng.IntN(9))
				k = min(k, len(rest))
				parts.Add(rest[:k])
				rest = rest[k:]
			}
			// Merged: the first even number of values, then the rest.
			h := 2 * (n / 4)
			merged, _ := NewCounts(fi)
			second, _ := NewCounts(fi)
			merged.Add(raw[:h*f.Size])
			second.Add(raw[h*f.Size:])
			merged.merge(second)
			want := make([]uint64, 1<<f.Bits)
			syms := make([]byte, n)
			if err := fieldsOf(f, syms, raw); err != nil {
				t.Fatal(err)
			}
			for _, s := range syms {
				want[s]++
			}
			for k, cs := range []*Counts{whole, parts, merged} {
				if cs.Values() != uint64(n) || !equalCounts(cs.Freq(), want) {
					t.Fatalf("%s, %d values, counts %d: differ", f.Name(), n, k)
				}
				if cs.pairs() != whole.pairs() || cs.pairs() && !slices.Equal(cs.pairCounts(), whole.pairCounts()) {
					t.Fatalf("%s, %d values, counts %d: pairs %v, of the whole %v, or other pair counts", f.Name(), n, k, cs.pairs(), whole.pairs())
				}
			}
			if c.wide && f.Whole && whole.pairs() {
				t.Fatalf("%s: %d values of random bytes kept their pairs", f.Name(), n)
			}
		}
	}
	if err := func() error { c, _ := NewCounts(0); return c.Add([]byte{1, 2, 3}) }(); err == nil {
		t.Error("counted half a BF16 value")
	}
	if _, err := NewCounts(len(Fields)); err == nil {
		t.Error("counts of a field that does not exist")
	}
}

func equalCounts(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestPairTableCorrupt: a pair table naming a field wider than the
// field's bits, or cut short by the records, is refused by every reader;
// a version 3 payload damaged anywhere else is refused or decodes to
// other values, never a panic or a write outside dst.
func TestPairTableCorrupt(t *testing.T) {
	rng := rand.New(rand.NewPCG(47, 48))
	raw := peaked(rng, Fields[1], codec.ChunkValues+5) // F16: 5-bit fields
	p, err := Encode(1, raw, 1)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := ParsePayloadHeader(p)
	if !h.Pairs {
		t.Fatal("not coded in pairs")
	}
	at := headerSize + (h.Count+1)/2
	bad := bytes.Clone(p)
	bad[at+1] = 32 // the first pair's second field: 6 bits
	binary.LittleEndian.PutUint32(bad[offCRC:], codec.Checksum(bad))
	dst := make([]byte, len(raw))
	if err := Decode(dst, bad, 1); !errors.Is(err, ErrPayload) {
		t.Errorf("Decode: %v", err)
	}
	if _, err := ParseHead(bad); !errors.Is(err, ErrPayload) {
		t.Errorf("ParseHead: %v", err)
	}
	if _, err := NewReader(bytes.NewReader(bad), uint64(len(bad))); !errors.Is(err, ErrPayload) {
		t.Errorf("NewReader: %v", err)
	}
	if _, err := Check(bad); !errors.Is(err, ErrPayload) {
		t.Errorf("Check: %v", err)
	}
	// More symbols than the head has room for before the records.
	bad = bytes.Clone(p)
	binary.LittleEndian.PutUint16(bad[24:], uint16(h.Count+8))
	binary.LittleEndian.PutUint32(bad[offCRC:], codec.Checksum(bad))
	if err := Decode(dst, bad, 1); !errors.Is(err, ErrPayload) {
		t.Errorf("a longer pair table: %v", err)
	}
	for r := range 600 {
		q := bytes.Clone(p)
		q[rng.IntN(min(len(q), int(h.Others)+64))] ^= byte(1 + rng.IntN(255))
		binary.LittleEndian.PutUint32(q[offCRC:], codec.Checksum(q))
		out := make([]byte, len(raw)+16)
		for k := range 16 {
			out[len(raw)+k] = 0xA5
		}
		if err := Decode(out[:len(raw)], q, 2); err != nil && !errors.Is(err, ErrPayload) && !errors.Is(err, ErrStream) && !errors.Is(err, ErrCode) && !errors.Is(err, codec.ErrSize) {
			t.Fatalf("run %d: %v", r, err)
		}
		for k := range 16 {
			if out[len(raw)+k] != 0xA5 {
				t.Fatalf("run %d wrote past the destination", r)
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// pairSeed is a version 3 payload of n peaked values of field fi, for
// the fuzzers' seeds.
func pairSeed(fi, n int) []byte {
	p, err := Encode(fi, peaked(rand.New(rand.NewPCG(uint64(fi), uint64(n))), Fields[fi], n), 1)
	if err != nil {
		panic(err)
	}
	if h, _ := ParsePayloadHeader(p); !h.Pairs {
		panic("a pair seed not coded in pairs")
	}
	return p
}

// TestExpandPairs: pair symbols expand to their fields at every length up
// to a few blocks of eight, odd ones included.
func TestExpandPairs(t *testing.T) {
	rng := rand.New(rand.NewPCG(49, 50))
	var table [MaxSymbols]uint16
	for s := range table {
		table[s] = uint16(rng.Uint32())
	}
	for n := range 70 {
		pairs := make([]byte, (n+1)/2)
		want := make([]byte, n)
		for j := range pairs {
			pairs[j] = byte(rng.Uint32())
			want[2*j] = byte(table[pairs[j]])
			if 2*j+1 < n {
				want[2*j+1] = byte(table[pairs[j]] >> 8)
			}
		}
		dst := make([]byte, n)
		expandPairs(&table, dst, pairs)
		if !bytes.Equal(dst, want) {
			t.Fatalf("%d fields: got %x, want %x", n, dst, want)
		}
	}
}

// TestCountsFold: with counts folded into 64 bits every few hundred
// pairs (as tensors of more than 2^31 pairs are), in pieces, merged with
// and without folds on either side, the counts are those of the whole,
// and the payload decodes bit for bit.
func TestCountsFold(t *testing.T) {
	saved := foldAt
	defer func() { foldAt = saved }()
	rng := rand.New(rand.NewPCG(51, 52))
	for _, fi := range []int{0, 1, 3} {
		f := Fields[fi]
		raw := peaked(rng, f, 5*codec.ChunkValues+3)
		foldAt = saved
		want, _ := NewCounts(fi)
		want.Add(raw)
		foldAt = 300
		var parts []*Counts
		for _, cut := range [][2]int{{0, codec.ChunkValues}, {codec.ChunkValues, 4 * codec.ChunkValues}, {4 * codec.ChunkValues, len(raw) / f.Size}} {
			c, _ := NewCounts(fi)
			for o := cut[0]; o < cut[1]; {
				k := min(cut[1]-o, 1+rng.IntN(5000))
				c.Add(raw[o*f.Size : (o+k)*f.Size])
				o += k
			}
			parts = append(parts, c)
		}
		if parts[1].wide == nil {
			t.Fatalf("%s: no fold", f.Name())
		}
		small, _ := NewCounts(fi) // no fold of its own, merged with folded ones
		small.Add(raw[:2*f.Size])
		for _, c := range parts[1:] {
			parts[0].merge(c)
		}
		if !slices.Equal(parts[0].pairCounts(), want.pairCounts()) || !equalCounts(parts[0].Freq(), want.Freq()) {
			t.Fatalf("%s: folded counts differ", f.Name())
		}
		small.merge(parts[0])
		extra := want.Freq()
		two := make([]byte, 2)
		fieldsOf(f, two, raw[:2*f.Size])
		extra[two[0]]++
		extra[two[1]]++
		if small.Values() != want.Values()+2 || !equalCounts(small.Freq(), extra) {
			t.Fatalf("%s: %d values, or other counts, merged onto unfolded ones", f.Name(), small.Values())
		}
		p := roundTrip(t, fi, raw)
		if h, _ := ParsePayloadHeader(p); !h.Pairs {
			t.Fatalf("%s: not coded in pairs", f.Name())
		}
	}
}
