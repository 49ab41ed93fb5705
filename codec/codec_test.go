package codec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"testing"

	"github.com/splitzip/splitzip/internal/synth"
)

func seeded(t testing.TB) (*rand.Rand, uint64) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, 42)), seed
}

// allPatterns returns every BF16 bit pattern once, in a shuffled order.
func allPatterns(rng *rand.Rand) []byte {
	v := make([]byte, 2*65536)
	for i := range 65536 {
		binary.LittleEndian.PutUint16(v[2*i:], uint16(i))
	}
	rng.Shuffle(65536, func(i, j int) {
		a, b := v[2*i:2*i+2], v[2*j:2*j+2]
		a[0], a[1], b[0], b[1] = b[0], b[1], a[0], a[1]
	})
	return v
}

// roundTrip encodes, checks the in-place invariant by simulation, decodes
// and compares bit for bit.
func roundTrip(t *testing.T, rng *rand.Rand, name string, values []byte) Stats {
	t.Helper()
	p, st, err := Encode(values)
	if err != nil {
		t.Fatalf("%s: encode: %v", name, err)
	}
	got := make([]byte, len(values))
	if err := Decode(got, p); err != nil {
		t.Fatalf("%s: decode: %v", name, err)
	}
	if !bytes.Equal(got, values) {
		t.Fatalf("%s: decoded values differ at byte %d", name, firstDiff(got, values))
	}
	for _, w := range []int{1, 3} {
		clear(got)
		if err := Decode(got, p, WithWorkers(w)); err != nil || !bytes.Equal(got, values) {
			t.Fatalf("%s: decode with %d workers: %v", name, w, err)
		}
	}
	if st.InPlace {
		simulateInPlace(t, rng, name, p, values)
	} else if len(values) > 4*ChunkValues {
		t.Logf("%s: %v", name, st.NotInPlace)
	}
	return st
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestAVX2Encode runs the round trips with the AVX2 encode loop where the
// AVX-512 one would be used.
func TestAVX2Encode(t *testing.T) {
	if !useAVX512 {
		t.Skip("no AVX-512 VBMI: the AVX2 loop is already the one tested")
	}
	useAVX512 = false
	defer func() { useAVX512 = true }()
	TestAllBitPatterns(t)
	TestLengths(t)
	TestEscapeHeavy(t)
	TestGolden(t)
}

// TestPureGo runs the round trips with the pure-Go decode loop, which
// machines without AVX2 (and the noasm build tag) use.
func TestPureGo(t *testing.T) {
	if !useAVX2 {
		t.Skip("the pure-Go loop is the only one here; other tests cover it")
	}
	useAVX2 = false
	defer func() { useAVX2 = true }()
	TestAllBitPatterns(t)
	TestLengths(t)
	TestEscapeHeavy(t)
	TestGolden(t)
}

func TestAllBitPatterns(t *testing.T) {
	rng, _ := seeded(t)
	v := allPatterns(rng)
	roundTrip(t, rng, "all patterns shuffled", v)
	// In order: each chunk of 16384 patterns covers 128 exponents.
	for i := range 65536 {
		binary.LittleEndian.PutUint16(v[2*i:], uint16(i))
	}
	roundTrip(t, rng, "all patterns in order", v)
	// Every pattern embedded in realistic data, so that most chunks are
	// coded and the rare patterns travel as escapes.
	w := synth.Normal(rng, 40*ChunkValues, 0.02)
	for i := range 65536 {
		j := rng.IntN(len(w) / 2)
		binary.LittleEndian.PutUint16(w[2*j:], uint16(i))
	}
	roundTrip(t, rng, "patterns in normal data", w)
}

func TestLengths(t *testing.T) {
	rng, _ := seeded(t)
	C := ChunkValues
	for _, n := range []int{0, 1, 2, 3, 5, 7, 15, 16, 17, 100, 1001, C - 1, C, C + 1, 2*C - 1, 2 * C, 2*C + 1, 3*C + 7, 64*C - 1, 64 * C, 64*C + 1, 129*C + 3} {
		v := synth.Normal(rng, n, 0.02)
		st := roundTrip(t, rng, fmt.Sprintf("n=%d", n), v)
		if n >= 4*C && (st.RawChunks > 1 || !st.InPlace) {
			t.Errorf("n=%d: %d raw chunks in normal data, in place %v", n, st.RawChunks, st.InPlace)
		}
	}
}

func TestEscapeHeavy(t *testing.T) {
	rng, _ := seeded(t)
	C := ChunkValues
	// Uniform bit patterns: every exponent equally likely, coverage 1/16.
	u := make([]byte, 2*(5*C+3))
	for i := range u {
		u[i] = byte(rng.Uint32())
	}
	roundTrip(t, rng, "uniform", u)
	// Normal data with escape-heavy chunks between coded ones, at rates
	// around the raw fallback threshold.
	v := synth.Normal(rng, 24*C+5, 0.02)
	for c := 0; c < 24; c += 2 {
		rate := []float64{0.001, 0.05, 0.16, 0.17, 0.2, 0.9}[c/2%6]
		for i := c * C; i < (c+1)*C; i++ {
			if rng.Float64() < rate {
				binary.LittleEndian.PutUint16(v[2*i:], uint16(rng.Uint32()&0x807f|0x7f00)) // huge exponents
			}
		}
	}
	st := roundTrip(t, rng, "mixed", v)
	if st.RawChunks == 0 || st.Escapes == 0 {
		t.Errorf("mixed data: %d raw chunks, %d escapes; want both", st.RawChunks, st.Escapes)
	}
}

func TestSpecialValues(t *testing.T) {
	rng, _ := seeded(t)
	specials := []uint16{0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x7f81, 0x0001, 0x807f, 0x3f80, 0xbf80}
	v := synth.Normal(rng, 10*ChunkValues+1, 0.02)
	for i := 0; i < len(v)/2; i += 97 {
		binary.LittleEndian.PutUint16(v[2*i:], specials[i%len(specials)])
	}
	roundTrip(t, rng, "specials", v)
}

func TestSize(t *testing.T) {
	if testing.Short() {
		t.Skip("64 MiB tensor")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	v := synth.Normal(rng, 32<<20, 0.02)
	p, st, err := Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	bpv := float64(8*len(p)) / float64(len(v)/2)
	t.Logf("64 MiB N(0,0.02): %d bytes, %.4f bits per value, %d escapes", len(p), bpv, st.Escapes)
	if bpv > 12.03 {
		t.Errorf("%.4f bits per value, want at most 12.03", bpv)
	}
}

func TestCodebookDeterministic(t *testing.T) {
	var h Histogram
	h[3], h[9], h[200], h[7] = 5, 5, 9, 1
	cb := NewCodebook(&h)
	want := Codebook{200, 3, 9, 7, 0, 1, 2, 4, 5, 6, 8, 10, 11, 12, 13, 14}
	if cb != want {
		t.Fatalf("codebook %v, want %v", cb, want)
	}
}

func TestCorruption(t *testing.T) {
	rng, _ := seeded(t)
	v := synth.Normal(rng, 3*ChunkValues+77, 0.02)
	for i := 0; i < 40; i++ { // some escapes
		binary.LittleEndian.PutUint16(v[2*rng.IntN(len(v)/2):], 0x0001)
	}
	p, _, err := Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(v))
	for i := 0; i < 3000; i++ {
		q := bytes.Clone(p)
		pos := rng.IntN(len(q))
		q[pos] ^= byte(1 + rng.IntN(255))
		if err := Decode(out, q); !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrChecksum) {
			t.Fatalf("flip at %d: %v", pos, err)
		}
		// With the checksum fixed up, the structure checks must catch it
		// or the payload must still decode to something, without panics.
		binary.LittleEndian.PutUint32(q[offChecksum:], Checksum(q))
		_ = Decode(out, q)
	}
	// A version field its checksum covers is another version (ErrVersion);
	// of the header alone it cannot be told from damage, and says so too.
	q := bytes.Clone(p)
	binary.LittleEndian.PutUint16(q[offVersion:], Version+1)
	if err := Decode(out, q); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a flipped version: %v, want ErrCorrupt", err)
	}
	if _, err := ParseHeader(q[:HeaderSize]); !errors.Is(err, ErrVersion) {
		t.Errorf("a header of another version: %v, want ErrVersion", err)
	}
	if _, err := NewReader(bytes.NewReader(q), uint64(len(q))); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a flipped version, read from a file: %v, want ErrCorrupt", err)
	}
	binary.LittleEndian.PutUint32(q[offChecksum:], Checksum(q))
	if err := Decode(out, q); !errors.Is(err, ErrVersion) {
		t.Errorf("a payload of another version: %v, want ErrVersion", err)
	}
	if _, err := NewReader(bytes.NewReader(q), uint64(len(q))); !errors.Is(err, ErrVersion) {
		t.Errorf("a payload of another version, read from a file: %v, want ErrVersion", err)
	}
	for _, n := range []int{0, 10, 63, 64, len(p) - 1} {
		if err := Decode(out, p[:n]); err == nil {
			t.Errorf("truncated to %d bytes: no error", n)
		}
	}
	if err := Decode(out[:len(out)-2], p); !errors.Is(err, ErrSize) {
		t.Errorf("short destination: %v", err)
	}
}

// simulateInPlace decodes p inside a buffer of the decoded size, starting
// with p at its start, the way the GPU does: chunks are claimed in
// descending order by a bounded number of workers; a claimed chunk first
// reads its entry and data, then writes its output once every chunk its
// entry names as a reader has finished reading. Every write is checked
// against the bytes still to be read, so a wrong reader range or a broken
// invariant fails here.
func simulateInPlace(t *testing.T, rng *rand.Rand, name string, p, want []byte) {
	t.Helper()
	L, err := parse(p, 1)
	if err != nil {
		t.Fatal(err)
	}
	h := L.h
	N := int(h.Chunks())
	buf := make([]byte, 2*h.Values)
	copy(buf, p)
	pending := make([]int32, len(buf))
	type span struct{ a, b uint64 }
	reads := func(d int) []span {
		e := L.entries[d]
		g, j := h.group(uint64(d))
		epos := L.l1[g] + EntrySize*j
		cnt := h.chunkCount(uint64(d))
		return []span{{HeaderSize, HeaderSize + 8*h.Groups()}, {epos, epos + EntrySize}, {e.Offset, e.Offset + chunkLen(cnt, e.Escapes)}}
	}
	for d := range N {
		for _, s := range reads(d) {
			for x := s.a; x < s.b; x++ {
				pending[x]++
			}
		}
	}
	readDone := make([]bool, N)
	scratch := make([][]byte, N)
	escs := make([]uint16, N)
	next := N - 1
	var active []int
	workers := 1 + rng.IntN(8)
	lut := pairTable(&h.Codebook)
	codes := h.Codebook.codeTable()
	for next >= 0 || len(active) > 0 {
		if next >= 0 && len(active) < workers && (len(active) == 0 || rng.IntN(2) == 0) {
			d := next
			next--
			// Read phase: the entry is read from the buffer, not the parsed table.
			s := reads(d)
			e := getEntry(buf[s[1].a:])
			escs[d] = e.Escapes
			scratch[d] = bytes.Clone(buf[s[2].a:s[2].b])
			for _, s := range s {
				for x := s.a; x < s.b; x++ {
					pending[x]--
				}
			}
			readDone[d] = true
			active = append(active, d)
			continue
		}
		// Write phase for some active chunk whose readers are done.
		progressed := false
		for _, k := range rng.Perm(len(active)) {
			c := active[k]
			e := L.entries[c]
			lo, hi := int(e.ReadLo), int(e.ReadLo)+int(e.ReadSpan)
			if c == 0 {
				lo, hi = 1, N
			}
			ready := true
			for d := lo; d < hi; d++ {
				ready = ready && readDone[d]
			}
			if !ready {
				continue
			}
			a := uint64(c) * ChunkValues * 2
			b := a + 2*uint64(h.chunkCount(uint64(c)))
			for x := a; x < b; x++ {
				if pending[x] != 0 {
					t.Fatalf("%s: chunk %d overwrites byte %d that %d chunks still read", name, c, x, pending[x])
				}
			}
			if reason := decodeChunk(buf[a:b], scratch[c], escs[c], &h.Codebook, lut, &codes); reason != "" {
				t.Fatalf("%s: chunk %d: %s", name, c, reason)
			}
			active = append(active[:k], active[k+1:]...)
			progressed = true
			break
		}
		if !progressed && (next < 0 || len(active) >= workers) {
			t.Fatalf("%s: deadlock with %d workers, active %v", name, workers, active)
		}
	}
	if !bytes.Equal(buf, want) {
		t.Fatalf("%s: in-place result differs at byte %d", name, firstDiff(buf, want))
	}
}

func TestPieceChecksums(t *testing.T) {
	rng, _ := seeded(t)
	p, _, err := Encode(synth.Normal(rng, 3*ChunkValues+9, 0.02))
	if err != nil {
		t.Fatal(err)
	}
	for _, piece := range []int{1, 7, 56, 57, 60, 61, 4096, len(p)} {
		var crc uint32
		for off := 0; off < len(p); off += piece {
			q := p[off:min(off+piece, len(p))]
			crc = CombineChecksums(crc, PieceChecksum(q, uint64(off)), uint64(len(q)))
		}
		if crc != Checksum(p) {
			t.Errorf("pieces of %d bytes: %08x, want %08x", piece, crc, Checksum(p))
		}
		// The same spans continued in order, as a piece that arrives
		// span by span is checksummed (UpdatePieceChecksum).
		crc = 0
		for off := 0; off < len(p); off += piece {
			crc = UpdatePieceChecksum(crc, p[off:min(off+piece, len(p))], uint64(off))
		}
		if crc != Checksum(p) {
			t.Errorf("spans of %d bytes continued: %08x, want %08x", piece, crc, Checksum(p))
		}
	}
}

// TestChecksumParallel: the checksum on several goroutines equals the
// serial one for lengths around its pieces, the header's checksum field
// included (payloads are at least a header long), and a flipped byte
// changes it.
func TestChecksumParallel(t *testing.T) {
	rng, _ := seeded(t)
	p := make([]byte, 3*checksumPiece+100)
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
	for _, n := range []int{HeaderSize, 70, checksumPiece - 1, checksumPiece, checksumPiece + 1, 2*checksumPiece - 1, 2 * checksumPiece, 2*checksumPiece + 1, len(p)} {
		for _, w := range []int{1, 2, 3, 8} {
			if got, want := ChecksumParallel(p[:n], w), Checksum(p[:n]); got != want {
				t.Fatalf("%d bytes on %d goroutines: %08x, want %08x", n, w, got, want)
			}
		}
	}
	q := bytes.Clone(p)
	q[2*checksumPiece+5] ^= 1
	if ChecksumParallel(q, 4) == ChecksumParallel(p, 4) {
		t.Fatal("a flipped byte kept the checksum")
	}
}

// TestLarge round-trips a tensor of more than 2^31 values (64-bit counts
// and offsets). It needs about 12 GiB of memory; SPLITZIP_LARGE=1 enables it.
func TestLarge(t *testing.T) {
	if os.Getenv("SPLITZIP_LARGE") == "" {
		t.Skip("set SPLITZIP_LARGE=1 to round-trip a tensor of 2^31+3 values")
	}
	n := 1<<31 + 3
	v := make([]byte, 2*n)
	rng := rand.New(rand.NewPCG(5, 5))
	copy(v, synth.Normal(rng, 1<<20, 0.02))
	for off := 2 << 20; off < len(v); off *= 2 {
		copy(v[off:], v[:off])
	}
	binary.LittleEndian.PutUint16(v[len(v)-2:], 0x7f81)
	p, st, err := Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	if !st.InPlace || st.Chunks != uint64(n+ChunkValues-1)/ChunkValues {
		t.Fatalf("stats %+v", st)
	}
	out := make([]byte, len(v))
	if err := Decode(out, p); err != nil || !bytes.Equal(out, v) {
		t.Fatalf("large round trip: %v", err)
	}
	t.Logf("%d values, %d payload bytes (%.4f bits per value), in place", n, len(p), 8*float64(len(p))/float64(n))
}

func TestGroups(t *testing.T) {
	for _, n := range []uint64{0, 1, ChunkValues, 64 * ChunkValues, 64*ChunkValues + 1, 32768 * ChunkValues, 32769 * ChunkValues, 1<<31 + 3, MaxValues} {
		h := Header{Values: n, ChunkValues: ChunkValues, GroupChunks: groupChunksFor(n)}
		N, G := h.Chunks(), h.Groups()
		if 8*G > MaxGroupTableBytes || h.GroupChunks > MaxGroupChunks {
			t.Errorf("n=%d: %d groups of %d", n, G, h.GroupChunks)
		}
		// Every chunk is in exactly one group, in order.
		var next uint64
		for g := range G {
			first, cnt := h.groupSpan(g)
			if first != next || cnt == 0 {
				t.Fatalf("n=%d: group %d spans [%d,+%d), expected first %d", n, g, first, cnt, next)
			}
			for _, c := range []uint64{first, first + cnt - 1} {
				if gg, j := h.group(c); gg != g || j != c-first {
					t.Fatalf("n=%d: chunk %d in group %d at %d", n, c, gg, j)
				}
			}
			next = first + cnt
		}
		if next != N {
			t.Fatalf("n=%d: groups cover %d of %d chunks", n, next, N)
		}
		// Header, group table and group 0's entries leave chunk 0 room.
		if n >= ChunkValues && h.DataStart()+EntrySize*MinGroupChunks+escOffset(ChunkValues) > 2*ChunkValues {
			t.Errorf("n=%d: chunk 0 cannot be in place", n)
		}
	}
}

func TestReader(t *testing.T) {
	rng, _ := seeded(t)
	v := synth.Normal(rng, 70*ChunkValues+123, 0.02)
	for i := 0; i < len(v)/2; i += 5000 {
		binary.LittleEndian.PutUint16(v[2*i:], 0x0001)
	}
	p, _, err := Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(bytes.NewReader(p), uint64(len(p)))
	if err != nil {
		t.Fatal(err)
	}
	h := r.Header()
	N := h.Chunks()
	for first := uint64(0); first < N; first += 9 {
		k := min(9, N-first)
		n := min((first+k)*ChunkValues, uint64(len(v)/2)) - first*ChunkValues
		out := make([]byte, 2*n)
		if err := r.DecodeChunks(out, first, k); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, v[2*first*ChunkValues:2*first*ChunkValues+2*n]) {
			t.Fatalf("chunks [%d, %d) differ", first, first+k)
		}
	}
	q := bytes.Clone(p)
	q[len(q)/2] ^= 1
	if _, err := NewReader(bytes.NewReader(q), uint64(len(q))); !errors.Is(err, ErrChecksum) {
		t.Errorf("flipped payload: %v", err)
	}
	if _, err := NewReader(bytes.NewReader(p[:len(p)-16]), uint64(len(p)-16)); err == nil {
		t.Error("truncated payload accepted")
	}
}

// TestHistogram checks the vector histogram against a plain count.
func TestHistogram(t *testing.T) {
	rng, _ := seeded(t)
	ref := func(v []byte) (h Histogram) {
		for i := 0; i+1 < len(v); i += 2 {
			h[(binary.LittleEndian.Uint16(v[i:])>>7)&0xff]++
		}
		return h
	}
	normal := synth.Normal(rng, 3<<20, 0.02)
	outliers := bytes.Clone(normal)
	for i := 0; i < 5000; i++ {
		binary.LittleEndian.PutUint16(outliers[2*rng.IntN(len(outliers)/2):], uint16(rng.Uint32()))
	}
	uniform := make([]byte, 2<<20)
	for i := range uniform {
		uniform[i] = byte(rng.Uint32())
	}
	rows := make([]byte, 2*(1<<20)+7)
	synth.FillNormal(rng, rows, 0.02, 1.5, 4096)
	for name, v := range map[string][]byte{"normal": normal, "outliers": outliers, "uniform": uniform, "rowscaled odd": rows, "short": normal[:1000]} {
		var h Histogram
		h.Add(v)
		if want := ref(v); h != want {
			t.Errorf("%s: histogram differs from a plain count", name)
		}
	}
}

// TestNewCodebookMatchesStableSort: NewCodebook is the first 16 of a
// stable sort of the exponents by descending count, on random histograms
// full of ties and zeros and on the edge cases.
func TestNewCodebookMatchesStableSort(t *testing.T) {
	want := func(h *Histogram) (cb Codebook) {
		order := make([]int, 256)
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool { return h[order[a]] > h[order[b]] })
		for i := range cb {
			cb[i] = byte(order[i])
		}
		return cb
	}
	rng, seed := seeded(t)
	var hs []Histogram
	hs = append(hs, Histogram{}) // all zero
	var full, desc, asc Histogram
	for i := range full {
		full[i], desc[i], asc[i] = 7, uint64(256-i), uint64(i)
	}
	hs = append(hs, full, desc, asc)
	for range 20000 {
		var h Histogram
		k := rng.IntN(40)
		for range k {
			h[rng.IntN(256)] = uint64(rng.IntN(6)) // small counts: many ties
		}
		hs = append(hs, h)
	}
	for i := range hs {
		if got, w := NewCodebook(&hs[i]), want(&hs[i]); got != w {
			t.Fatalf("seed %d, histogram %d %v: got %v, want %v", seed, i, hs[i], got, w)
		}
	}
}
