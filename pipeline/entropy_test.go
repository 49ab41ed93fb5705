package pipeline

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splitzip/splitzip/internal/cachetest"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/shardcache"
)

// floatCheckpoint writes a checkpoint with a weight of each float dtype
// (N(0, 0.02) cast, FP8 scaled per row), an odd-length BF16 tensor, an
// empty one and an integer one, and returns its tensors' dtypes by name.
func floatCheckpoint(t *testing.T, path string) map[string]string {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 7))
	const cols = 256
	type tensor struct {
		name, dtype string
		data        []byte
	}
	var ts []tensor
	for _, d := range []string{"BF16", "F16", "F32", "F8_E4M3", "F8_E5M2"} {
		ts = append(ts, tensor{"w." + d, d, synth.Cast(synth.Normal(rng, 64*cols+17, 0.02), d, cols)})
	}
	ts = append(ts, tensor{"odd", "BF16", synth.Normal(rng, 16384+1, 0.05)}, tensor{"empty", "F16", nil},
		tensor{"ids", "I64", make([]byte, 800)})
	header := map[string]any{}
	var data []byte
	dtypes := map[string]string{}
	for _, x := range ts {
		size := len(x.data)
		shape := size / map[string]int{"BF16": 2, "F16": 2, "F32": 4, "I64": 8, "F8_E4M3": 1, "F8_E5M2": 1}[x.dtype]
		header[x.name] = map[string]any{"dtype": x.dtype, "shape": []int{shape}, "data_offsets": []int{len(data), len(data) + size}}
		data = append(data, x.data...)
		dtypes[x.name] = x.dtype
	}
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	writeRaw(t, path, string(h), data)
	return dtypes
}

// TestEntropyCodecs compresses a checkpoint of every float dtype with
// each codec and checks what each stores, that verify decodes every
// payload against the source and, with the source gone, against the
// content keys, that decompress restores it byte for byte, that a flipped
// byte in an entropy payload fails verify naming the tensor, and that a
// cache with entropy payloads is index version 3 and one without is 2.
func TestEntropyCodecs(t *testing.T) {
	for _, c := range []struct {
		codec   string
		entropy map[string]bool // tensors stored as entropy payloads
		fixed   map[string]bool // as SplitZip payloads
	}{
		{CodecFixed, nil, map[string]bool{"w.BF16": true, "odd": true}},
		{CodecEntropy, map[string]bool{"w.BF16": true, "w.F16": true, "w.F32": true, "w.F8_E4M3": true, "w.F8_E5M2": true, "odd": true}, nil},
		{CodecAuto, map[string]bool{"w.F16": true, "w.F32": true, "w.F8_E4M3": true, "w.F8_E5M2": true}, map[string]bool{"w.BF16": true, "odd": true}},
	} {
		t.Run(c.codec, func(t *testing.T) {
			dir := t.TempDir()
			src, cache, out := filepath.Join(dir, "ck"), filepath.Join(dir, "cache"), filepath.Join(dir, "out")
			floatCheckpoint(t, filepath.Join(src, "model.safetensors"))
			res, err := Compress(context.Background(), src, CompressOptions{Output: cache, Jobs: 2, MinSaving: DefaultMinSaving, SelfContained: true, NoSync: true, Codec: c.codec})
			if err != nil {
				t.Fatal(err)
			}
			if res.Totals.EntropyTensors != len(c.entropy) || res.Totals.CompressedTensors != len(c.entropy)+len(c.fixed) {
				t.Errorf("%d payloads, %d entropy; want %d and %d", res.Totals.CompressedTensors, res.Totals.EntropyTensors, len(c.entropy)+len(c.fixed), len(c.entropy))
			}
			ca, err := shardcache.Open(cache)
			if err != nil {
				t.Fatal(err)
			}
			var eKey shardcache.Key
			for _, tn := range ca.Index().Sources[0].Shards[0].Tensors {
				want := shardcache.StoredRaw
				switch {
				case c.entropy[tn.Name]:
					want, eKey = shardcache.StoredEntropy, tn.Key
				case c.fixed[tn.Name]:
					want = shardcache.StoredFixed
				}
				if tn.Stored != want {
					t.Errorf("%s (%s) stored %s, want %s (%s)", tn.Name, tn.DType, tn.Stored, want, tn.Reason)
				}
			}
			if v, err := shardcache.IndexFileVersion(cache); err != nil || v != shardcache.IndexVersion {
				t.Errorf("index version %d (%v), want %d", v, err, shardcache.IndexVersion)
			}
			if v := mustVerify(t, cache); !v.OK() || v.Payloads != len(c.entropy)+len(c.fixed) || v.EntropyPayloads != len(c.entropy) {
				t.Fatalf("verify: %d payloads, %d entropy, %+v", v.Payloads, v.EntropyPayloads, v.Problems)
			}
			ins, err := Inspect(context.Background(), cache, InspectOptions{Bits: true, Tensors: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range ins.DTypes {
				if d.EntropyInPlace != d.Entropy || d.Entropy > 0 && d.BoundBits == 0 {
					t.Errorf("%s: %d entropy payloads, %d decodable in place, bound %.3f", d.DType, d.Entropy, d.EntropyInPlace, d.BoundBits)
				}
				// Where the entropy payloads' bits go: every stored bit of
				// them, at or above their bound.
				e := d.EntropyBits
				if (e != nil) != (d.Entropy > 0) {
					t.Fatalf("%s: %d entropy payloads, bits %+v", d.DType, d.Entropy, e)
				}
				if e != nil && (e.Bits != 8*entropyStored(ins, d.DType) || float64(e.Bits)/float64(e.Values) < e.BoundBits || e.Kept < uint64(e.OtherBits*float64(e.Values))) {
					t.Errorf("%s: %d bits of %d stored bytes, bound %.3f: %+v", d.DType, e.Bits, entropyStored(ins, d.DType), e.BoundBits, e)
				}
			}
			// gc keeps every payload the source uses (and runs with no
			// reader holding the cache: ca is opened again after it).
			ca.Close()
			w, err := shardcache.Create(cache)
			if err != nil {
				t.Fatal(err)
			}
			if g, err := w.GC(context.Background(), shardcache.GCOptions{}); err != nil || g.Objects != 0 || g.Files != 0 {
				t.Errorf("gc of a cache in use: %+v, %v", g, err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if ca, err = shardcache.Open(cache); err != nil {
				t.Fatal(err)
			}
			defer ca.Close()
			// With the source gone: against the content keys, and restored.
			moved := filepath.Join(dir, "moved")
			if err := os.Rename(src, moved); err != nil {
				t.Fatal(err)
			}
			if v := mustVerify(t, cache); !v.OK() {
				t.Fatalf("verify without the source: %+v", v.Problems)
			}
			if _, err := Decompress(context.Background(), cache, DecompressOptions{Output: out}); err != nil {
				t.Fatal(err)
			}
			sameFiles(t, moved, out)
			if eKey == "" {
				return
			}
			o, _ := ca.Lookup(eKey)
			// The first record's first byte (other bits, or the chunk's
			// mode for a field with none), then the index's last: every
			// damage is found, by the checksum or before it.
			pb, _, err := ca.ReadObject(eKey)
			if err != nil {
				t.Fatal(err)
			}
			for _, at := range []int64{int64(binary.LittleEndian.Uint64(pb[32:])), int64(o.Size) - 1} {
				restore := cachetest.Flip(t, ca, eKey, at, 0x01)
				v := mustVerify(t, cache)
				if v.OK() || !strings.Contains(v.Problems[0].Error, "checksum") && !strings.Contains(v.Problems[0].Error, "corrupt entropy") {
					t.Errorf("verify with byte %d of an entropy payload flipped: %+v", at, v.Problems)
				}
				restore()
			}
		})
	}
}

// entropyStored sums the stored bytes of dtype's entropy payloads, a
// tensor at a time (Inspect's tensors are listed).
func entropyStored(ins *InspectResult, dtype string) uint64 {
	var n uint64
	for _, r := range ins.Tensors {
		if r.DType == dtype && r.Stored == shardcache.StoredEntropy {
			n += r.StoredBytes
		}
	}
	return n
}
