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

		})
	}
	if models < 2 {
		t.Fatalf("%s holds %d checkpoints, want at least 2", dir, models)
	}
}
