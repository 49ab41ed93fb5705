package pipeline

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/splitzip/splitzip/internal/synth"
)

// TestCompressDTypeTotals: compress reports what it stores of each dtype
// in that dtype's own width, never a BF16 figure for a checkpoint without
// BF16, and with the default codec says what --codec auto would store of
// the F32 and F16 tensors it leaves raw: less than their raw size, near
// what auto then stores.
func TestCompressDTypeTotals(t *testing.T) {
	dir := t.TempDir()
	for _, dtype := range []string{"F32", "F16"} {
		src := filepath.Join(dir, dtype)
		const seed = 11
		t.Logf("%s checkpoint, seed %d", dtype, seed)
		if _, err := synth.Write(context.Background(), src, synth.Config{Bytes: 4 << 20, Shards: 1, Seed: seed, DType: dtype}); err != nil {
			t.Fatal(err)
		}
		byCodec := map[string]DTypeTotals{}
		for _, codec := range []string{"", CodecAuto} {
			res, err := Compress(context.Background(), src, CompressOptions{Output: filepath.Join(dir, dtype+"-"+codec), Codec: codec,
				MinSaving: DefaultMinSaving, NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			var sum uint64
			for _, d := range res.DTypes {
				sum += d.RawBytes
				if d.DType == "BF16" {
					t.Errorf("%s checkpoint, codec %q: BF16 totals %+v", dtype, codec, d)
				}
				if d.DType == dtype {
					byCodec[codec] = d
				}
			}
			if sum != res.Totals.RawBytes {
				t.Errorf("%s checkpoint, codec %q: dtypes sum to %d bytes, totals %d", dtype, codec, sum, res.Totals.RawBytes)
			}
		}
		fixed, auto := byCodec[""], byCodec[CodecAuto]
		width := map[string]uint64{"F32": 32, "F16": 16}[dtype]
		if fixed.Bits != width || fixed.BitsPerValue != float64(width) || fixed.StoredBytes != fixed.RawBytes {
			t.Errorf("%s with the fixed codec: %+v, want raw at %d bits a value", dtype, fixed, width)
		}
		if fixed.AutoBytes == 0 || fixed.AutoBytes >= fixed.RawBytes {
			t.Errorf("%s with the fixed codec: auto would store %d of %d bytes, want fewer", dtype, fixed.AutoBytes, fixed.RawBytes)
		}
		if auto.BitsPerValue >= float64(width) || auto.AutoBytes != 0 {
			t.Errorf("%s with --codec auto: %+v", dtype, auto)
		}
		// The estimate is of the payloads auto writes, headers aside.
		if d := float64(fixed.AutoBytes) - float64(auto.StoredBytes); d > 0.02*float64(auto.StoredBytes) || d < -0.02*float64(auto.StoredBytes) {
			t.Errorf("%s: auto estimated at %d bytes, stores %d", dtype, fixed.AutoBytes, auto.StoredBytes)
		}
		// The fixed codec into the auto cache: the tensors keep their
		// payloads: what is left raw, auto leaves raw too (no hint).
		res, err := Compress(context.Background(), src, CompressOptions{Output: filepath.Join(dir, dtype+"-"+CodecAuto), MinSaving: DefaultMinSaving, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range res.DTypes {
			if d.DType == dtype && (d.AutoBytes != d.AutoRawBytes || d.AutoRawBytes != rawBytes(t, filepath.Join(dir, dtype+"-"+CodecAuto), dtype) || res.Totals.KeptTensors == 0) {
				t.Errorf("%s, the fixed codec over auto's payloads: %+v, kept %d", dtype, d, res.Totals.KeptTensors)
			}
		}
	}
}

// rawBytes is the raw size of the tensors of dtype the cache in dir
// stores raw.
func rawBytes(t *testing.T, dir, dtype string) uint64 {
	t.Helper()
	ins, err := Inspect(context.Background(), dir, InspectOptions{Tensors: true})
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, r := range ins.Tensors {
		if r.DType == dtype && r.Stored == "raw" {
			n += r.RawBytes
		}
	}
	return n
}
