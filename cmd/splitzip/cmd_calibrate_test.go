package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/splitzip/splitzip/costmodel"
)

// TestCalibrateAndCostCodec: calibrate measures this host on the CPU and
// keeps the profile in the user's cache folder; compress --codec cost
// uses it (measuring first where there is none, saying so), the cache
// verifies, and inspect counts what the model kept raw. SPLITZIP_PROFILE
// picks the built-in profile or a file, and a bad file is an error naming
// it.
func TestCalibrateAndCostCodec(t *testing.T) {
	home := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", home)
	t.Setenv(costmodel.EnvProfile, "")
	t.Setenv(envCalibrateQuick, "1")
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	if code, _, e := splitzip(t, "gen", ck, "--mix", "300", "--shards", "1"); code != 0 {
		t.Fatalf("gen: %d %s", code, e)
	}
	// First use: compress measures the profile (the CPU here).
	code, out, e := splitzip(t, "compress", ck, "-o", filepath.Join(dir, "c1"), "--codec", "cost", "--no-sync")
	if code != 0 || !strings.Contains(e, "measuring this host's cost model once") {
		t.Fatalf("compress: %d %q %q", code, out, e)
	}
	kept, _ := filepath.Glob(filepath.Join(home, "splitzip", "costmodel-*.json"))
	if len(kept) != 1 {
		t.Fatalf("profiles kept: %v", kept)
	}
	// calibrate --json, on the device compress chose: the same file.
	code, out, e = splitzip(t, "calibrate", "--json")
	if code != 0 {
		t.Fatalf("calibrate: %d %s", code, e)
	}
	var p struct {
		costmodel.Profile
		File string `json:"file"`
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if p.File != kept[0] || p.Check() != nil {
		t.Fatalf("profile %+v (%v)", p, p.Check())
	}
	// Second use: no measuring; the cache verifies; inspect's counts add up.
	cache := filepath.Join(dir, "c2")
	code, out, e = splitzip(t, "compress", ck, "-o", cache, "--codec", "cost", "--no-sync")
	if code != 0 || strings.Contains(e, "measuring") {
		t.Fatalf("compress: %d %q %q", code, out, e)
	}
	if code, out, e := splitzip(t, "verify", cache); code != 0 || !strings.Contains(out, "verify ok") {
		t.Fatalf("verify: %d %q %q", code, out, e)
	}
	code, out, _ = splitzip(t, "inspect", cache, "--json")
	var ins struct{ Totals map[string]float64 }
	if err := json.Unmarshal([]byte(out), &ins); err != nil || code != 0 {
		t.Fatalf("inspect: %v %s", err, out)
	}
	tt := ins.Totals
	if tt["tensors"] != 300 || tt["cost_raw_tensors"]+tt["compressed_tensors"] > 300 {
		t.Fatalf("totals %v", tt)
	}
	// load --cost with the profile kept (on the CPU where compress
	// measured there): it loads; without one for the device, it says
	// which command makes one.
	if code, _, e := splitzip(t, "load", cache, "--device", "cpu", "--cost", "-q"); code != 0 && p.Device == "cpu" {
		t.Fatalf("load --cost: %d %s", code, e)
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	if code, _, e := splitzip(t, "load", cache, "--device", "cpu", "--cost", "-q"); code == 0 || !strings.Contains(e, "splitzip calibrate --device cpu") {
		t.Fatalf("load --cost, no profile: %d %q", code, e)
	}
	t.Setenv("XDG_CACHE_HOME", home)
	// The built-in profile: small tensors raw, the largest coded.
	t.Setenv(costmodel.EnvProfile, "default")
	cache = filepath.Join(dir, "c3")
	if code, out, e := splitzip(t, "compress", ck, "-o", cache, "--codec", "cost", "--no-sync"); code != 0 || !strings.Contains(out, "kept raw by the cost model") ||
		!strings.Contains(e, "chose by the cost model of default, measured default") {
		t.Fatalf("compress, default profile: %d %q %q", code, out, e)
	}
	// A load reports what the model predicts by the paths its tensors
	// took; with no model for the host it predicts nothing.
	code, out, e = splitzip(t, "load", cache, "--device", "cpu", "--json")
	var lr struct {
		Tensors   int
		Paths     map[string]struct{ Tensors int }
		Predicted *struct {
			Host    string
			Seconds float64
		}
	}
	if err := json.Unmarshal([]byte(out), &lr); err != nil || code != 0 {
		t.Fatalf("load --json: %v %q %q", err, out, e)
	}
	n := 0
	for _, c := range lr.Paths {
		n += c.Tensors
	}
	if lr.Predicted == nil || lr.Predicted.Host != "default" || lr.Predicted.Seconds <= 0 || n != lr.Tensors || lr.Paths["raw"].Tensors == 0 {
		t.Fatalf("load --json, default profile: paths %v, predicted %+v", lr.Paths, lr.Predicted)
	}
	// The human report counts a run's tensors by path, whatever --repeat.
	code, out, e = splitzip(t, "load", cache, "--device", "cpu", "--repeat", "3")
	if code != 0 || byPath(t, out) != lr.Tensors {
		t.Fatalf("load --repeat 3: %d tensors by path in %q (%q), want %d", byPath(t, out), out, e, lr.Tensors)
	}
	t.Setenv(costmodel.EnvProfile, "")
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	if code, out, e := splitzip(t, "load", cache, "--device", "cpu"); code != 0 || strings.Contains(out, "cost model") {
		t.Fatalf("load, no profile: %d %q %q", code, out, e)
	}
	t.Setenv("XDG_CACHE_HOME", home)
	t.Setenv(costmodel.EnvProfile, "default")
	// A file that is no profile.
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(costmodel.EnvProfile, bad)
	if code, _, e := splitzip(t, "compress", ck, "-o", filepath.Join(dir, "c4"), "--codec", "cost", "--no-sync"); code == 0 || !strings.Contains(e, bad) {
		t.Fatalf("bad profile: %d %q", code, e)
	}
	if code, _, e := splitzip(t, "compress", ck, "-o", filepath.Join(dir, "c5"), "--codec", "cheap"); code != 2 || !strings.Contains(e, "cost") {
		t.Fatalf("bad codec: %d %q", code, e)
	}
	// A file of other decoders: used as asked, with a note.
	stale := costmodel.Default()
	stale.Decoders = costmodel.Decoders - 1
	file := filepath.Join(dir, "stale.json")
	if err := costmodel.SaveFile(file, stale); err != nil {
		t.Fatal(err)
	}
	t.Setenv(costmodel.EnvProfile, file)
	if code, _, e := splitzip(t, "compress", ck, "-o", filepath.Join(dir, "c6"), "--codec", "cost", "--no-sync"); code != 0 || !strings.Contains(e, "measured with decoders") {
		t.Fatalf("a profile file of other decoders: %d %q", code, e)
	}
}

// byPath sums the tensor counts of load's "tensors by path" list.
func byPath(t *testing.T, out string) int {
	t.Helper()
	_, list, ok := strings.Cut(out, "tensors by path: ")
	if !ok {
		return -1
	}
	list, _, _ = strings.Cut(list, ")")
	n := 0
	for _, part := range strings.Split(list, ", ") {
		f := strings.Fields(part)
		k, err := strconv.Atoi(f[len(f)-1])
		if err != nil {
			t.Fatalf("%q: %v", part, err)
		}
		n += k
	}
	return n
}

// TestCostProfileNotKept: a profile measured where it cannot be kept (the
// cache folder is a file here; read-only for others) serves the run that
// measured it, with a note, rather than failing it; SPLITZIP_PROFILE
// naming no file is an input error that names the variable.
func TestCostProfileNotKept(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	os.WriteFile(home, nil, 0o644)
	t.Setenv("XDG_CACHE_HOME", home)
	t.Setenv(costmodel.EnvProfile, "")
	t.Setenv(envCalibrateQuick, "1")
	ck := filepath.Join(dir, "ck")
	if code, _, e := splitzip(t, "gen", ck, "--size", "256KiB", "--shards", "1"); code != 0 {
		t.Fatalf("gen: %d %s", code, e)
	}
	code, _, e := splitzip(t, "compress", ck, "-o", filepath.Join(dir, "c"), "--codec", "cost", "--no-sync")
	if code != 0 || !strings.Contains(e, "could not be kept, so this run alone uses it") {
		t.Errorf("compress --codec cost with nowhere to keep the profile: exit %d, %q", code, e)
	}
	// calibrate itself: the table all the same, then exit 4 (an output
	// that cannot be written).
	code, out, e := splitzip(t, "calibrate")
	if code != exitResource || !strings.Contains(out, "raw <= ") || !strings.Contains(e, "could not be kept") {
		t.Errorf("calibrate with nowhere to keep the profile: exit %d, %q, %q", code, out, e)
	}
	// With --json: one document, the profile and why it was not kept,
	// which stderr says too.
	code, out, e = splitzip(t, "calibrate", "--json")
	var doc struct {
		MessageType string `json:"message_type"`
		File, Error string
		Decoders    int
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != exitResource || doc.MessageType != "profile" ||
		doc.File != "" || !strings.Contains(doc.Error, "could not be kept") || doc.Decoders != costmodel.Decoders || !strings.Contains(e, "could not be kept") {
		t.Errorf("calibrate --json with nowhere to keep the profile: exit %d, %v, %q, %q", code, err, out, e)
	}
	none := filepath.Join(dir, "none.json")
	t.Setenv(costmodel.EnvProfile, none)
	code, _, e = splitzip(t, "compress", ck, "-o", filepath.Join(dir, "c2"), "--codec", "cost", "--no-sync")
	if code != exitInput || !strings.Contains(e, costmodel.EnvProfile+"=") {
		t.Errorf("%s naming no file: exit %d, %q", costmodel.EnvProfile, code, e)
	}
	// calibrate writes the file the variable names, as its error says,
	// and compress then uses it.
	if code, _, e := splitzip(t, "calibrate"); code != 0 {
		t.Fatalf("calibrate with %s=%s: exit %d, %q", costmodel.EnvProfile, none, code, e)
	}
	if _, err := costmodel.Read(none); err != nil {
		t.Fatalf("the profile calibrate wrote: %v", err)
	}
	if code, _, e := splitzip(t, "compress", ck, "-o", filepath.Join(dir, "c3"), "--codec", "cost", "--no-sync"); code != 0 || strings.Contains(e, "measuring") {
		t.Errorf("compress with the profile calibrate wrote: exit %d, %q", code, e)
	}
}

// TestInspectBoundShare: under --codec cost a dtype whose tensors mostly
// stay raw (no statistics) has its entropy bound over the payloads alone,
// and inspect says what share of its values that is.
func TestInspectBoundShare(t *testing.T) {
	t.Setenv(costmodel.EnvProfile, "default")
	dir := t.TempDir()
	ck, cache := filepath.Join(dir, "ck"), filepath.Join(dir, "c")
	if code, _, e := splitzip(t, "gen", ck, "--dtype", "F8_E5M2", "--size", "16MiB"); code != 0 {
		t.Fatalf("gen: %d %s", code, e)
	}
	if code, _, e := splitzip(t, "compress", ck, "-o", cache, "--codec", "cost", "--no-sync"); code != 0 {
		t.Fatalf("compress: %d %s", code, e)
	}
	code, out, _ := splitzip(t, "inspect", cache, "--json")
	var ins struct {
		DTypes []struct {
			DType string
			Bound float64 `json:"entropy_bound_bits"`
			Share float64 `json:"entropy_bound_share"`
		}
	}
	if err := json.Unmarshal([]byte(out), &ins); err != nil || code != 0 {
		t.Fatalf("inspect: %v %s", err, out)
	}
	for _, d := range ins.DTypes {
		if d.DType == "F8_E5M2" && !(d.Bound > 0 && d.Share > 0 && d.Share < 1) {
			t.Errorf("F8_E5M2: bound %g over a share %g of its values, want a part", d.Bound, d.Share)
		}
	}
	if code, out, _ := splitzip(t, "inspect", cache); code != 0 || !strings.Contains(out, "% of values)") {
		t.Errorf("inspect's table does not give the share: %s", out)
	}
}

// TestCostNoHome: with neither XDG_CACHE_HOME nor HOME (some services),
// compress --codec cost measures a profile for its run, as where the
// folder is read-only, and commands that only read one fail as input
// errors naming both variables, not as internal errors.
func TestCostNoHome(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "")
	t.Setenv(costmodel.EnvProfile, "")
	t.Setenv(envCalibrateQuick, "1")
	ck, c := filepath.Join(dir, "ck"), filepath.Join(dir, "c")
	if code, _, e := splitzip(t, "gen", ck, "--size", "256KiB", "--shards", "1"); code != 0 {
		t.Fatalf("gen: %d %s", code, e)
	}
	if code, _, e := splitzip(t, "compress", ck, "-o", c, "--codec", "cost", "--no-sync"); code != 0 || !strings.Contains(e, "could not be kept, so this run alone uses it") {
		t.Fatalf("compress --codec cost without HOME: exit %d, %q", code, e)
	}
	for _, args := range [][]string{{"inspect", c, "--cost"}, {"load", c, "--device", "cpu", "--cost"}} {
		if code, _, e := splitzip(t, args...); code != exitInput || !strings.Contains(e, "$XDG_CACHE_HOME nor $HOME") {
			t.Errorf("%s without HOME: exit %d, %q", args[0], code, e)
		}
	}
}

// TestCostProfileReplaced: compress --codec cost says why it measures
// again where the kept profile cannot be used (damaged here), rather than
// replacing it silently.
func TestCostProfileReplaced(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	t.Setenv("XDG_CACHE_HOME", home)
	t.Setenv(costmodel.EnvProfile, "")
	t.Setenv(envCalibrateQuick, "1")
	if code, _, e := splitzip(t, "calibrate", "--device", "cpu"); code != 0 {
		t.Fatalf("calibrate: %d %s", code, e)
	}
	kept, _ := filepath.Glob(filepath.Join(home, "splitzip", "costmodel-*.json"))
	if len(kept) != 1 {
		t.Fatalf("profiles kept: %v", kept)
	}
	if err := os.WriteFile(kept[0], []byte("{\"host\": 7"), 0o644); err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(dir, "ck")
	if code, _, e := splitzip(t, "gen", ck, "--size", "256KiB", "--shards", "1"); code != 0 {
		t.Fatalf("gen: %d %s", code, e)
	}
	code, _, e := splitzip(t, "compress", ck, "-o", filepath.Join(dir, "c"), "--codec", "cost", "--no-sync")
	if code != 0 || !strings.Contains(e, "cannot be used") || !strings.Contains(e, kept[0]) {
		t.Errorf("compress --codec cost over a damaged profile: exit %d, %q", code, e)
	}
	if _, err := costmodel.Read(kept[0]); err != nil {
		t.Errorf("the profile measured again: %v", err)
	}
}

// TestCostBadSourceFirst: compress --codec cost refuses a bad source
// before it measures a profile it has none of.
func TestCostBadSourceFirst(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", filepath.Join(dir, "home"))
	t.Setenv(costmodel.EnvProfile, "")
	bad := filepath.Join(dir, "bad.safetensors")
	os.WriteFile(bad, []byte("not a checkpoint"), 0o644)
	code, _, e := splitzip(t, "compress", bad, "-o", filepath.Join(dir, "c"), "--codec", "cost")
	if code != exitInput || strings.Contains(e, "measuring") || !strings.Contains(e, bad) {
		t.Errorf("compress --codec cost of a bad source: exit %d, %q", code, e)
	}
}
