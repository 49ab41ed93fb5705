package shardcache

import (
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
		ik: {Kind: KindRaw, Size: 10, RawSize: 10, Pack: pk, Offset: 16},
		sk: {Kind: KindFixed, Size: 1500, RawSize: 2048, Values: 1024, Codebook: []int{120, 121, 119, 122, 118, 123, 117, 124, 116, 125, 115, 126, 114, 127, 113},
			Escapes: 7, RawChunks: 1, Chunks: 2, Checksum: 0xdeadbeef, Coverage: 0.9931640625, Entropy: 2.718281828459045, InPlace: true, EscapeRate: 7.0 / 1024},
		s2: {Kind: KindFixed, Size: 1400, RawSize: 2048, Values: 1024, Codebook: []int{120, 121, 119, 122, 118, 123, 117, 124, 116, 125, 115, 126, 114, 127, 113},
			Escapes: 3, Chunks: 2, Checksum: 1, Coverage: 1, Entropy: 0.5, InPlace: true, EscapeRate: 0.25}, // a rate that is not escapes/values
		ek: {Kind: KindEntropy, Size: 900, RawSize: 4096, Values: 2048, Field: "BF16 exponent", Entropy: 2.25, Checksum: 42, Chunks: 1, InPlace: true, Pack: pk, Offset: 32},
		rk: {Kind: KindRaw, Size: 16, RawSize: 16},
		pk: {Kind: KindPack, Size: 960, RawSize: 960},
	}}
	shard := Shard{Name: "model.safetensors", Size: 64 + 2048 + 2048 + 8 + 4096 + 16 + 2, ModTime: t0, Fingerprint: "blake3:" + strings.Repeat("ab", 32),
		Header: Region{0, 64, hk},
		Tensors: []Tensor{
			{Name: "w.splitzip", DType: "BF16", Shape: []uint64{32, 32}, Offset: 64, Size: 2048, Key: sk, Stored: StoredFixed},
			{Name: "w.splitzip2", DType: "BF16", Shape: []uint64{1024}, Offset: 64 + 2048, Size: 2048, Key: s2, Stored: StoredFixed},
			{Name: "w.entropy", DType: "BF16", Shape: []uint64{2, 1024}, Offset: 64 + 4096 + 8, Size: 4096, Key: ek, Stored: StoredEntropy},
			{Name: "bias", DType: "F32", Shape: []uint64{4}, Offset: 64 + 4096 + 8 + 4096, Size: 16, Key: rk, Stored: StoredRaw, CopyStored: true, Reason: "dtype F32"},
			{Name: "scale", DType: "BF16", Shape: []uint64{}, Offset: 64 + 4096 + 8 + 4096 + 16, Size: 2, Key: KeyOf([]byte{1, 2}), Stored: StoredRaw,
				Reason: "saving at most -2375.0%, below 3.0%", Coverage: 1, Entropy: math.Copysign(0, -1)},
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

// TestBinaryIndexRoundTrip: an index written as version 4 reads back
// equal to what was written, and equal to the same index read from JSON
// (version 3), field for field.
func TestBinaryIndexRoundTrip(t *testing.T) {
	ix := richIndex()
	if err := ix.check(); err != nil {
		t.Fatal(err)
	}
	b, err := marshalIndex(ix)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), indexMagic) || binary.LittleEndian.Uint32(b[16:]) != IndexVersion {
		t.Fatalf("not a binary index of version %d: %q", IndexVersion, b[:24])
	}
	got, err := unmarshalIndex(b, "idx")
	if err != nil {
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

// TestIndexBytesPerTensor: a version 4 index grows by at most 64 bytes a
// tensor beyond the tensors' names, for a shard of small tensors left raw
// with a reason and exponent statistics (the 760,000-tensor case of
// issue 31; JSON took about 430) and for one of SplitZip payloads. The
// statistics are drawn at random with full mantissas (seed logged).
func TestIndexBytesPerTensor(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 31))
	const n = 20000
	for _, payloads := range []bool{false, true} {
		ix := &Index{Objects: map[Key]*Object{}}
		hk := KeyOf([]byte("header"))
		ix.Objects[hk] = &Object{Kind: KindRaw, Size: 1 << 20, RawSize: 1 << 20}
		sh := Shard{Name: "model.safetensors", ModTime: time.Unix(1764766945, 300076255), Fingerprint: "blake3:" + strings.Repeat("0", 64), Header: Region{0, 1 << 20, hk}}
		off, names := uint64(1<<20), 0
		book := []int{120, 121, 119, 122, 118, 123, 117, 124, 116, 125, 115, 126, 114, 127, 113}
		for i := range n {
			k := 1 + rng.Uint64N(64)
			name := fmt.Sprintf("model.layers.%d.mlp.experts.%d.gate_proj.weight_scale", i/1024, i%1024)
			names += len(name)
			var kb [8]byte
			binary.LittleEndian.PutUint64(kb[:], uint64(i))
			tn := Tensor{Name: name, DType: "BF16", Shape: []uint64{k}, Offset: off, Size: 2 * k, Key: KeyOf(kb[:]), Stored: StoredRaw,
				Reason: fmt.Sprintf("saving at most -%.1f%%, below 3.0%%", 100*rng.Float64()), Coverage: rng.Float64(), Entropy: 8 * rng.Float64()}
			if payloads {
				k = 1 << 20
				tn.Shape, tn.Size, tn.Stored, tn.Reason, tn.Coverage, tn.Entropy = []uint64{1024, 1024}, 2*k, StoredFixed, "", 0, 0
				ix.Objects[tn.Key] = &Object{Kind: KindFixed, Size: 3 * k / 2, RawSize: 2 * k, Values: k, Codebook: book, Escapes: rng.Uint64N(k / 100),
					Chunks: k / 8192, Checksum: rng.Uint32(), Entropy: 3 * rng.Float64(), InPlace: true}
				// As compress records them (codec.Codebook.Coverage):
				// the share of values in the codebook, the escapes'.
				o := ix.Objects[tn.Key]
				o.Coverage, o.EscapeRate = float64(k-o.Escapes)/float64(k), float64(o.Escapes)/float64(k)
			}
			sh.Tensors = append(sh.Tensors, tn)
			off += tn.Size
		}
		sh.Size = off
		ix.Sources = []Source{{Root: "/ck", Shards: []Shard{sh}}}
		b, err := marshalIndex(ix)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := unmarshalIndex(b, "idx"); err != nil {
			t.Fatal(err)
		}
		per := float64(len(b)-names) / n
		t.Logf("payloads %v: %d bytes, %.1f a tensor beyond the names", payloads, len(b), per)
		if per > 64 {
			t.Errorf("payloads %v: %.1f bytes a tensor beyond the names, want at most 64", payloads, per)
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

// TestBinaryIndexRejects: every flipped bit and every truncation of a
// version 4 index is refused as corrupt, naming the file; a newer version
// is refused as such; counts larger than the file can hold are refused
// before anything is allocated for them, even with a right checksum.
func TestBinaryIndexRejects(t *testing.T) {
	good, err := marshalIndex(richIndex())
	if err != nil {
		t.Fatal(err)
	}
	for i := range good {
		for bit := range 8 {
			b := append([]byte(nil), good...)
			b[i] ^= 1 << bit
			_, err := unmarshalIndex(b, "/c/splitzip.json")
			if err == nil {
				t.Fatalf("flip of bit %d at %d accepted", bit, i)
			}
			if !strings.Contains(err.Error(), "/c/splitzip.json") {
				t.Fatalf("flip at %d: %v names no file", i, err)
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
	if _, err := unmarshalIndex(newer, "idx"); !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), "version 9; this build reads versions 1 to 4") {
		t.Errorf("version 9: %v", err)
	}
	for name, body := range map[string][]byte{
		"2^40 strings":            binary.AppendUvarint(nil, 1<<40),
		"a string past the end":   binary.AppendUvarint([]byte{1}, 1<<40),
		"2^40 codebooks":          binary.AppendUvarint([]byte{0}, 1<<40),
		"2^40 objects":            binary.AppendUvarint([]byte{0, 0}, 1<<40),
		"2^40 sources":            binary.AppendUvarint([]byte{0, 0, 0}, 1<<40),
		"a number of 11 bytes":    {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"bytes after the sources": {0, 0, 0, 0, 0},
	} {
		_, err := unmarshalIndex(sealIndex(body), "idx")
		var ie *IndexError
		if !errors.Is(err, ErrIndexCorrupt) || !errors.As(err, &ie) || ie.File != "idx" {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A tensor count bounded by the bytes left, in a shard of the rich
	// index re-sealed.
	if _, err := unmarshalIndex(sealIndex(append(good[indexHeaderSize:len(good)-1:len(good)-1], 0)), "idx"); err == nil {
		t.Error("a changed last byte with a right checksum was accepted")
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

// FuzzBinaryIndex: any body under a right header and checksum (what the
// fuzzer cannot forge by chance) is refused with an IndexError or read as
// an index whose references check out and that writes back to the same
// bytes' meaning: never a panic, never an allocation the file cannot
// justify. Seeds are in testdata/fuzz/FuzzBinaryIndex and below.
func FuzzBinaryIndex(f *testing.F) {
	for _, ix := range []*Index{richIndex(), {Objects: map[Key]*Object{}}} {
		b, err := marshalIndex(ix)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[indexHeaderSize:])
	}
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
		b, err := marshalIndex(ix)
		if err != nil {
			t.Fatalf("accepted an index it cannot write: %v", err)
		}
		again, err := unmarshalIndex(b, "idx")
		if err != nil || !reflect.DeepEqual(again, ix) {
			t.Fatalf("written back, it reads as another index: %v", err)
		}
	})
}

// smallTensorIndex returns an index of one shard of n small BF16 tensors
// left raw with a reason and statistics, as compress records a
// checkpoint of many scales and biases (seeded).
func smallTensorIndex(n int, seed uint64) *Index {
	rng := rand.New(rand.NewPCG(seed, 31))
	hk := KeyOf([]byte("header"))
	ix := &Index{Objects: map[Key]*Object{hk: {Kind: KindRaw, Size: 1 << 20, RawSize: 1 << 20}}}
	sh := Shard{Name: "model.safetensors", Fingerprint: "blake3:" + strings.Repeat("0", 64), Header: Region{0, 1 << 20, hk}}
	off := uint64(1 << 20)
	for i := range n {
		k := 1 + rng.Uint64N(64)
		var kb [8]byte
		binary.LittleEndian.PutUint64(kb[:], uint64(i))
		sh.Tensors = append(sh.Tensors, Tensor{Name: fmt.Sprintf("model.layers.%d.mlp.experts.%d.gate_proj.weight_scale", i/1024, i%1024),
			DType: "BF16", Shape: []uint64{k}, Offset: off, Size: 2 * k, Key: KeyOf(kb[:]), Stored: StoredRaw,
			Reason: fmt.Sprintf("saving at most -%.1f%%, below 3.0%%", float64(rng.Uint64N(10000))/10), Coverage: rng.Float64(), Entropy: 8 * rng.Float64()})
		off += 2 * k
	}
	sh.Size = off
	ix.Sources = []Source{{Root: "/ck", Shards: []Shard{sh}}}
	return ix
}

// BenchmarkIndex writes and reads indexes of small tensors, in the binary
// format and, for comparison, JSON (version 3).
func BenchmarkIndex(b *testing.B) {
	ix := smallTensorIndex(100000, 1)
	for _, c := range []struct {
		name    string
		marshal func(*Index) ([]byte, error)
	}{{"binary", marshalIndex}, {"json", marshalIndexJSON}} {
		enc, err := c.marshal(ix)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name+"/write", func(b *testing.B) {
			b.SetBytes(int64(len(enc)))
			b.ReportAllocs()
			for b.Loop() {
				c.marshal(ix)
			}
		})
		b.Run(c.name+"/read", func(b *testing.B) {
			b.SetBytes(int64(len(enc)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := unmarshalIndex(enc, "idx"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
