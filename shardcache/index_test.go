package shardcache

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"lukechampine.com/blake3"
)

// richIndex returns an index that uses every field of every record: each
// object kind, loose and packed members, codebooks shared and not,
// statistics that derive from others and ones that do not, a source with
// and one without an index file, tensors that follow each other and ones
// that do not, gaps, a scalar tensor.
func richIndex() *Index {
	hk, gk, ik := KeyOf([]byte("header")), KeyOf([]byte("gap")), KeyOf([]byte("index.json"))
	sk, ek, rk, pk := KeyOf([]byte("splitzip")), KeyOf([]byte("entropy")), KeyOf([]byte("raw")), KeyOf([]byte("pack"))
	s2 := KeyOf([]byte("splitzip 2"))
	t0 := time.Date(2026, 12, 3, 13, 2, 25, 300076255, time.UTC)
	ix := &Index{Objects: map[Key]*Object{
		hk: {Kind: KindRaw, Size: 64, RawSize: 64},
		gk: {Kind: KindRaw, Size: 8, RawSize: 8},
		ik: {Kind: KindRaw, Size: 10, RawSize: 10, Pack: pk, Offset: 0},
		sk: {Kind: KindFixed, Size: 1500, RawSize: 2048, Checksum: 0xdeadbeef, ObjectStats: ObjectStats{Values: 1024,
			Codebook: []int{120, 121, 119, 122, 118, 123, 117, 124, 116, 125, 115, 126, 114, 127, 113},
			Escapes:  7, RawChunks: 1, Chunks: 2, Coverage: 0.9931640625, Entropy: 2.718281828459045, InPlace: true, EscapeRate: 7.0 / 1024}},
		s2: {Kind: KindFixed, Size: 1400, RawSize: 2048, Checksum: 1, ObjectStats: ObjectStats{Values: 1024,
			Codebook: []int{120, 121, 119, 122, 118, 123, 117, 124, 116, 125, 115, 126, 114, 127, 113},
			Escapes:  3, Chunks: 2, Coverage: 1, Entropy: 0.5, InPlace: true, EscapeRate: 0.25}}, // a rate that is not escapes/values
		ek: {Kind: KindEntropy, Size: 900, RawSize: 4096, Checksum: 42, Pack: pk, Offset: 16,
			ObjectStats: ObjectStats{Values: 2048, Field: "BF16 exponent", Entropy: 2.25, Chunks: 1, InPlace: true}},
		rk: {Kind: KindRaw, Size: 16, RawSize: 16},
		pk: {Kind: KindPack, Size: 928, RawSize: 928},
	}}
	shard := Shard{Name: "model.safetensors", Size: 64 + 2048 + 2048 + 8 + 4096 + 16 + 2, ModTime: t0, Fingerprint: "blake3:" + strings.Repeat("ab", 32),
		Header: Region{0, 64, hk},
		Tensors: []Tensor{
			{Name: "w.splitzip", DType: "BF16", Shape: []uint64{32, 32}, Offset: 64, Size: 2048, Key: sk, Stored: StoredFixed},
			{Name: "w.splitzip2", DType: "BF16", Shape: []uint64{1024}, Offset: 64 + 2048, Size: 2048, Key: s2, Stored: StoredFixed},
			{Name: "w.entropy", DType: "BF16", Shape: []uint64{2, 1024}, Offset: 64 + 4096 + 8, Size: 4096, Key: ek, Stored: StoredEntropy},
			{Name: "bias", DType: "F32", Shape: []uint64{4}, Offset: 64 + 4096 + 8 + 4096, Size: 16, Key: rk, Stored: StoredRaw, CopyStored: true,
				TensorStats: TensorStats{Reason: "dtype F32"}},
			{Name: "scale", DType: "BF16", Shape: []uint64{}, Offset: 64 + 4096 + 8 + 4096 + 16, Size: 2, Key: KeyOf([]byte{1, 2}), Stored: StoredRaw,
				TensorStats: TensorStats{Reason: "saving at most -2375.0%, below 3.0%", Coverage: 1, Entropy: math.Copysign(0, -1)}},
		},
		Gaps: []Region{{64 + 4096, 8, gk}},
	}
	ix.Sources = []Source{
		{Root: "/ck/a", Index: &File{Name: "model.safetensors.index.json", Size: 10, Key: ik}, Shards: []Shard{shard}, Created: t0.Add(time.Hour), MinSaving: 0.03},
		{Root: "/ck/b", Shards: []Shard{shard}, Created: t0, MinSaving: 0},
	}
	ix.Sources[1].Shards[0].Name = "other.safetensors"
	return ix
}

// TestBinaryIndexRoundTrip: an index written as version 5 opens with its
// statistics undecoded, then reads back equal to what was written once
// they are loaded, and equal to the same index read from JSON (version
// 3), field for field.
func TestBinaryIndexRoundTrip(t *testing.T) {
	ix := richIndex()
	if err := ix.check(); err != nil {
		t.Fatal(err)
	}
	b, err := marshalIndex(ix)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), indexMagic) || binary.LittleEndian.Uint32(b[16:]) != IndexVersion || binary.LittleEndian.Uint32(b[20:]) != indexHasStats {
		t.Fatalf("not a binary index of version %d with statistics: %q", IndexVersion, b[:24])
	}
	got, err := unmarshalIndex(b, "idx")
	if err != nil {
		t.Fatal(err)
	}
	sk := KeyOf([]byte("splitzip"))
	if got.stats == nil || !reflect.DeepEqual(got.Objects[sk].ObjectStats, ObjectStats{}) || got.Sources[0].Shards[0].Tensors[4].TensorStats != (TensorStats{}) {
		t.Errorf("statistics decoded on opening: %+v, %+v", got.Objects[sk].ObjectStats, got.Sources[0].Shards[0].Tensors[4].TensorStats)
	}
	if err := got.LoadStats(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, ix) {
		t.Errorf("read back\n%+v\nwrote\n%+v", got, ix)
		for k, o := range ix.Objects {
			if !reflect.DeepEqual(got.Objects[k], o) {
				t.Errorf("object %s: read %+v, wrote %+v", k, got.Objects[k], o)
			}
		}
	}
	j, err := marshalIndexJSON(ix)
	if err != nil {
		t.Fatal(err)
	}
	fromJSON, err := unmarshalIndex(j, "idx")
	if err != nil {
		t.Fatal(err)
	}
	// JSON drops the sign of a zero (omitempty), and keeps shard times in
	// their zone.
	ix.Sources[0].Shards[0].Tensors[4].Entropy = 0
	for i := range fromJSON.Sources {
		for j := range fromJSON.Sources[i].Shards {
			sh := &fromJSON.Sources[i].Shards[j]
			sh.ModTime = sh.ModTime.UTC()
		}
		fromJSON.Sources[i].Created = fromJSON.Sources[i].Created.UTC()
	}
	if !reflect.DeepEqual(fromJSON, ix) {
		t.Errorf("read from JSON\n%+v\nwrote\n%+v", fromJSON, ix)
	}
}

// goldenV4Index returns the index of the golden version 4 cache
// (testdata/golden/v4), as that build wrote it.
func goldenV4Index(t testing.TB) []byte {
	b, err := os.ReadFile(filepath.Join("..", "testdata", "golden", "v4", "cache", IndexName))
	if err != nil {
		t.Fatal(err)
	}
	if v := binary.LittleEndian.Uint32(b[16:]); v != binaryIndexVersion {
		t.Fatalf("the golden version 4 index is of version %d", v)
	}
	return b
}

// TestIndexVersion4: the golden version 4 index reads with its
// statistics (they are in its body), refuses every flipped bit and every
// truncation, and written again as version 5 reads back the same.
func TestIndexVersion4(t *testing.T) {
	v4 := goldenV4Index(t)
	ix, err := unmarshalIndex(v4, "v4")
	if err != nil {
		t.Fatal(err)
	}
	payloads, reasons := 0, 0
	for _, o := range ix.Objects {
		if o.Values > 0 && o.Chunks > 0 {
			payloads++
		}
	}
	for _, tn := range ix.Sources[0].Shards[0].Tensors {
		if tn.Reason != "" {
			reasons++
		}
	}
	if ix.stats != nil || payloads == 0 || reasons == 0 {
		t.Errorf("version 4 read with statistics pending %v, %d payloads with statistics, %d tensors with a reason", ix.stats != nil, payloads, reasons)
	}
	b, err := marshalIndex(ix)
	if err != nil {
		t.Fatal(err)
	}
	again, err := unmarshalIndex(b, "v5")
	if err == nil {
		err = again.LoadStats()
	}
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, ix) {
		t.Errorf("written as version 5, read back\n%+v\nfrom version 4\n%+v", again, ix)
	}
	for i := range v4 {
		for bit := range 8 {
			b := append([]byte(nil), v4...)
			b[i] ^= 1 << bit
			if _, err := unmarshalIndex(b, "/c/splitzip.json"); err == nil || !strings.Contains(err.Error(), "/c/splitzip.json") {
				t.Fatalf("flip of bit %d at %d: %v", bit, i, err)
			}
		}
	}
	for n := range len(v4) {
		if _, err := unmarshalIndex(v4[:n], "idx"); err == nil {
			t.Fatalf("truncation to %d bytes accepted", n)
		}
	}
}

// TestIndexBytesPerTensor: a version 5 index grows by at most 68 bytes a
// tensor beyond the tensors' names, and its body, what opening a cache
// parses, by at most 52, for a shard of small tensors left raw with a
// reason and exponent statistics (the 760,000-tensor case of issue 31;
// JSON took about 430) and for one of SplitZip payloads. (Version 4 took
// 60 and 63, a byte or two less: a record's statistics have a mask or
// flags of their own in version 5; the body is 38 and 49, of them 33 and
// 32 a key.) The statistics are drawn at random with full mantissas (seed
// logged).
func TestIndexBytesPerTensor(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	const n = 20000
	for _, payloads := range []bool{false, true} {
		ix, names := manyTensorIndex(n, payloads, seed)
		b, err := marshalIndex(ix)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := unmarshalIndex(b, "idx"); err != nil {
			t.Fatal(err)
		}
		_, body, _ := splitIndex(b)
		per, bodyPer := float64(len(b)-names)/n, float64(indexHeaderSize+len(body)-names)/n
		t.Logf("payloads %v: %d bytes, %.1f a tensor beyond the names, %.1f of them in the body", payloads, len(b), per, bodyPer)
		if per > 68 || bodyPer > 52 {
			t.Errorf("payloads %v: %.1f bytes a tensor beyond the names, %.1f in the body; want at most 68 and 52", payloads, per, bodyPer)
		}
	}
}

// sealIndex wraps body in a version 4 header with its right checksum, as
// a careless tool would write it.
func sealIndex(body []byte) []byte {
	b := make([]byte, indexHeaderSize, indexHeaderSize+len(body))
	copy(b, indexMagic)
	binary.LittleEndian.PutUint32(b[16:], binaryIndexVersion)
	binary.LittleEndian.PutUint64(b[24:], uint64(len(body)))
	sum := blake3.Sum256(body)
	copy(b[32:], sum[:])
	return append(b, body...)
}

// sealIndexV5 wraps body and stats in a version 5 file with flags, every
// length and hash right, as a careless tool would write it: stats as
// the statistics section when flags have indexHasStats, else appended
// as they are.
func sealIndexV5(flags uint32, body, stats []byte) []byte {
	b := sealIndex(body)
	binary.LittleEndian.PutUint32(b[16:], statsIndexVersion)
	binary.LittleEndian.PutUint32(b[20:], flags)
	if flags&indexHasStats == 0 {
		return append(b, stats...)
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(len(stats)))
	sum := blake3.Sum256(stats)
	return append(append(b, sum[:]...), stats...)
}

// splitIndex returns a version 5 file's flags, body and statistics
// section (without its head).
func splitIndex(b []byte) (flags uint32, body, stats []byte) {
	n := indexHeaderSize + int(binary.LittleEndian.Uint64(b[24:]))
	if len(b) > n {
		stats = b[n+statsHeaderSize:]
	}
	return binary.LittleEndian.Uint32(b[20:]), b[indexHeaderSize:n], stats
}

// TestBinaryIndexRejects: every flipped bit of a version 5 index's
// header, body or statistics length, and every truncation, is refused as
// corrupt on opening, naming the file; every flipped bit of its
// statistics' hash or records is refused by LoadStats, naming the file,
// and not on opening. A newer version is refused as such; malformed
// flags and sections are refused; counts larger than the file can hold
// are refused before anything is allocated for them, even with right
// checksums.
func TestBinaryIndexRejects(t *testing.T) {
	good, err := marshalIndex(richIndex())
	if err != nil {
		t.Fatal(err)
	}
	_, body, stats := splitIndex(good)
	end := indexHeaderSize + len(body)
	for i := range good {
		for bit := range 8 {
			b := append([]byte(nil), good...)
			b[i] ^= 1 << bit
			ix, err := unmarshalIndex(b, "/c/splitzip.json")
			if i < end+8 {
				if err == nil || !strings.Contains(err.Error(), "/c/splitzip.json") {
					t.Fatalf("flip of bit %d at %d: %v", bit, i, err)
				}
				// A damaged magic says so, not what a JSON parser makes of it
				// (a flip that makes a '{' of the first byte is a JSON index).
				if i < len(indexMagic) && b[0] != '{' && (!errors.Is(err, ErrIndexCorrupt) || !strings.Contains(err.Error(), "bad magic")) {
					t.Fatalf("flip of bit %d at %d, in the magic: %v", bit, i, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("flip of bit %d at %d, in the statistics' hash or records, refused on opening: %v", bit, i, err)
			}
			var ie *IndexError
			if err := ix.LoadStats(); !errors.As(err, &ie) || ie.File != "/c/splitzip.json" {
				t.Fatalf("flip of bit %d at %d, in the statistics' hash or records: LoadStats: %v", bit, i, err)
			}
		}
	}
	for n := range len(good) {
		if _, err := unmarshalIndex(good[:n], "idx"); err == nil {
			t.Fatalf("truncation to %d bytes accepted", n)
		}
	}
	newer := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(newer[16:], 9)
	if _, err := unmarshalIndex(newer, "idx"); !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), fmt.Sprintf("version 9; this build reads versions 1 to %d", IndexVersion)) {
		t.Errorf("version 9: %v", err)
	}
	longer := append([]byte(nil), good...)
	binary.LittleEndian.PutUint64(longer[end:], uint64(len(stats)+1))
	flagOnly := sealIndexV5(0, body, nil)
	binary.LittleEndian.PutUint32(flagOnly[20:], indexHasStats)
	flagsV4 := sealIndex([]byte{0, 0, 0, 0})
	binary.LittleEndian.PutUint32(flagsV4[20:], indexHasStats)
	// A version 5 body of an object with a statistic in it.
	statInBody := append(append([]byte{0, 1}, make([]byte, 32)...), 0, objEntropy, 0, 0, 0)
	for name, file := range map[string][]byte{
		// Version 4 bodies.
		"2^40 strings":            sealIndex(binary.AppendUvarint(nil, 1<<40)),
		"a string past the end":   sealIndex(binary.AppendUvarint([]byte{1}, 1<<40)),
		"2^40 codebooks":          sealIndex(binary.AppendUvarint([]byte{0}, 1<<40)),
		"2^40 objects":            sealIndex(binary.AppendUvarint([]byte{0, 0}, 1<<40)),
		"2^40 sources":            sealIndex(binary.AppendUvarint([]byte{0, 0, 0}, 1<<40)),
		"a number of 11 bytes":    sealIndex([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}),
		"bytes after the sources": sealIndex([]byte{0, 0, 0, 0, 0}),
		"flags in version 4":      flagsV4,
		// Version 5.
		"an unknown flag":                     sealIndexV5(2, body, nil),
		"the flag without a section":          flagOnly,
		"a section without the flag":          sealIndexV5(0, body, good[end:]),
		"a section longer than the file":      longer,
		"v5: 2^40 objects":                    sealIndexV5(0, binary.AppendUvarint([]byte{0}, 1<<40), nil),
		"v5: 2^40 sources":                    sealIndexV5(0, binary.AppendUvarint([]byte{0, 0}, 1<<40), nil),
		"v5: bytes after the sources":         sealIndexV5(0, []byte{0, 0, 0, 0}, nil),
		"v5: a statistic in an object's body": sealIndexV5(0, statInBody, nil),
	} {
		_, err := unmarshalIndex(file, "idx")
		var ie *IndexError
		if !errors.Is(err, ErrIndexCorrupt) || !errors.As(err, &ie) || ie.File != "idx" {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := unmarshalIndex(sealIndexV5(0, append(append([]byte{0, 1}, make([]byte, 32)...), 0, 0, 0, 0), nil), "idx"); err != nil {
		t.Errorf("the same object without its statistic: %v", err)
	}
	// Statistics that do not follow the body, under right checksums.
	for name, st := range map[string][]byte{
		"none":                   {},
		"2^40 strings":           binary.AppendUvarint(nil, 1<<40),
		"2^40 codebooks":         binary.AppendUvarint([]byte{0}, 1<<40),
		"a record short":         stats[:len(stats)-1],
		"a byte after the last":  append(stats[:len(stats):len(stats)], 0),
		"records of another":     append([]byte{0, 0}, make([]byte, 64)...),
		"an unknown tensor flag": append([]byte{0, 0}, bytes.Repeat([]byte{0x80, 0x01}, 64)...),
	} {
		ix, err := unmarshalIndex(sealIndexV5(indexHasStats, body, st), "idx")
		if err != nil {
			t.Fatalf("%s: refused on opening: %v", name, err)
		}
		var ie *IndexError
		if err := ix.LoadStats(); !errors.Is(err, ErrIndexCorrupt) || !errors.As(err, &ie) || ie.File != "idx" {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestLoadStats: a writer (Create, Commit, GC) loads a version 5 index's
// statistics before it changes the index and writes them back; a corrupt
// statistics section leaves the cache open for loads, fails LoadStats
// (naming the file) every time with the statistics left zero, and is
// never written over; an index written without a statistics section (an
// empty one) has nothing to load.
func TestLoadStats(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, IndexName)
	good, err := marshalIndex(richIndex())
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(path, good, 0o644)
	os.WriteFile(filepath.Join(dir, MarkerName), []byte(markerText), 0o644)
	w, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	w.SetNoSync(true)
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.GC(context.Background(), GCOptions{}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	c, err := Open(dir)
	if err == nil {
		err = c.Index().LoadStats()
	}
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Index(), richIndex()) {
		t.Errorf("after a writer's Commit and GC, the index reads\n%+v\nwant\n%+v", c.Index(), richIndex())
	}

	bad := append([]byte(nil), good...)
	bad[len(bad)-1] ^= 1
	os.WriteFile(path, bad, 0o644)
	c, err = Open(dir)
	if err != nil {
		t.Fatalf("a corrupt statistics section refused on opening: %v", err)
	}
	if _, err := c.LookupName("w.splitzip", ""); err != nil {
		t.Error(err)
	}
	ix := c.Index()
	var ie *IndexError
	err = ix.LoadStats()
	if !errors.As(err, &ie) || ie.File != path || !strings.Contains(err.Error(), "statistics") {
		t.Errorf("LoadStats of a corrupt section: %v", err)
	}
	if again := ix.LoadStats(); again != err {
		t.Errorf("LoadStats again: %v, then %v", err, again)
	}
	if _, err := marshalIndex(ix); !errors.Is(err, ErrIndexCorrupt) {
		t.Errorf("an index whose statistics are corrupt written: %v", err)
	}
	// A writer mends the section from the backup of the same commit
	// (its header the index's); without one it refuses the cache.
	backup := filepath.Join(dir, BackupName)
	os.WriteFile(backup, good, 0o644)
	if w, err := Create(dir); err != nil || !errors.Is(w.IndexMended(), ErrIndexCorrupt) {
		t.Errorf("a writer with the backup of a cache whose statistics are corrupt: %v", err)
	} else {
		w.Close()
		if b, _ := os.ReadFile(path); !bytes.Equal(b, good) {
			t.Errorf("the index was not mended from its backup")
		}
	}
	os.WriteFile(path, bad, 0o644)
	os.Remove(backup)
	if w, err := Create(dir); !errors.Is(err, ErrIndexCorrupt) {
		if err == nil {
			w.Close()
		}
		t.Errorf("a writer opened a cache whose statistics are corrupt: %v", err)
	}
	// A section whose records are corrupt under a right hash: LoadStats
	// stops midway, and leaves every statistic zero.
	_, body, stats := splitIndex(good)
	ix, err = unmarshalIndex(sealIndexV5(indexHasStats, body, stats[:len(stats)-1]), "idx")
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.LoadStats(); err == nil {
		t.Fatal("a short section loaded")
	}
	for k, o := range ix.Objects {
		if !reflect.DeepEqual(o.ObjectStats, ObjectStats{}) {
			t.Errorf("object %s: statistics %+v left after a failed LoadStats", k, o.ObjectStats)
		}
	}
	for _, tn := range ix.Sources[0].Shards[0].Tensors {
		if tn.TensorStats != (TensorStats{}) {
			t.Errorf("tensor %s: statistics %+v left after a failed LoadStats", tn.Name, tn.TensorStats)
		}
	}

	// Without the section, the statistics are zero and there is nothing
	// to load.
	ix, err = unmarshalIndex(sealIndexV5(0, body, nil), "idx")
	if err != nil || ix.stats != nil || ix.LoadStats() != nil || ix.Objects[KeyOf([]byte("splitzip"))].Values != 0 {
		t.Errorf("an index without statistics: %v", err)
	}
	empty, err := marshalIndex(&Index{Objects: map[Key]*Object{}})
	if flags, _, _ := splitIndex(empty); err != nil || flags != 0 || len(empty) != indexHeaderSize+3 {
		t.Errorf("an empty index: %d bytes, flags %#x, %v; want no statistics section", len(empty), flags, err)
	}
}

// TestIndexFileVersion reads the version of an index on disk, binary or
// JSON.
func TestIndexFileVersion(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		marshal func(*Index) ([]byte, error)
		want    int
	}{{marshalIndex, IndexVersion}, {marshalIndexJSON, 3}} {
		b, err := tc.marshal(richIndex())
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, IndexName), b, 0o644)
		if v, err := IndexFileVersion(dir); err != nil || v != tc.want {
			t.Errorf("IndexFileVersion = %d, %v; want %d", v, err, tc.want)
		}
	}
}

// writesBack fails t unless ix, written, reads back (statistics loaded)
// as an index that writes the same bytes: the encoding of every field
// survives (floats compare by their bits, NaNs too).
func writesBack(t *testing.T, ix *Index) {
	b, err := marshalIndex(ix)
	if err != nil {
		t.Fatalf("accepted an index it cannot write: %v", err)
	}
	again, err := unmarshalIndex(b, "idx")
	if err == nil {
		err = again.LoadStats()
	}
	if err != nil {
		t.Fatalf("written back, it does not read: %v", err)
	}
	if b2, err := marshalIndex(again); err != nil || !bytes.Equal(b2, b) {
		t.Fatalf("written back, it reads as another index: %v", err)
	}
}

// FuzzBinaryIndex: any version 4 body under a right header and checksum
// (what the fuzzer cannot forge by chance) is refused with an IndexError
// or read as an index whose references check out and that writes back
// (as version 5) to the same bytes' meaning: never a panic, never an
// allocation the file cannot justify. Seeds are in
// testdata/fuzz/FuzzBinaryIndex and below.
func FuzzBinaryIndex(f *testing.F) {
	f.Add(goldenV4Index(f)[indexHeaderSize:])
	f.Add([]byte{0, 0, 0, 0}) // no strings, codebooks, objects or sources
	f.Fuzz(func(t *testing.T, body []byte) {
		ix, err := unmarshalIndex(sealIndex(body), "idx")
		if err != nil {
			if !errors.Is(err, ErrIndexCorrupt) {
				t.Fatalf("refused with an error that is not ErrIndexCorrupt: %v", err)
			}
			return
		}
		if err := ix.check(); err != nil {
			t.Fatalf("accepted an index its own check refuses: %v", err)
		}
		writesBack(t, ix)
	})
}

// FuzzBinaryIndexV5: any version 5 file of any flags, body and
// statistics, every length and hash right (sealIndexV5), is refused on
// opening with an IndexError, or opens as an index whose references
// check out and whose LoadStats either fails with an IndexError or loads
// statistics that check out and write back: never a panic, never an
// allocation the file cannot justify. Seeds are in
// testdata/fuzz/FuzzBinaryIndexV5 and below.
func FuzzBinaryIndexV5(f *testing.F) {
	for _, ix := range []*Index{richIndex(), {Objects: map[Key]*Object{}}} {
		b, err := marshalIndex(ix)
		if err != nil {
			f.Fatal(err)
		}
		flags, body, stats := splitIndex(b)
		f.Add(flags, body, stats)
	}
	f.Fuzz(func(t *testing.T, flags uint32, body, stats []byte) {
		ix, err := unmarshalIndex(sealIndexV5(flags, body, stats), "idx")
		if err != nil {
			var ie *IndexError
			if !errors.As(err, &ie) {
				t.Fatalf("refused with an error that is not an IndexError: %v", err)
			}
			return
		}
		if err := ix.check(); err != nil {
			t.Fatalf("accepted an index its own check refuses: %v", err)
		}
		if err := ix.LoadStats(); err != nil {
			var ie *IndexError
			if !errors.As(err, &ie) {
				t.Fatalf("statistics refused with an error that is not an IndexError: %v", err)
			}
			return
		}
		if err := ix.check(); err != nil {
			t.Fatalf("loaded statistics its own check refuses: %v", err)
		}
		writesBack(t, ix)
	})
}

// manyTensorIndex returns an index of one shard of n BF16 tensors
// (seeded) and the bytes of their names: small tensors left raw with a
// reason and exponent statistics, as compress records a checkpoint of
// many scales and biases, or SplitZip payloads with theirs. Statistics
// are set field by field, so that the function also builds the index
// for builds whose records were flat (version 4's, for comparison).
func manyTensorIndex(n int, payloads bool, seed uint64) (ix *Index, names int) {
	rng := rand.New(rand.NewPCG(seed, 31))
	hk := KeyOf([]byte("header"))
	ix = &Index{Objects: map[Key]*Object{hk: {Kind: KindRaw, Size: 1 << 20, RawSize: 1 << 20}}}
	sh := Shard{Name: "model.safetensors", ModTime: time.Unix(1764766945, 300076255), Fingerprint: "blake3:" + strings.Repeat("0", 64), Header: Region{0, 1 << 20, hk}}
	book := []int{120, 121, 119, 122, 118, 123, 117, 124, 116, 125, 115, 126, 114, 127, 113}
	off := uint64(1 << 20)
	for i := range n {
		var kb [8]byte
		binary.LittleEndian.PutUint64(kb[:], uint64(i))
		tn := Tensor{Name: fmt.Sprintf("model.layers.%d.mlp.experts.%d.gate_proj.weight_scale", i/1024, i%1024), DType: "BF16", Offset: off, Key: KeyOf(kb[:])}
		names += len(tn.Name)
		if payloads {
			k := uint64(1 << 20)
			tn.Shape, tn.Size, tn.Stored, tn.CopyStored = []uint64{1024, 1024}, 2*k, StoredFixed, true
			o := &Object{Kind: KindFixed, Size: 3 * k / 2, RawSize: 2 * k, Checksum: rng.Uint32()}
			o.Values, o.Codebook, o.Escapes, o.Chunks, o.Entropy, o.InPlace = k, book, rng.Uint64N(k/100), k/8192, 3*rng.Float64(), true
			// As compress records them (codec.Codebook.Coverage): the
			// share of values in the codebook, the escapes'.
			o.Coverage, o.EscapeRate = float64(k-o.Escapes)/float64(k), float64(o.Escapes)/float64(k)
			ix.Objects[tn.Key] = o
		} else {
			k := 1 + rng.Uint64N(64)
			tn.Shape, tn.Size, tn.Stored = []uint64{k}, 2*k, StoredRaw
			tn.Reason = fmt.Sprintf("saving at most -%.1f%%, below 3.0%%", 100*rng.Float64())
			tn.Coverage, tn.Entropy = rng.Float64(), 8*rng.Float64()
		}
		sh.Tensors = append(sh.Tensors, tn)
		off += tn.Size
	}
	sh.Size = off
	ix.Sources = []Source{{Root: "/ck", Shards: []Shard{sh}}}
	return ix, names
}

// BenchmarkIndex writes and reads indexes of 100,000 tensors
// (manyTensorIndex): small ones left raw with their statistics, and
// SplitZip payloads. open is what opening a cache does (the header and
// body hashed and parsed, the references checked), open+stats that and
// LoadStats (what inspect does), json/* the same index as version 3. It
// reports the time and the file's bytes a tensor; SetBytes is the file.
func BenchmarkIndex(b *testing.B) {
	const n = 100000
	for _, in := range []struct {
		name     string
		payloads bool
	}{{"raw", false}, {"payloads", true}} {
		ix, _ := manyTensorIndex(n, in.payloads, 1)
		bin, err := marshalIndex(ix)
		if err != nil {
			b.Fatal(err)
		}
		js, err := marshalIndexJSON(ix)
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range []struct {
			name string
			file []byte
			run  func() error
		}{
			{"write", bin, func() error { _, err := marshalIndex(ix); return err }},
			{"open", bin, func() error { _, err := unmarshalIndex(bin, "idx"); return err }},
			{"open+stats", bin, func() error {
				ix, err := unmarshalIndex(bin, "idx")
				if err == nil {
					err = ix.LoadStats()
				}
				return err
			}},
			{"json/write", js, func() error { _, err := marshalIndexJSON(ix); return err }},
			{"json/open", js, func() error { _, err := unmarshalIndex(js, "idx"); return err }},
		} {
			b.Run(in.name+"/"+c.name, func(b *testing.B) {
				b.SetBytes(int64(len(c.file)))
				b.ReportAllocs()
				for b.Loop() {
					if err := c.run(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/tensor")
				b.ReportMetric(float64(len(c.file))/n, "B/tensor")
			})
		}
	}
}

// TestLostIndex: a cache whose index was moved aside or deleted, its
// backup beside it, is refused by readers and writers alike with the way
// to restore it; a writer used to start an empty index and replace the
// backup, the last copy of the cache's records (trial 69c).
func TestLostIndex(t *testing.T) {
	dir := committedCache(t)
	index, backup := filepath.Join(dir, IndexName), filepath.Join(dir, BackupName)
	if err := os.Rename(index, index+".aside"); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(backup)
	if _, err := Open(dir); !errors.Is(err, ErrIndexLost) || !strings.Contains(err.Error(), "cp "+backup+" "+index) {
		t.Errorf("Open without the index, its backup there: %v", err)
	}
	if _, err := DryRunGC(context.Background(), dir, GCOptions{}); !errors.Is(err, ErrIndexLost) {
		t.Errorf("a dry run of gc without the index, its backup there: %v", err)
	}
	if w, err := Create(dir); !errors.Is(err, ErrIndexLost) {
		if err == nil {
			w.Close()
		}
		t.Errorf("Create without the index, its backup there: %v", err)
	}
	// An index that cannot be looked at (a loop of links here) is not
	// a missing one: no empty index may go over it and its backup.
	if err := os.Symlink(index, index); err != nil {
		t.Fatal(err)
	}
	if w, err := Create(dir); err == nil || errors.Is(err, ErrIndexLost) {
		if err == nil {
			w.Close()
		}
		t.Errorf("Create with an index that loops: %v", err)
	}
	os.Remove(index)
	if b, _ := os.ReadFile(backup); !bytes.Equal(b, want) {
		t.Fatal("the backup changed")
	}
	if err := os.Rename(backup, index); err != nil {
		t.Fatal(err)
	}
	c, err := Open(dir)
	if err != nil || len(c.Index().Sources) != 1 {
		t.Fatalf("Open after the backup was restored: %v", err)
	}
	c.Close()
}
