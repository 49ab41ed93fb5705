package main

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompressBadNumbers: meaningless numbers for compress's flags (0
// jobs, negatives, NaN, infinities, a budget below the minimum) are usage
// errors, exit 2, before anything is written: no cache folder appears.
func TestCompressBadNumbers(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	if code, _, e := splitzip(t, "gen", ck, "--size", "1MiB", "--shards", "1", "-q"); code != 0 {
		t.Fatalf("gen: %s", e)
	}
	for _, c := range [][]string{
		{"--jobs", "0"}, {"--jobs", "-1"},
		{"--min-saving", "NaN"}, {"--min-saving", "+Inf"}, {"--min-saving", "-Inf"}, {"--min-saving", "-0.5"}, {"--min-saving", "1"},
		{"--memory", "NaN"}, {"--memory", "Inf"}, {"--memory", "-1MiB"}, {"--memory", "0"},
		{"--pack-max", "NaN"}, {"--pack-max", "-1"}, {"--pack-max", "Inf"},
	} {
		out := filepath.Join(dir, "cache")
		for _, js := range []bool{false, true} {
			os.RemoveAll(out)
			argv := append([]string{"compress", ck, "-o", out, "--no-sync", "-q"}, c...)
			if js {
				argv = append(argv, "--json")
			}
			code, stdout, stderr := splitzip(t, argv...)
			if code != 2 {
				t.Errorf("%s: exit %d, want 2 (%q %q)", strings.Join(c, " "), code, stdout, stderr)
			}
			if js && !json.Valid([]byte(stdout)) {
				t.Errorf("%s --json: stdout %q", strings.Join(c, " "), stdout)
			}
			if _, err := os.Lstat(out); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s: the refused run left %s (%v)", strings.Join(c, " "), out, err)
			}
		}
	}
}

// TestCompressJobsAndDTypes: --json reports the job count, bounded by
// --memory whatever --jobs asks, and the totals of each dtype in its own
// width; an F32 or F16 checkpoint compressed with the default codec says
// what --codec auto would save and never speaks of BF16.
func TestCompressJobsAndDTypes(t *testing.T) {
	dir := t.TempDir()
	for _, dtype := range []string{"F32", "F16"} {
		ck := filepath.Join(dir, dtype)
		if code, _, e := splitzip(t, "gen", ck, "--size", "2MiB", "--shards", "1", "--dtype", dtype, "-q"); code != 0 {
			t.Fatalf("gen: %s", e)
		}
		code, out, e := splitzip(t, "compress", ck, "-o", filepath.Join(dir, "text-"+dtype), "--no-sync", "-q")
		if code != 0 {
			t.Fatalf("compress: %s", e)
		}
		if strings.Contains(out, "BF16") || !strings.Contains(out, dtype+" ") || !strings.Contains(out, "bits/value (of ") {
			t.Errorf("%s checkpoint: summary %q", dtype, out)
		}
		if !strings.Contains(e, "hint:") || !strings.Contains(e, "--codec auto") {
			t.Errorf("%s checkpoint: no hint of --codec auto in %q", dtype, e)
		}
		if code, out, e := splitzip(t, "inspect", filepath.Join(dir, "text-"+dtype)); code != 0 || strings.Contains(out, "BF16") {
			t.Errorf("inspect of a %s cache: exit %d, %q %q", dtype, code, out, e)
		}
		code, out, e = splitzip(t, "compress", ck, "-o", filepath.Join(dir, "json-"+dtype), "--no-sync", "--json",
			"--memory", "32MiB", "--jobs", "1000000")
		if code != 0 {
			t.Fatalf("compress --json: %s", e)
		}
		var doc struct {
			Jobs       int    `json:"jobs"`
			Checkpoint string `json:"checkpoint"`
			DTypes     []struct {
				DType        string  `json:"dtype"`
				Bits         uint64  `json:"bits"`
				BitsPerValue float64 `json:"bits_per_value"`
				RawBytes     uint64  `json:"raw_bytes"`
				AutoBytes    uint64  `json:"auto_bytes"`
			} `json:"dtypes"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("compress --json: %v in %q", err, out)
		}
		// Named as inspect names it: here, its index file.
		if doc.Checkpoint != filepath.Join(ck, "model.safetensors.index.json") && doc.Checkpoint != filepath.Join(ck, "model.safetensors") {
			t.Errorf("compress --json: checkpoint %q", doc.Checkpoint)
		}
		if doc.Jobs < 1 || doc.Jobs > 8 {
			t.Errorf("--memory 32MiB --jobs 1000000: %d jobs, want 1 to 8", doc.Jobs)
		}
		found := false
		for _, d := range doc.DTypes {
			if d.DType == "BF16" {
				t.Errorf("%s checkpoint: BF16 totals %+v", dtype, d)
			}
			if d.DType == dtype {
				found = true
				if d.Bits == 0 || d.BitsPerValue != float64(d.Bits) || d.AutoBytes == 0 || d.AutoBytes >= d.RawBytes {
					t.Errorf("%s checkpoint: %+v", dtype, d)
				}
			}
		}
		if !found {
			t.Errorf("%s checkpoint: no %s totals in %q", dtype, dtype, out)
		}
	}
}
