package main

import (
	"bytes"
	"strings"
	"testing"
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
	for in, want := range map[string]string{"a.b": "a.b", "ü.w": "ü.w", "evil\nname": `"evil\nname"`, "tab\tname": `"tab\tname"`, "x\x1b[2J": `"x\x1b[2J"`} {
		if got := cell(in); got != want {
			t.Errorf("cell(%q) = %s, want %s", in, got, want)
		}
	}
}
