package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rivo/uniseg"

	"github.com/splitzip/splitzip/safetensors"
)

// TestBarEndsFull: a phase's bar, however its drawing was throttled, is
// last drawn full (issue 31: it stopped at 87-93% on a terminal, its last
// throttled drawing cleared at the end), and a phase of unknown length
// ends too.
func TestBarEndsFull(t *testing.T) {
	var w bytes.Buffer
	p := &bar{w: &w}
	p.Start("compress", 1000)
	for range 10 {
		p.Add(100) // within the throttle: not every one is drawn
	}
	p.Start("flushing to disk", 0)
	p.Finish()
	out := w.String()
	i := strings.LastIndex(out, "compress")
	if i < 0 {
		t.Fatalf("no bar drawn: %q", out)
	}
	rest := out[i:]
	if j := strings.Index(rest, "flushing"); j >= 0 {
		rest = rest[:j]
	}
	if !strings.Contains(rest, "100%") {
		t.Errorf("the compress bar's last drawing is not full: %q", rest)
	}
	// A phase of unknown length counts no bytes: "( 0 B)" meant nothing.
	if flush := out[strings.LastIndex(out, "flushing"):]; strings.Contains(flush, "B)") {
		t.Errorf("the spinner shows a byte count: %q", flush)
	}
}

// TestCell: a tensor name that would break a table row or column is
// quoted; others are kept as they are (non-ASCII letters too).
func TestCell(t *testing.T) {
	for in, want := range map[string]string{"a.b": "a.b", "ü.w": "ü.w", "evil\nname": `"evil\nname"`, "tab\tname": `"tab\tname"`, "x\x1b[2J": `"x\x1b[2J"`, "": `""`, " ": `" "`, " lead": `" lead"`, `say "hi"`: `"say \"hi\""`, "mid space": "mid space"} {
		if got := cell(in); got != want {
			t.Errorf("cell(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestZeroValuesNoBits: a checkpoint whose BF16 tensors hold no values
// has no bits a value: compress and inspect say "-" or nothing, never a
// number (the ratio of 0 bytes to 0 read as 16 bits a value).
func TestZeroValuesNoBits(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	if err := os.Mkdir(ck, 0o755); err != nil {
		t.Fatal(err)
	}
	h, _, err := safetensors.EncodeHeader(nil, []safetensors.TensorSpec{{Name: "z", DType: "BF16", Shape: []uint64{0, 4}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ck, "model.safetensors"), h, 0o644); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	code, out, e := splitzip(t, "compress", ck, "-o", cache, "--no-sync")
	if code != 0 || strings.Contains(out, "bits/value") {
		t.Fatalf("compress: exit %d, %q %q", code, out, e)
	}
	code, out, e = splitzip(t, "inspect", cache)
	if code != 0 || strings.Contains(out, "16.000") || strings.Contains(out, "0.000") {
		t.Fatalf("inspect: exit %d, %q %q", code, out, e)
	}
}

// TestInspectEntropyColumns: an entropy payload's row shows no coverage
// or escapes (it codes every exponent; they read 0 before).
func TestInspectEntropyColumns(t *testing.T) {
	_, cache := compressedWith(t, t.TempDir(), nil, "--codec", "entropy")
	code, out, e := splitzip(t, "inspect", cache, "--tensors")
	if code != 0 {
		t.Fatalf("inspect: %d %s", code, e)
	}
	rows := 0
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) >= 9 && f[3] == "entropy" && f[0] != "dtype" {
			rows++
			if f[6] != "-" || f[7] != "-" {
				t.Errorf("entropy row with coverage %s, escapes %s: %q", f[6], f[7], line)
			}
		}
	}
	if rows == 0 {
		t.Fatalf("no entropy row in %q", out)
	}
}

// TestColumnsWide: a column after a name in wide (CJK) or combining
// characters starts where it starts after an ASCII name, as a terminal
// shows them (tabwriter counted runes and pushed it out of line).
func TestColumnsWide(t *testing.T) {
	var c columns
	c.add("tensor", "dtype", "why raw")
	for _, name := range []string{"層.0.重み", "e\u0301cole.w", "model.layers.0.mlp.w", "全"} {
		c.add(name, "BF16", "")
	}
	var w bytes.Buffer
	if err := c.write(&w); err != nil {
		t.Fatal(err)
	}
	at := -1
	for line := range strings.Lines(w.String()) {
		line = strings.TrimSuffix(line, "\n")
		if strings.HasSuffix(line, " ") {
			t.Errorf("spaces at the end of %q", line)
		}
		i := strings.Index(line, "BF16")
		if i < 0 {
			i = strings.Index(line, "dtype")
		}
		col := uniseg.StringWidth(line[:i])
		if at < 0 {
			at = col
		}
		if col != at || col != uniseg.StringWidth("model.layers.0.mlp.w")+2 {
			t.Errorf("second column at %d in %q, want %d", col, line, at)
		}
	}
}
