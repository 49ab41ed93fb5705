package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/shardcache"
)

// printJSON writes v as indented JSON with a message_type field.
func printJSON(w io.Writer, messageType string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	m["message_type"] = messageType
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", out)
	return err
}

// progress returns a progress bar on stderr when it is a terminal (with
// --json too: stdout keeps its one document), else a display that shows
// nothing.
func (g *globals) progress() pipeline.Progress {
	f, ok := g.stderr.(*os.File)
	if g.Quiet || !ok || !term.IsTerminal(int(f.Fd())) {
		return nopBar{}
	}
	return &bar{w: g.stderr}
}

type bar struct {
	w  io.Writer
	mu sync.Mutex
	b  *progressbar.ProgressBar
}

func (p *bar) Start(label string, total uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.b != nil {
		p.b.Finish()
	}
	opts := []progressbar.Option{progressbar.OptionSetWriter(p.w), progressbar.OptionSetDescription(label),
		// Finish draws the full bar and leaves it, on a line of its own:
		// a phase ends at 100%.
		progressbar.OptionThrottle(100_000_000), progressbar.OptionOnCompletion(func() { fmt.Fprintln(p.w) }),
		progressbar.OptionSetWidth(30)}
	max := int64(total)
	if total == 0 {
		max = -1 // a phase of unknown length: a spinner with its label, no byte count ("( 0 B)")
	} else {
		opts = append(opts, progressbar.OptionShowBytes(true), progressbar.OptionShowCount(),
			progressbar.OptionUseIECUnits(true)) // MiB and GiB, as the summaries print
	}
	p.b = progressbar.NewOptions64(max, opts...)
	p.b.RenderBlank()
}

func (p *bar) Add(n uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.b != nil {
		p.b.Add64(int64(n))
	}
}

func (p *bar) Finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.b != nil {
		p.b.Finish()
		p.b = nil
	}
}

// parseSize parses a byte size such as 512MiB, 2GiB, 100MB or 4096. Units
// are case-insensitive; a bare K, M, G, T, P or E is binary, as GNU tools
// read it (512M is 512MiB).
func parseSize(s string) (uint64, error) {
	units := []struct {
		suffix string
		mult   uint64
	}{{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40}, {"pib", 1 << 50}, {"eib", 1 << 60},
		{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12}, {"pb", 1e15}, {"eb", 1e18},
		{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40}, {"p", 1 << 50}, {"e", 1 << 60}, {"b", 1}}
	t := strings.TrimSpace(s)
	mult := uint64(1)
	for _, u := range units {
		if n := len(t) - len(u.suffix); n >= 0 && strings.EqualFold(t[n:], u.suffix) {
			t, mult = strings.TrimSpace(t[:n]), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f*float64(mult) > 1<<62 {
		return 0, fmt.Errorf("bad size %q (want a number that is not negative, at most 4 EiB, with an optional unit such as MiB, GiB, MB or M, which is MiB; each flag says its own range)", s)
	}
	return uint64(f * float64(mult)), nil
}

// human formats a byte count.
func human(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.2f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// count formats n with a noun, plural when n is not 1: "1 shard", "2
// shards", "2 processes".
func count(n int, noun string) string {
	switch {
	case n == 1:
		return fmt.Sprintf("%d %s", n, noun)
	case strings.HasSuffix(noun, "s"):
		return fmt.Sprintf("%d %ses", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// nopBar is a progress display that shows nothing.
type nopBar struct{}

func (nopBar) Start(string, uint64) {}
func (nopBar) Add(uint64)           {}
func (nopBar) Finish()              {}

// warnBackup warns, for a cache read from its index's backup (damaged:
// the index's error, "" where it was whole), that it was, and what writes
// the index again: load, decompress and plan served such a cache without
// a word (trial 71).
func warnBackup(g *globals, damaged string) {
	if damaged != "" {
		fmt.Fprintf(g.stderr, "warning: %s; read from the index's backup (%s): compress, gc or relocate writes the index again from it\n", damaged, shardcache.BackupName)
	}
}

// errText is err's text, or "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
