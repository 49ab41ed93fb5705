package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/splitzip/splitzip/atomicfile"
	"github.com/splitzip/splitzip/shardcache"
)

// sameFiles fails the test unless every file of directory a is in b with
// the same bytes.
func sameFiles(t *testing.T, a, b string) {
	t.Helper()
	ents, err := os.ReadDir(a)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range ents {
		x, _ := os.ReadFile(filepath.Join(a, en.Name()))
		y, err := os.ReadFile(filepath.Join(b, en.Name()))
		if err != nil || !bytes.Equal(x, y) {
			t.Errorf("%s differs after restore (%v)", en.Name(), err)
		}
	}
}

// splitzip runs the command line in-process and returns the exit code and
// output.
func splitzip(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestEndToEnd(t *testing.T) {
	dir := t.TempDir()
	ck, cache, rest := filepath.Join(dir, "ck"), filepath.Join(dir, "cache"), filepath.Join(dir, "rest")
	if code, _, e := splitzip(t, "gen", ck, "--size", "2MiB", "--shards", "2"); code != 0 {
		t.Fatalf("gen: %d %s", code, e)
	}
	code, out, e := splitzip(t, "compress", ck, "-o", cache, "--no-sync")
	if code != 0 || !strings.Contains(out, "compressed") {
		t.Fatalf("compress: %d %q %q", code, out, e)
	}
	if code, out, e := splitzip(t, "verify", cache); code != 0 || !strings.Contains(out, "verify ok") {
		t.Fatalf("verify: %d %q %q", code, out, e)
	}
	code, out, _ = splitzip(t, "inspect", cache, "--json", "--tensors")
	var ins struct {
		MessageType string `json:"message_type"`
		Totals      map[string]float64
		Tensors     []map[string]any
	}
	if code != 0 || json.Unmarshal([]byte(out), &ins) != nil || ins.MessageType != "inspect" {
		t.Fatalf("inspect --json: %d %q", code, out)
	}
	for _, k := range []string{"raw_bytes", "stored_bytes", "bf16_raw_bytes", "bf16_stored_bytes", "tensors", "compressed_tensors"} {
		if _, ok := ins.Totals[k]; !ok {
			t.Errorf("inspect --json lacks totals.%s", k)
		}
	}
	// The largest tensor: a BF16 one, measured (exponent_entropy is
	// absent where nothing was).
	if ins.Tensors[0]["dtype"] != "BF16" {
		t.Fatalf("inspect --json: the largest tensor is %v", ins.Tensors[0])
	}
	for _, k := range []string{"dtype", "values", "codebook_coverage", "escape_rate", "exponent_entropy", "stored_bytes", "bits_per_value"} {
		if _, ok := ins.Tensors[0][k]; !ok {
			t.Errorf("inspect --json tensors lack %s", k)
		}
	}
	if code, _, e := splitzip(t, "decompress", cache, "-o", rest); code != 0 {
		t.Fatalf("decompress: %d %s", code, e)
	}
	sameFiles(t, ck, rest)
	// Load on the host implementation, both paths, checked bit for bit.
	if code, out, e := splitzip(t, "load", cache, "--device", "cpu", "--check", "--repeat", "2"); code != 0 || !strings.Contains(out, "matches the content keys") {
		t.Fatalf("load --device cpu: %d %q %q", code, out, e)
	}
	// An option the load refuses names its flag, not the field behind it.
	if code, _, e := splitzip(t, "load", cache, "--device", "cpu", "--pinned-limit", "1KiB"); code != exitUsage || !strings.Contains(e, "--pinned-limit is 1024 bytes") || strings.Contains(e, "PinnedLimit") {
		t.Errorf("load with too small a pinned limit: %d %q", code, e)
	}
	if code, out, e := splitzip(t, "bench", "load", cache, "--device", "cpu", "--rounds", "1", "--json"); code != 0 || !strings.Contains(out, `"load_compare"`) {
		t.Fatalf("bench load: %d %q %q", code, out, e)
	}
	// Rounds count both kinds once each; the uncounted warm-up loads
	// (the checked ones) are in no report.
	code, out, e = splitzip(t, "load", cache, "--device", "cpu", "--compare", "3", "--check", "--json")
	var cmp struct {
		Raw, Splitzip []struct{ Checked bool }
		Checked       bool
	}
	if code != 0 || json.Unmarshal([]byte(out), &cmp) != nil || len(cmp.Raw) != 3 || len(cmp.Splitzip) != 3 || cmp.Raw[0].Checked || cmp.Splitzip[0].Checked || !cmp.Checked {
		t.Fatalf("load --compare 3: %d %q %q", code, out, e)
	}
	// The warm-up loads come first, one of each kind, then the rounds,
	// each kind first in turn.
	code, out, e = splitzip(t, "load", cache, "--device", "cpu", "--compare", "2", "--check")
	if !strings.Contains(out, "warm-up loads (not counted): the raw and compressed arenas match") || code != 0 {
		t.Fatalf("load --compare 2 --check: %d %q %q", code, out, e)
	}
	var modes []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "load" {
			modes = append(modes, f[1])
		}
	}
	if strings.Join(modes, " ") != "raw splitzip splitzip raw" {
		t.Errorf("load --compare 2 printed loads %v, want raw first in the first round and compressed first in the second", modes)
	}
	// Resident re-faults: packs (raw: runs) unless turned off, checked.
	for _, c := range []struct{ args, mode string }{
		{"", "splitzip+resident-packs"}, {"--raw", "raw+resident-packs"},
		{"--resident-packs=false", "splitzip+resident "}, {"--raw --resident-packs=false", "raw+resident "},
	} {
		args := append([]string{"load", cache, "--device", "cpu", "--check", "--resident", "--repeat", "2"}, strings.Fields(c.args)...)
		if code, out, e := splitzip(t, args...); code != 0 || !strings.Contains(out, "matches the content keys") || !strings.Contains(out, c.mode) {
			t.Fatalf("load --resident %s: %d %q %q", c.args, code, out, e)
		}
	}
	// The payloads' host copy shared on this machine: made by the first
	// load, attached to while a holder (--hold) keeps it; refused with
	// what it cannot share.
	t.Setenv("SPLITZIP_SHARE_DIR", filepath.Join(t.TempDir(), "share"))
	if code, out, e := splitzip(t, "load", cache, "--device", "cpu", "--check", "--share", "--json"); code != 0 || !strings.Contains(out, `"made": true`) || !strings.Contains(out, "splitzip+shared+resident-packs") {
		t.Fatalf("load --share: %d %q %q", code, out, e)
	}
	held := make(chan string)
	go func() {
		_, out, e := splitzip(t, "load", cache, "--device", "cpu", "--share", "--hold", "2s")
		held <- out + e
	}()
	time.Sleep(time.Second)
	if code, out, e := splitzip(t, "load", cache, "--device", "cpu", "--check", "--share"); code != 0 || !strings.Contains(out, "matches the content keys") {
		t.Fatalf("load --share beside a holder: %d %q %q", code, out, e)
	}
	// The holder's report says it made the copy before its loads, and
	// how long that took, and it says when it let the copy go.
	if out := <-held; !strings.Contains(out, "holding the shared host copy") || !strings.Contains(out, "before the loads, for --hold") ||
		strings.Contains(out, "made by this process in 0s") || !strings.Contains(out, "released the shared host copy") {
		t.Fatalf("load --share --hold: %q", out)
	}
	// An interrupt before the hold begins stops the run (130), with one
	// error document; it ended a hold early (exit 0, "held": true) when it
	// came during the loads, which ended anyway (trial 71).
	ctx, cancel := context.WithCancel(context.Background())
	testHookAfterLoads = cancel
	defer func() { testHookAfterLoads = nil }()
	var hout, herr bytes.Buffer
	if code := runContext(ctx, []string{"load", cache, "--device", "cpu", "--share", "--hold", "10s", "--json"}, &hout, &herr); code != 130 ||
		strings.Count(hout.String(), "message_type") != 1 || !strings.Contains(hout.String(), `"kind": "interrupted"`) {
		t.Errorf("load --share --hold interrupted before its hold: %d %q %q", code, hout.String(), herr.String())
	}
	for _, args := range [][]string{{"--share", "--raw"}, {"--share", "--compare", "1"}, {"--hold", "1s"}, {"--share", "--hold", "-1s"},
		{"--share", "--hold", "0s"}, {"--hold", "0s"}, {"--share", "--resident=false"}, {"--peer=false"}} {
		if code, _, e := splitzip(t, append([]string{"load", cache, "--device", "cpu"}, args...)...); code != exitUsage {
			t.Errorf("load %v: %d %q, want a usage error", args, code, e)
		}
	}
	// Onto several devices (host engines), by parts and peer copies, and
	// each device loading everything.
	for _, peer := range []string{"--peer=true", "--peer=false"} {
		if code, out, e := splitzip(t, "load", cache, "--devices", "cpu,cpu,cpu", peer, "--check"); code != 0 || !strings.Contains(out, "every device's arena matches the content keys") {
			t.Fatalf("load --devices cpu,cpu,cpu %s: %d %q %q", peer, code, out, e)
		}
	}
	if code, _, e := splitzip(t, "load", cache, "--devices", "cpu,cpu", "--repeat", "2"); code != 2 || !strings.Contains(e, "loads once") {
		t.Fatalf("load --devices --repeat 2: %d %q", code, e)
	}
	// A changed source fails verify with exit 1, naming file and tensor.
	shard := filepath.Join(ck, "model-00002-of-00002.safetensors")
	b, _ := os.ReadFile(shard)
	b[len(b)-3] ^= 0x40
	os.WriteFile(shard, b, 0o644)
	code, _, e = splitzip(t, "verify", cache)
	if code != exitInput || !strings.Contains(e, "model-00002-of-00002.safetensors") || !strings.Contains(e, "tensor") {
		t.Errorf("verify of a changed source: %d %q", code, e)
	}
	code, out, _ = splitzip(t, "verify", cache, "--json")
	if code != exitInput || !strings.Contains(out, `"problems"`) {
		t.Errorf("verify --json of a changed source: %d %q", code, out)
	}
}

func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "full")
	os.MkdirAll(full, 0o755)
	os.WriteFile(filepath.Join(full, "model.safetensors"), []byte("x"), 0o644)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"compress"}, 2, "compress takes SOURCE -o CACHE; got none"},
		{[]string{"compress", dir}, 2, "-o CACHE"},
		{[]string{"verify", "--bogus", dir}, 2, "unknown flag"},
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"compress", filepath.Join(dir, "nope"), "-o", filepath.Join(dir, "c")}, exitInput, "no such file"},
		{[]string{"verify", dir}, exitInput, "not a splitzip cache"},
		{[]string{"inspect", filepath.Join(dir, "nope")}, exitInput, "no such file"},
		{[]string{"gen", filepath.Join(dir, "g"), "--size", "lots"}, 2, "bad size"},
		{[]string{"gen", filepath.Join(dir, "g"), "--size", "0"}, 2, "--size must be more than 0"},
		{[]string{"gen", full, "--size", "1MiB"}, 2, "is not empty"},
		{[]string{"gen", filepath.Join(full, "model.safetensors"), "--size", "1MiB"}, 2, "is a file"},
	} {
		code, _, e := splitzip(t, c.args...)
		if code != c.code || !strings.Contains(e, c.want) || strings.Contains(e, "goroutine") {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, e, c.code, c.want)
		}
	}
}

func TestParseSize(t *testing.T) {
	for s, want := range map[string]uint64{"512MiB": 512 << 20, "2GiB": 2 << 30, "100MB": 100e6, "4096": 4096, "1.5KiB": 1536, "1EiB": 1 << 60, "2PB": 2e15,
		"512M": 512 << 20, "512m": 512 << 20, "512mb": 512e6, "512mib": 512 << 20, "2g": 2 << 30, "7b": 7, "1 GiB": 1 << 30} {
		if got, err := parseSize(s); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "M", "abc", "-1M", "1e30GiB", "NaN", "Inf", "12XB", "1MiBs"} {
		if got, err := parseSize(s); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", s, got)
		}
	}
}

// TestCLIEdges: --version, a JSON error document, plurals, and Ctrl-C.
func TestCLIEdges(t *testing.T) {
	code, out, _ := splitzip(t, "--version")
	if code != 0 || !strings.Contains(out, "splitzip "+version) || !strings.Contains(out, fmt.Sprintf("C ABI %d", abiVersion)) {
		t.Errorf("--version: %d %q", code, out)
	}
	code, out, _ = splitzip(t, "verify", filepath.Join(t.TempDir(), "missing"), "--json")
	var doc map[string]any
	if code != exitInput || json.Unmarshal([]byte(out), &doc) != nil || doc["message_type"] != "error" || doc["exit_code"] != float64(exitInput) || doc["kind"] != "input" || doc["error"] == "" {
		t.Errorf("a failing command with --json: %d %q", code, out)
	}
	dir := t.TempDir()
	src, cache := filepath.Join(dir, "ck"), filepath.Join(dir, "cache")
	if _, out, _ := splitzip(t, "gen", src, "--size", "1MiB", "--shards", "1"); !strings.Contains(out, "tensors, ") || strings.Contains(out, "asked for") {
		t.Errorf("gen summary: %q", out)
	}
	// A --size below the smallest Llama-like shape is not met silently.
	if _, out, _ := splitzip(t, "gen", filepath.Join(dir, "tiny"), "--size", "1KiB"); !strings.Contains(out, "--size asked for 1.00 KiB") {
		t.Errorf("gen summary of a size it cannot meet: %q", out)
	}
	if _, out, _ := splitzip(t, "gen", filepath.Join(dir, "tiny2"), "--size", "1KiB", "--json"); !strings.Contains(out, `"size_requested": 1024`) {
		t.Errorf("gen --json of a size it cannot meet: %q", out)
	}
	if _, out, _ := splitzip(t, "compress", src, "-o", cache, "--no-sync"); !strings.Contains(out, "from 1 shard:") {
		t.Errorf("compress summary: %q", out)
	}
	// An output that exists as something else is a usage error (exit 2),
	// one the machine refuses to write a resource error (exit 4).
	other := filepath.Join(dir, "other")
	os.MkdirAll(other, 0o755)
	os.WriteFile(filepath.Join(other, "notes.txt"), []byte("x"), 0o644)
	for _, out := range []string{other, filepath.Join(other, "notes.txt")} {
		if code, _, e := splitzip(t, "compress", src, "-o", out, "--no-sync"); code != exitUsage || !strings.Contains(e, "refusing to write a cache there") {
			t.Errorf("compress -o %s: exit %d, %q; want %d", out, code, e, exitUsage)
		}
	}
	if os.Geteuid() != 0 {
		ro := filepath.Join(dir, "ro")
		os.MkdirAll(ro, 0o555)
		if code, _, e := splitzip(t, "compress", src, "-o", ro, "--no-sync"); code != exitResource || !strings.Contains(e, "cannot create") {
			t.Errorf("compress into a read-only folder: exit %d, %q; want %d", code, e, exitResource)
		}
	}
	// An interrupted run says so and exits 130, as shells expect.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var o, e bytes.Buffer
	gen := filepath.Join(dir, "interrupted")
	for _, args := range [][]string{{"verify", cache}, {"load", cache, "--device", "cpu"}, {"gen", gen, "--size", "8MiB"}} {
		o.Reset()
		e.Reset()
		if code := runContext(ctx, args, &o, &e); code != exitInterrupted || !strings.Contains(e.String(), "interrupted") {
			t.Errorf("interrupted %s: exit %d, %q", args[0], code, e.String())
		}
	}
	// A killed gen's temporary file alone is removed and the folder used
	// (synth.TestWriteLeavesNothing checks that a failed write leaves
	// none); beside another file, the folder is refused and nothing removed.
	os.MkdirAll(gen, 0o755)
	stale := filepath.Join(gen, atomicfile.TempPrefix+"999999999-x-model.safetensors")
	os.WriteFile(stale, []byte("x"), 0o644)
	if code, _, e := splitzip(t, "gen", gen, "--size", "1MiB"); code != 0 {
		t.Errorf("gen over a killed gen's temporary file: exit %d, %q", code, e)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Errorf("gen kept a killed gen's temporary file")
	}
	occupied := filepath.Join(dir, "other-gen")
	os.MkdirAll(occupied, 0o755)
	stale = filepath.Join(occupied, atomicfile.TempPrefix+"999999999-x-model.safetensors")
	os.WriteFile(stale, []byte("x"), 0o644)
	os.WriteFile(filepath.Join(occupied, "notes.txt"), []byte("x"), 0o644)
	if code, _, _ := splitzip(t, "gen", occupied, "--size", "1MiB"); code != exitUsage {
		t.Errorf("gen into a folder with other files: exit %d", code)
	}
	if _, err := os.Stat(stale); err != nil {
		t.Errorf("gen refused a folder but removed a file in it: %v", err)
	}
	// A checkpoint larger than the disk is refused before anything is written.
	if code, _, e := splitzip(t, "gen", filepath.Join(dir, "huge"), "--size", "1000000TiB"); code != exitResource || !strings.Contains(e, "are free") {
		t.Errorf("gen larger than the disk: exit %d, %q", code, e)
	}
	if _, err := os.Stat(filepath.Join(dir, "huge")); err == nil {
		t.Errorf("gen larger than the disk made its folder")
	}
}

// TestVersionsAgree: the CLI, the C header and the Python package name
// the same versions.
func TestVersionsAgree(t *testing.T) {
	h, _ := os.ReadFile(filepath.Join("..", "..", "capi", "splitzip.h"))
	if !strings.Contains(string(h), fmt.Sprintf("#define SPLITZIP_ABI_VERSION %d\n", abiVersion)) {
		t.Errorf("capi/splitzip.h does not define SPLITZIP_ABI_VERSION %d", abiVersion)
	}
	py, _ := os.ReadFile(filepath.Join("..", "..", "python", "splitzip", "_version.py"))
	if !strings.Contains(string(py), fmt.Sprintf("__version__ = %q", version)) {
		t.Errorf("python/splitzip/_version.py does not say __version__ = %q", version)
	}
}

// TestBenchEntropy: bench entropy on a generated checkpoint reports every
// float dtype it holds, each coder between the bound and the raw width,
// as a table and as JSON; with neither a source nor --synthetic it is a
// usage error.
func TestBenchEntropy(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "ck")
	if code, _, e := splitzip(t, "gen", ck, "--size", "2MiB", "--shards", "1", "-q"); code != 0 {
		t.Fatalf("gen: %s", e)
	}
	code, out, e := splitzip(t, "bench", "entropy", ck, "--cast")
	if code != 0 || !strings.Contains(out, "BF16") || !strings.Contains(out, "F8_E4M3") {
		t.Fatalf("bench entropy: exit %d, %q %q", code, out, e)
	}
	code, out, _ = splitzip(t, "bench", "entropy", ck, "--json")
	var doc struct {
		Results []struct {
			DType  string  `json:"dtype"`
			Bound  float64 `json:"bound_bits"`
			Packed float64 `json:"compact_bits"`
			Fixed  float64 `json:"fixed_bits"`
		} `json:"results"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &doc) != nil || len(doc.Results) == 0 {
		t.Fatalf("bench entropy --json: exit %d, %q", code, out)
	}
	for _, r := range doc.Results {
		if r.DType == "BF16" && (r.Bound <= 8 || r.Packed < r.Bound || r.Packed > r.Fixed) {
			t.Errorf("BF16: bound %.3f, lane code %.3f, fixed %.3f", r.Bound, r.Packed, r.Fixed)
		}
	}
	if code, _, _ := splitzip(t, "bench", "entropy"); code != exitUsage {
		t.Errorf("bench entropy with no source: exit %d", code)
	}
}

// TestInspectBits: inspect --bits says where an entropy cache's bits go,
// in a table and under --json, and a fixed-rate cache has none to explain.
func TestInspectBits(t *testing.T) {
	dir := t.TempDir()
	ck, cache, fixed := filepath.Join(dir, "ck"), filepath.Join(dir, "cache"), filepath.Join(dir, "fixed")
	if code, _, e := splitzip(t, "gen", ck, "--size", "2MiB", "--shards", "1", "-q"); code != 0 {
		t.Fatalf("gen: %s", e)
	}
	for _, c := range [][]string{{cache, "entropy"}, {fixed, "fixed"}} {
		if code, _, e := splitzip(t, "compress", ck, "-o", c[0], "--codec", c[1], "--no-sync", "-q"); code != 0 {
			t.Fatalf("compress --codec %s: %s", c[1], e)
		}
	}
	code, out, e := splitzip(t, "inspect", cache, "--bits")
	if code != 0 || !strings.Contains(out, "where entropy payloads' bits go") || !strings.Contains(out, "lane tables") {
		t.Fatalf("inspect --bits: exit %d, %q %q", code, out, e)
	}
	code, out, _ = splitzip(t, "inspect", cache, "--bits", "--json")
	var doc struct {
		DTypes []struct {
			DType string `json:"dtype"`
			Bits  *struct {
				Values uint64  `json:"values"`
				Bits   uint64  `json:"bits"`
				Codes  uint64  `json:"code_bits"`
				Bound  float64 `json:"entropy_bound_bits"`
			} `json:"entropy_bits"`
		} `json:"dtypes"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &doc) != nil || len(doc.DTypes) == 0 {
		t.Fatalf("inspect --bits --json: exit %d, %q", code, out)
	}
	for _, d := range doc.DTypes {
		if d.DType == "BF16" && (d.Bits == nil || d.Bits.Codes == 0 || float64(d.Bits.Bits)/float64(d.Bits.Values) < d.Bits.Bound) {
			t.Errorf("BF16: %+v", d.Bits)
		}
	}
	if code, out, _ := splitzip(t, "inspect", fixed, "--bits"); code != 0 || !strings.Contains(out, "the cache holds no entropy payloads") || strings.Contains(out, "codes above entropy") {
		t.Errorf("inspect --bits of a fixed-rate cache: exit %d, %q", code, out)
	}
}

// TestPlan: plan prints a table of every rank, --json the plan whose
// reads sum to the node's, and an indivisible placement is a usage error
// naming the tensor.
func TestPlan(t *testing.T) {
	d := t.TempDir()
	ck, cache := filepath.Join(d, "ck"), filepath.Join(d, "c")
	if code, _, e := splitzip(t, "gen", ck, "--size", "4MiB", "--shards", "2", "-q"); code != 0 {
		t.Fatalf("gen: %s", e)
	}
	if code, _, e := splitzip(t, "compress", ck, "-o", cache, "--no-sync", "-q"); code != 0 {
		t.Fatalf("compress: %s", e)
	}
	tp := "*embed*=replicate,*lm_head*=replicate,*.weight=shard:0"
	if code, _, e := splitzip(t, "plan", cache, "--ranks", "100000"); code != exitUsage || !strings.Contains(e, "--ranks must be 1 to 1024") {
		t.Errorf("plan --ranks 100000: exit %d, %q", code, e)
	}
	code, out, e := splitzip(t, "plan", cache, "--ranks", "4", "--tp", tp)
	if code != 0 || !strings.Contains(out, "onto 4 ranks") || strings.Count(out, "\n") != 6 || e != "" {
		t.Fatalf("plan: exit %d, %q %q", code, out, e)
	}
	// A rule that matches nothing (mistyped) is named, and in --json.
	code, out, e = splitzip(t, "plan", cache, "--ranks", "2", "--tp", tp+",model.nosuch.weight=shard:1")
	if code != 0 || !strings.Contains(e, `warning: rule "model.nosuch.weight" matches no tensor`) || strings.Contains(e, `"*.weight"`) {
		t.Errorf("plan with a rule matching nothing: exit %d, %q %q", code, out, e)
	}
	if code, out, _ = splitzip(t, "plan", cache, "--ranks", "2", "--tp", "typo*=shard:0", "--json"); code != 0 || !strings.Contains(out, `"unmatched_rules": [`) {
		t.Errorf("plan --json with a rule matching nothing: exit %d, %q", code, out)
	}
	code, out, _ = splitzip(t, "plan", cache, "--ranks", "4", "--tp", tp, "--json")
	var doc struct {
		Read    uint64 `json:"read_bytes"`
		PerRank []struct {
			Read uint64 `json:"read_bytes"`
		} `json:"per_rank"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &doc) != nil || len(doc.PerRank) != 4 {
		t.Fatalf("plan --json: exit %d, %q", code, out)
	}
	var sum uint64
	for _, r := range doc.PerRank {
		sum += r.Read
	}
	if sum != doc.Read || sum == 0 {
		t.Errorf("plan --json: ranks read %d, the node %d", sum, doc.Read)
	}
	t.Setenv("SPLITZIP_PROFILE", "default")
	code, out, e = splitzip(t, "plan", cache, "--ranks", "2", "--cost")
	if code != 0 || !strings.Contains(out, "raw/fixed/entropy") || !strings.Contains(out, "predicted reads from the page cache (the built-in cost model)") {
		t.Fatalf("plan --cost: exit %d, %q %q", code, out, e)
	}
	code, out, _ = splitzip(t, "plan", cache, "--ranks", "2", "--cost", "--json")
	var pd struct {
		Predicted struct {
			Seconds float64 `json:"seconds"`
			PerRank []struct {
				Fixed   int     `json:"fixed"`
				Seconds float64 `json:"seconds"`
			} `json:"per_rank"`
		} `json:"predicted"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &pd) != nil || len(pd.Predicted.PerRank) != 2 || pd.Predicted.Seconds <= 0 ||
		pd.Predicted.PerRank[0].Fixed+pd.Predicted.PerRank[1].Fixed == 0 {
		t.Fatalf("plan --cost --json: exit %d, %+v %q", code, pd, out)
	}
	if code, _, e := splitzip(t, "plan", cache, "--ranks", "3", "--tp", "*.weight=shard:0"); code != 2 || !strings.Contains(e, "does not split") {
		t.Errorf("an indivisible placement: exit %d, %q", code, e)
	}
	if code, _, _ := splitzip(t, "plan", cache, "--tp", "*=copy"); code != 2 {
		t.Errorf("a bad rule: exit %d", code)
	}
}

// TestLoadEntropyReport: load's report says how the entropy-coded tensors
// came, by their counts a run (streamed, packed, on the host, raw from the
// source), matching the flags; --raw with a flag that chooses how
// payloads load is a usage error.
func TestLoadEntropyReport(t *testing.T) {
	dir := t.TempDir()
	ck, cache := filepath.Join(dir, "ck"), filepath.Join(dir, "cache")
	if code, _, e := splitzip(t, "gen", ck, "--mix", "60", "--shards", "1"); code != 0 {
		t.Fatalf("gen: %d %s", code, e)
	}
	if code, _, e := splitzip(t, "compress", ck, "-o", cache, "--codec", "entropy", "--no-sync", "-q"); code != 0 {
		t.Fatalf("compress: %d %s", code, e)
	}
	line := func(args ...string) string {
		t.Helper()
		code, out, e := splitzip(t, append([]string{"load", cache, "--device", "cpu", "--repeat", "2"}, args...)...)
		if code != 0 {
			t.Fatalf("load %v: %d %s", args, code, e)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "stored as entropy payloads") {
				return l
			}
		}
		t.Fatalf("load %v: no entropy line in %q", args, out)
		return ""
	}
	count := func(l, what string) int {
		t.Helper()
		i := strings.Index(l, what)
		if i < 0 {
			return 0
		}
		f := strings.Fields(l[:i])
		n, err := strconv.Atoi(f[len(f)-1])
		if err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		return n
	}
	l := line("--small-bytes", "65536") // some packed, some streamed
	streamed, packed := count(l, "streamed and decoded by the host engine"), count(l, "packed and decoded by the host engine")
	if streamed == 0 || packed == 0 || !strings.HasPrefix(strings.TrimSpace(l), strconv.Itoa(streamed+packed)+" tensors") || strings.Contains(l, "on the host") {
		t.Errorf("--small-bytes 65536: %q", l)
	}
	if l := line(); count(l, "packed and decoded by the host engine") != streamed+packed {
		t.Errorf("default (every tensor of the mix up to 2 MiB, packed): %q", l)
	}
	if l := line("--entropy-on-host"); count(l, "decoded on the host") != streamed+packed || strings.Contains(l, "engine") {
		t.Errorf("--entropy-on-host: %q", l)
	}
	if code, out, e := splitzip(t, "load", cache, "--device", "cpu", "--entropy-on-host"); code != 0 || !strings.Contains(out, "decoding (and so checking) on the host") {
		t.Errorf("--entropy-on-host: the host's decodes are not reported: %d %q %q", code, out, e)
	}
	if l := line("--entropy-from-source"); count(l, "read raw from their source") != streamed+packed {
		t.Errorf("--entropy-from-source: %q", l)
	}
	if l := line("--read-through"); count(l, "packed and decoded by the host engine") != streamed+packed {
		t.Errorf("--read-through (no tensor of the mix small enough): %q", l)
	}
	for _, f := range []string{"--entropy-on-host", "--entropy-from-source", "--cost", "--read-through"} {
		if code, _, e := splitzip(t, "load", cache, "--device", "cpu", "--raw", f); code != exitUsage || !strings.Contains(e, f+" chooses") {
			t.Errorf("--raw %s: %d %q", f, code, e)
		}
	}
	for _, args := range [][]string{{"--cost", "--entropy-on-host"}, {"--entropy-on-host", "--entropy-from-source"}, {"--raw", "--compare", "1"}, {"--device-resident", "--raw"}, {"--device-resident", "--resident"}} {
		if code, _, e := splitzip(t, append([]string{"load", cache, "--device", "cpu"}, args...)...); code != exitUsage || !strings.Contains(e, args[0]) {
			t.Errorf("%v: %d %q", args, code, e)
		}
	}
}

// TestRemoteFlagsRefused: a remote cache's flags that would do nothing
// are usage errors that name the flag: any for a local cache,
// --insecure for s3://, --endpoint-url for oci://.
func TestRemoteFlagsRefused(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"load", dir, "--device", "cpu", "--local-cache", filepath.Join(dir, "l")},
		{"verify", dir, "--insecure"},
		{"load", dir, "--device", "cpu", "--endpoint-url", "http://127.0.0.1:1"},
		{"load", "s3://bucket/model:v1", "--device", "cpu", "--insecure"},
		{"verify", "oci://localhost:5999/model:v1", "--endpoint-url", "http://127.0.0.1:1"},
	} {
		flag := args[len(args)-1]
		if strings.HasPrefix(flag, "/") || strings.HasPrefix(flag, "http") {
			flag = args[len(args)-2]
		}
		if code, _, e := splitzip(t, args...); code != exitUsage || !strings.Contains(e, flag+" is for") {
			t.Errorf("%v: exit %d, %q", args, code, e)
		}
	}
}

// TestLoadCheckSourceEditedInPlace: a source edited in place with its
// size and modification time kept loads (its raw tensors are read from
// it, its payloads decoded from the cache), but load --check compares the
// arena with the content keys recorded at compress time, not only with
// the source: a changed source (exit 3) naming the tensor, never
// "matches", whether the edited tensor is read raw from the source or
// decoded from its payload.
func TestLoadCheckSourceEditedInPlace(t *testing.T) {
	for _, payload := range []bool{false, true} {
		ck, cache := compressedWith(t, t.TempDir(), []string{"--shards", "1"})
		c, err := shardcache.Open(cache)
		if err != nil {
			t.Fatal(err)
		}
		sh := c.Index().Sources[0].Shards[0]
		i := slices.IndexFunc(sh.Tensors, func(t shardcache.Tensor) bool { return t.Payload() == payload && t.InCache() == payload && t.Size > 0 })
		if i < 0 {
			t.Fatalf("no tensor with payload %v", payload)
		}
		tn := sh.Tensors[i]
		path := filepath.Join(ck, sh.Name)
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		b := []byte{0}
		f.ReadAt(b, int64(tn.Offset))
		b[0] ^= 1
		f.WriteAt(b, int64(tn.Offset))
		f.Close()
		if err := os.Chtimes(path, st.ModTime(), st.ModTime()); err != nil {
			t.Fatal(err)
		}
		code, out, e := splitzip(t, "load", cache, "--device", "cpu", "--check")
		if code != 3 || strings.Contains(out, "matches") || !strings.Contains(e, tn.Name) || !strings.Contains(e, "edited in place") {
			t.Errorf("load --check of a source edited in place (a payload: %v): exit %d, %q, %q; want exit 3 naming %s", payload, code, out, e, tn.Name)
		}
	}
}

// TestEmptyArgument: an empty positional argument (an unset shell
// variable) is a usage error, not the working folder.
func TestEmptyArgument(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, args := range [][]string{{"compress", "", "-o", "c"}, {"verify", ""}, {"inspect", ""}} {
		if code, _, e := splitzip(t, args...); code != exitUsage || !strings.Contains(e, "is empty") {
			t.Errorf("%q: exit %d, %q", args, code, e)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left %s behind", ents[0].Name())
	}
}
