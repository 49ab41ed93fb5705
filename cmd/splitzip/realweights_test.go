package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/splitzip/splitzip/safetensors"
)

// TestRealWeights runs every checkpoint of the real-weights set
// (scripts/real-weights.sh: trained weights from npm packages converted to
// BF16 safetensors) through compress, verify, inspect and decompress, and
// compares the restored files byte for byte. SPLITZIP_REAL_WEIGHTS names
// the set's directory; without it the test skips, unless
// SPLITZIP_REQUIRE_REAL_WEIGHTS is set (make test sets it when the set was
// built).
func TestRealWeights(t *testing.T) {
	dir := os.Getenv("SPLITZIP_REAL_WEIGHTS")
	if dir == "" {
		if os.Getenv("SPLITZIP_REQUIRE_REAL_WEIGHTS") != "" {
			t.Fatal("SPLITZIP_REQUIRE_REAL_WEIGHTS is set but SPLITZIP_REAL_WEIGHTS names no set")
		}
		t.Skip("SPLITZIP_REAL_WEIGHTS is not set (scripts/real-weights.sh builds the set; make test runs it)")
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	models := 0
	var pairPayloads uint64
	for _, e := range ents {
		src := filepath.Join(dir, e.Name())
		if _, err := os.Stat(filepath.Join(src, safetensors.IndexFileName)); err != nil {
			continue
		}
		models++
		t.Run(e.Name(), func(t *testing.T) {
			work := t.TempDir()
			cache, out := filepath.Join(work, "cache"), filepath.Join(work, "out")
			if code, o, e := splitzip(t, "compress", src, "-o", cache, "--no-sync", "--jobs", "4"); code != 0 {
				t.Fatalf("compress: %d %s %s", code, o, e)
			}
			if code, o, e := splitzip(t, "verify", cache); code != 0 {
				t.Fatalf("verify: %d %s %s", code, o, e)
			}
			code, o, _ := splitzip(t, "inspect", cache, "--json")
			var ins struct {
				Totals struct {
					Tensors           int     `json:"tensors"`
					CompressedTensors int     `json:"compressed_tensors"`
					BF16RawBytes      float64 `json:"bf16_raw_bytes"`
					BF16StoredBytes   float64 `json:"bf16_stored_bytes"`
				}
			}
			if code != 0 || json.Unmarshal([]byte(o), &ins) != nil || ins.Totals.CompressedTensors == 0 {
				t.Fatalf("inspect: %d %s", code, o)
			}
			t.Logf("%d tensors, %d compressed, BF16 at %.3f bits/value", ins.Totals.Tensors, ins.Totals.CompressedTensors, 16*ins.Totals.BF16StoredBytes/ins.Totals.BF16RawBytes)
			if code, o, e := splitzip(t, "decompress", cache, "-o", out); code != 0 {
				t.Fatalf("decompress: %d %s %s", code, o, e)
			}
			sameFiles(t, src, out)
			pairPayloads += entropyRealWeights(t, src)
		})
	}
	if models < 2 {
		t.Fatalf("%s holds %d checkpoints, want at least 2", dir, models)
	}
	if pairPayloads == 0 {
		t.Error("no entropy payload of the set codes pairs of exponents")
	}
}

// entropyRealWeights compresses checkpoint src with --codec entropy into a
// self-contained cache from a copy of src that is then removed, and checks
// that the cache verifies, loads (CPU engine, payloads decoded in place)
// and decompresses to src's files, and that its payloads lie within 0.10
// bits a value of the exponents' entropy bound (issue 12). It returns how
// many payloads code pairs of exponents.
func entropyRealWeights(t *testing.T, src string) uint64 {
	t.Helper()
	work := t.TempDir()
	cp, cache, out := filepath.Join(work, "src"), filepath.Join(work, "entropy"), filepath.Join(work, "out")
	if err := os.CopyFS(cp, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	if code, o, e := splitzip(t, "compress", cp, "-o", cache, "--codec", "entropy", "--self-contained", "--no-sync", "--jobs", "4"); code != 0 {
		t.Fatalf("compress --codec entropy: %d %s %s", code, o, e)
	}
	if err := os.RemoveAll(cp); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"verify", cache}, {"load", cache, "--device", "cpu", "--check"}} {
		if code, o, e := splitzip(t, args...); code != 0 {
			t.Fatalf("%s of the entropy cache without its source: %d %s %s", args[0], code, o, e)
		}
	}
	code, o, _ := splitzip(t, "inspect", cache, "--bits", "--json")
	var ins struct {
		DTypes []struct {
			DType       string `json:"dtype"`
			EntropyBits *struct {
				Values       uint64  `json:"values"`
				Bits         uint64  `json:"bits"`
				PairPayloads uint64  `json:"pair_payloads"`
				Bound        float64 `json:"entropy_bound_bits"`
			} `json:"entropy_bits"`
		} `json:"dtypes"`
	}
	if code != 0 || json.Unmarshal([]byte(o), &ins) != nil {
		t.Fatalf("inspect --bits: %d %s", code, o)
	}
	var pairs uint64
	for _, d := range ins.DTypes {
		e := d.EntropyBits
		if e == nil || e.Values == 0 {
			continue
		}
		gap := float64(e.Bits)/float64(e.Values) - e.Bound
		t.Logf("%s entropy payloads: %.4f bits/value above the bound; %d payloads of pairs", d.DType, gap, e.PairPayloads)
		if gap > 0.10 {
			t.Errorf("%s entropy payloads lie %.4f bits a value above the bound, more than 0.10", d.DType, gap)
		}
		pairs += e.PairPayloads
	}
	if code, o, e := splitzip(t, "decompress", cache, "-o", out); code != 0 {
		t.Fatalf("decompress of the entropy cache: %d %s %s", code, o, e)
	}
	sameFiles(t, src, out)
	return pairs
}
