package pipeline

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/safetensors"
	"github.com/splitzip/splitzip/shardcache"
)

// writeRaw writes a safetensors file from a JSON header and data bytes.
func writeRaw(t *testing.T, path, header string, data []byte) {
	t.Helper()
	b := make([]byte, 8, 8+len(header)+len(data))
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	b = append(append(b, header...), data...)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestUnusualLayouts runs files the reference accepts (empty tensors at
// every position, scalars, sub-byte dtypes, whitespace after the header)
// and files it refuses but splitzip keeps (holes, trailing bytes, unknown
// dtypes) through compress, verify and decompress, byte for byte, with
// pieces small enough that the holes and gaps span several.
func TestUnusualLayouts(t *testing.T) {
	defer func(b int) { pieceBytes = b }(pieceBytes)
	pieceBytes = 2 * 2 * 16384
	dir := t.TempDir()
	src, cache, out := filepath.Join(dir, "ck"), filepath.Join(dir, "cache"), filepath.Join(dir, "out")
	rng := rand.New(rand.NewPCG(1, 2))
	w := synth.Normal(rng, 70000, 0.02) // 140,000 bytes of BF16
	hole := 300_000
	var data []byte
	data = append(data, w...)                                       // [0, 140000) "w"
	data = append(data, make([]byte, hole)...)                      // a hole
	data = append(data, 1, 2, 3, 4)                                 // "q", unknown dtype
	data = append(data, 0x12, 0x34)                                 // "s", BF16 scalar
	data = append(data, 0xAB)                                       // "f4", two F4 values
	data = append(data, []byte(strings.Repeat("tail", 100_000))...) // trailing bytes
	b := uint64(len(w))
	header := fmt.Sprintf(`{"z":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},`+
		`"w":{"dtype":"BF16","shape":[70000],"data_offsets":[0,%d]},"a":{"dtype":"F32","shape":[0,5],"data_offsets":[0,0]},`+
		`"q":{"dtype":"Q4_X","shape":[9],"data_offsets":[%d,%d]},"s":{"dtype":"BF16","shape":[],"data_offsets":[%d,%d]},`+
		`"f4":{"dtype":"F4","shape":[2],"data_offsets":[%d,%d]},"end":{"dtype":"I64","shape":[0],"data_offsets":[%d,%d]}}`+"\n\t ",
		b, b+uint64(hole), b+uint64(hole)+4, b+uint64(hole)+4, b+uint64(hole)+6, b+uint64(hole)+6, b+uint64(hole)+7, b+uint64(hole)+7, b+uint64(hole)+7)
	writeRaw(t, filepath.Join(src, "model.safetensors"), header, data)
	res := compress(t, src, cache, false)
	if res.Totals.Tensors != 7 || res.Totals.CompressedTensors != 1 || len(res.Warnings) != 3 {
		t.Fatalf("compress: %+v, warnings %q", res.Totals, res.Warnings)
	}
	if v := mustVerify(t, cache); !v.OK() || v.Payloads != 1 {
		t.Fatalf("verify: %+v", v)
	}
	if _, err := Decompress(context.Background(), cache, DecompressOptions{Output: out}); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, src, out)
	// A changed byte in the hole is found by verify.
	p := filepath.Join(src, "model.safetensors")
	raw, _ := os.ReadFile(p)
	st, _ := os.Stat(p)
	raw[len(raw)-len(data)+int(b)+hole/2] ^= 1
	os.WriteFile(p, raw, 0o644)
	os.Chtimes(p, st.ModTime(), st.ModTime())
	if v := mustVerify(t, cache); v.OK() || !strings.Contains(v.Problems[0].Error, "differ") {
		t.Fatalf("verify of a changed hole: %+v", v.Problems)
	}
}

// TestDecompressAllOrNothing: when the second shard cannot be restored
// (its source changed), neither the index nor the first shard is left in
// the output, and no temporary file either.
func TestDecompressAllOrNothing(t *testing.T) {
	dir := t.TempDir()
	src, cache, out := filepath.Join(dir, "ck"), filepath.Join(dir, "cache"), filepath.Join(dir, "out")
	gen(t, src, 2<<20, 2, 12)
	// Make one raw alias in the second shard: a tensor left raw.
	res, err := Compress(context.Background(), src, CompressOptions{Output: cache, MinSaving: 0.9, NoSync: true})
	if err != nil || res.Totals.CompressedTensors != 0 {
		t.Fatalf("compress: %v %+v", err, res)
	}
	p := filepath.Join(src, "model-00002-of-00002.safetensors")
	os.Truncate(p, 100)
	_, err = Decompress(context.Background(), cache, DecompressOptions{Output: out})
	if err == nil {
		t.Fatal("decompress of a changed source succeeded")
	}
	ents, _ := os.ReadDir(out)
	if len(ents) != 0 {
		t.Errorf("a failed decompress left %d files: %v", len(ents), ents[0].Name())
	}
	if !strings.Contains(err.Error(), "model-00002-of-00002.safetensors") {
		t.Errorf("error %v does not name the shard", err)
	}
	if _, err := os.Stat(filepath.Join(out, safetensors.IndexFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("index left behind: %v", err)
	}
}

// TestSameBytesOtherDTypes: tensors of several dtypes with the same bytes
// (a zero BF16 bias, a zero BOOL mask and a zero F16 one of one size;
// random bytes as F16, BF16 and F32) share one object, whatever form the
// first stored took, under every codec, with one job and several, with
// and without --self-contained: compress stopped with an inconsistent
// index where a payload and a raw copy of one key were both stored
// (trial 70). Each cache verifies and restores byte for byte.
func TestSameBytesOtherDTypes(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 8))
	zeros := make([]byte, 1<<16)
	noise := make([]byte, 1<<16)
	for i := range noise {
		noise[i] = byte(rng.Uint32())
	}
	n := len(zeros)
	var data []byte
	var parts []string
	for i, tn := range []struct {
		name, dtype string
		values      int
		b           []byte
	}{
		{"bias", "BF16", n / 2, zeros}, {"mask", "BOOL", n, zeros}, {"half", "F16", n / 2, zeros},
		{"r.f16", "F16", n / 2, noise}, {"r.bf16", "BF16", n / 2, noise}, {"r.f32", "F32", n / 4, noise}, {"r.u8", "U8", n, noise},
	} {
		parts = append(parts, fmt.Sprintf(`"%s":{"dtype":"%s","shape":[%d],"data_offsets":[%d,%d]}`, tn.name, tn.dtype, tn.values, i*n, (i+1)*n))
		data = append(data, tn.b...)
	}
	src := filepath.Join(dir, "ck")
	header := "{" + strings.Join(parts, ",") + "}"
	header += strings.Repeat(" ", -len(header)&7)
	writeRaw(t, filepath.Join(src, "model.safetensors"), header, data)
	for _, codecName := range []string{CodecFixed, CodecEntropy, CodecAuto} {
		for _, jobs := range []int{1, 4} {
			for _, self := range []bool{false, true} {
				// Packed (the default) and each object in a file of
				// its own: ObjectFile.Commit keeps the first either way.
				packMax := int64(0)
				if jobs == 4 {
					packMax = -1
				}
				name := fmt.Sprintf("%s-j%d-self%v", codecName, jobs, self)
				cache, out := filepath.Join(dir, name), filepath.Join(dir, name+".out")
				if _, err := Compress(context.Background(), src, CompressOptions{Output: cache, Codec: codecName, Jobs: jobs, SelfContained: self, NoSync: true, PackMax: packMax}); err != nil {
					t.Fatalf("%s: compress: %v", name, err)
				}
				if v := mustVerify(t, cache); !v.OK() {
					t.Fatalf("%s: verify: %+v", name, v.Problems)
				}
				if _, err := Decompress(context.Background(), cache, DecompressOptions{Output: out}); err != nil {
					t.Fatalf("%s: decompress: %v", name, err)
				}
				sameFiles(t, src, out)
			}
		}
	}
}

// TestGapOtherForm: a gap with the bytes of a tensor an earlier run
// stored as a payload cannot share its object (a gap is read raw): the
// compress is refused with ErrOtherForm, not an internal error, and the
// cache stays as it was (review 70b).
func TestGapOtherForm(t *testing.T) {
	dir := t.TempDir()
	n := 1 << 16
	a, b, cache := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "cache")
	writeRaw(t, filepath.Join(a, "model.safetensors"), fmt.Sprintf(`{"z":{"dtype":"BF16","shape":[%d],"data_offsets":[0,%d]}}`, n/2, n)+"    ", make([]byte, n))
	one := synth.Normal(rand.New(rand.NewPCG(1, 1)), 8, 0.02)
	header := fmt.Sprintf(`{"w":{"dtype":"BF16","shape":[8],"data_offsets":[%d,%d]}}`, n, n+16)
	header += strings.Repeat(" ", -len(header)&7)
	writeRaw(t, filepath.Join(b, "model.safetensors"), header, append(make([]byte, n), one...)) // a hole of n zeros first
	if res := compress(t, a, cache, false); res.Totals.CompressedTensors != 1 {
		t.Fatalf("compress a: %+v", res.Totals)
	}
	before, _ := os.ReadFile(filepath.Join(cache, shardcache.IndexName))
	_, err := Compress(context.Background(), b, CompressOptions{Output: cache, NoSync: true})
	if !errors.Is(err, shardcache.ErrOtherForm) {
		t.Fatalf("compress of a gap with the bytes of a payload: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(cache, shardcache.IndexName)); !bytes.Equal(before, after) {
		t.Error("the refused compress changed the index")
	}
	if v := mustVerify(t, cache); !v.OK() {
		t.Fatalf("verify after the refused compress: %+v", v.Problems)
	}
}

// TestMendOtherForm: an earlier run's payload found damaged is replaced
// only by an object of its own form (the index's other records name that
// form): a tensor of another dtype with its bytes takes the recorded form
// and leaves the damage for verify to report, and a run that stores the
// same form mends it (review 70b: compress stopped with an inconsistent
// index).
func TestMendOtherForm(t *testing.T) {
	dir := t.TempDir()
	n := 1 << 19
	a, b, cache := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "cache")
	writeRaw(t, filepath.Join(a, "model.safetensors"), fmt.Sprintf(`{"z":{"dtype":"BF16","shape":[%d],"data_offsets":[0,%d]}}`, n/2, n)+"    ", make([]byte, n))
	writeRaw(t, filepath.Join(b, "model.safetensors"), fmt.Sprintf(`{"m":{"dtype":"BOOL","shape":[%d],"data_offsets":[0,%d]}}`, n, n)+"    ", make([]byte, n))
	opts := func() CompressOptions {
		return CompressOptions{Output: cache, NoSync: true, SelfContained: true, PackMax: -1, Jobs: 2}
	}
	if res, err := Compress(context.Background(), a, opts()); err != nil || res.Totals.CompressedTensors != 1 {
		t.Fatalf("compress a: %v", err)
	}
	c, err := shardcache.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	key := c.Index().Sources[0].Shards[0].Tensors[0].Key
	path, err := c.FilePath(key)
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	obj, _ := os.ReadFile(path)
	obj[len(obj)/2] ^= 1
	if err := os.WriteFile(path, obj, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Compress(context.Background(), b, opts()); err != nil {
		t.Fatalf("compress b, its tensor's bytes a damaged payload of a: %v", err)
	}
	if v := mustVerify(t, cache); v.OK() {
		t.Fatal("verify passed a damaged payload")
	}
	if _, err := Compress(context.Background(), a, opts()); err != nil {
		t.Fatalf("compress a again: %v", err)
	}
	if v := mustVerify(t, cache); !v.OK() || v.Tensors != 2 {
		t.Fatalf("verify after a mended its payload: %+v", v)
	}
}

// TestKeptOtherDType: a tensor of another dtype that takes the fixed
// payload an earlier run stored for a BF16 tensor of the same bytes is
// not counted as keeping another codec's payload (the note said so of
// F16 tensors under --codec fixed; review 70b); one that takes an
// earlier run's entropy payload under --codec fixed is.
func TestKeptOtherDType(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(9, 10))
	vals := make([]byte, 1<<16)
	for i := 0; i < len(vals); i += 2 {
		binary.LittleEndian.PutUint16(vals[i:], synth.BF16(float32(rng.NormFloat64()*0.02)))
	}
	n := len(vals)
	one := func(name, dtype string) string {
		d := filepath.Join(dir, name)
		h := fmt.Sprintf(`{"w":{"dtype":"%s","shape":[%d],"data_offsets":[0,%d]}}`, dtype, n/2, n)
		writeRaw(t, filepath.Join(d, "model.safetensors"), h+strings.Repeat(" ", -len(h)&7), vals)
		return d
	}
	a, b := one("a", "BF16"), one("b", "F16")
	for _, c := range []struct {
		first string
		kept  int
	}{{CodecFixed, 0}, {CodecEntropy, 1}} {
		cache := filepath.Join(dir, "cache-"+c.first)
		if _, err := Compress(context.Background(), a, CompressOptions{Output: cache, Codec: c.first, NoSync: true}); err != nil {
			t.Fatal(err)
		}
		res, err := Compress(context.Background(), b, CompressOptions{Output: cache, Codec: CodecFixed, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		if res.Totals.KeptTensors != c.kept {
			t.Errorf("F16 after a BF16 %s payload, --codec fixed: %d tensors kept, want %d", c.first, res.Totals.KeptTensors, c.kept)
		}
		if v := mustVerify(t, cache); !v.OK() {
			t.Fatalf("verify: %+v", v.Problems)
		}
	}
}
