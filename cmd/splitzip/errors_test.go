package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/splitzip/splitzip/internal/failure"
	"github.com/splitzip/splitzip/shardcache"
)

// internals are fragments of Go's insides no message may show.
var internals = []string{"strconv", "parsing ", "invalid syntax", "ParseInt", "ParseFloat", "ParseUint", "*fs.", "*os.", "goroutine", "panic:", "reflect", "Go struct", "json: cannot"}

// showsInternals returns the first fragment of internals s shows.
func showsInternals(s string) string {
	for _, b := range internals {
		if strings.Contains(s, b) {
			return b
		}
	}
	return ""
}

// oneJSON parses s as exactly one JSON object and nothing after it.
func oneJSON(s string) (map[string]any, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("more after the first JSON document")
	}
	return doc, nil
}

// TestExitConstants: the CLI's exit codes are package failure's.
func TestExitConstants(t *testing.T) {
	for k, c := range map[failure.Kind]int{failure.OK: exitOK, failure.Integrity: exitFailure, failure.Usage: exitUsage,
		failure.Input: exitInput, failure.Resource: exitResource, failure.Device: exitDevice,
		failure.Internal: exitInternal, failure.Interrupted: exitInterrupted} {
		if k.ExitCode() != c {
			t.Errorf("%v exits %d, the CLI's constant says %d", k, k.ExitCode(), c)
		}
	}
}

// TestExitCodeTables: README's table of exit codes and --help's name the
// code and kind of every failure kind, and no other.
func TestExitCodeTables(t *testing.T) {
	want := map[string]bool{"0 ok": true}
	for _, k := range failure.Kinds {
		want[fmt.Sprintf("%d %s", k.ExitCode(), k)] = true
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, help, _ := splitzip(t, "--help")
	for _, c := range []struct {
		name, text string
		row        *regexp.Regexp
	}{
		{"README.md", string(readme), regexp.MustCompile(`(?m)^\s*\|\s*(\d+)\s*\|\s*([a-z]+)\s*\|`)},
		{"--help", help, regexp.MustCompile(`(?m)^\s+(\d+)\s{2}([a-z]+)\s{2,}\S`)},
	} {
		got := map[string]bool{}
		for _, m := range c.row.FindAllStringSubmatch(c.text, -1) {
			got[m[1]+" "+m[2]] = true
		}
		for r := range want {
			if !got[r] {
				t.Errorf("%s's exit code table lacks %q", c.name, r)
			}
		}
		for r := range got {
			if !want[r] {
				t.Errorf("%s's exit code table has %q, which is no kind's", c.name, r)
			}
		}
	}
}

// TestJSONEveryPath: with --json, stdout is exactly one JSON document on
// every path (success, failure, flag errors, help, version, interrupt),
// and an error document's kind and exit code are the run's.
func TestJSONEveryPath(t *testing.T) {
	dir := t.TempDir()
	ck, cache, bad := filepath.Join(dir, "ck"), filepath.Join(dir, "cache"), filepath.Join(dir, "bad")
	if code, _, e := splitzip(t, "gen", ck, "--size", "1MiB", "--shards", "1", "-q"); code != 0 {
		t.Fatalf("gen: %s", e)
	}
	for _, c := range [][]string{{ck, cache}, {ck, bad}} {
		if code, _, e := splitzip(t, "compress", c[0], "-o", c[1], "--no-sync", "-q"); code != 0 {
			t.Fatalf("compress: %s", e)
		}
	}
	// bad: one object corrupt, so verify finds a mismatch.
	obj, _ := largestObject(bad)
	if obj == "" {
		t.Fatal("no object in the cache")
	}
	b, _ := os.ReadFile(obj)
	b[len(b)/2] ^= 0x10
	os.WriteFile(obj, b, 0o644)
	missing := filepath.Join(dir, "missing")
	for _, c := range []struct {
		name    string
		args    []string
		code    int
		msgType string
	}{
		{"success", []string{"inspect", cache}, 0, "inspect"},
		{"verify ok", []string{"verify", cache}, 0, "verify_summary"},
		{"verify mismatch", []string{"verify", bad}, exitFailure, "verify_summary"},
		{"missing input", []string{"verify", missing}, exitInput, "error"},
		{"not a cache", []string{"inspect", ck}, exitInput, "error"},
		{"unknown flag", []string{"verify", "--bogus", cache}, exitUsage, "error"},
		{"unknown flag before --json", []string{"inspect", "--bogus"}, exitUsage, "error"},
		{"bad int", []string{"verify", cache, "--jobs", "abc"}, exitUsage, "error"},
		{"bad float", []string{"compress", ck, "-o", missing, "--min-saving", "abc"}, exitUsage, "error"},
		{"NaN", []string{"compress", ck, "-o", missing, "--min-saving", "NaN"}, exitUsage, "error"},
		{"jobs 0", []string{"verify", cache, "--jobs", "0"}, exitUsage, "error"},
		{"bad size", []string{"verify", cache, "--memory", "lots"}, exitUsage, "error"},
		{"missing flag value", []string{"verify", cache, "--jobs"}, exitUsage, "error"},
		{"missing argument", []string{"verify"}, exitUsage, "error"},
		{"extra argument", []string{"verify", cache, cache}, exitUsage, "error"},
		{"unknown command", []string{"frobnicate"}, exitUsage, "error"},
		{"unknown subcommand", []string{"bench", "frobnicate"}, exitUsage, "error"},
		{"unknown help topic", []string{"help", "frobnicate"}, exitUsage, "error"},
		{"completion script", []string{"completion", "bash"}, exitUsage, "error"},
		{"--version", []string{"--version"}, 0, "version"},
		{"version", []string{"version"}, 0, "version"},
		{"--help", []string{"--help"}, 0, "help"},
		{"verify --help", []string{"verify", "--help"}, 0, "help"},
		{"help verify", []string{"help", "verify"}, 0, "help"},
		{"no command", nil, 0, "help"},
		{"group with no subcommand", []string{"bench"}, 0, "help"},
		{"a GPU bench on the CPU", []string{"bench", "decode", "--device", "cpu"}, exitUsage, "error"},
		{"--dtype with the fixed codec", []string{"bench", "decode", "--dtype", "F16"}, exitUsage, "error"},
		{"a bad --dtype, no GPU opened", []string{"bench", "decode", "--codec", "entropy", "--dtype", "BOGUS"}, exitUsage, "error"},
	} {
		for _, where := range []string{"last", "first"} {
			args := append(append([]string{}, c.args...), "--json")
			if where == "first" {
				args = append([]string{"--json"}, c.args...)
			}
			code, out, e := splitzip(t, args...)
			doc, err := oneJSON(out)
			switch {
			case err != nil:
				t.Errorf("%s (--json %s): %v; stdout %q", c.name, where, err, out)
			case code != c.code || doc["message_type"] != c.msgType:
				t.Errorf("%s (--json %s): exit %d, message_type %v; want %d, %s; stdout %q stderr %q", c.name, where, code, doc["message_type"], c.code, c.msgType, out, e)
			case c.msgType == "error" && (doc["exit_code"] != float64(code) || doc["kind"] == "" || doc["error"] == ""):
				t.Errorf("%s (--json %s): error document %v for exit %d", c.name, where, doc, code)
			}
			if bad := showsInternals(out + e); bad != "" {
				t.Errorf("%s: output shows %q: %q %q", c.name, bad, out, e)
			}
		}
	}
	// The file an error is about, as a field of the document.
	if _, out, _ := splitzip(t, "verify", missing, "--json"); !strings.Contains(out, `"file": "`+missing) {
		t.Errorf("the error document of a missing cache does not name it: %s", out)
	}
	// Interrupted: one error document of kind interrupted.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var o, e bytes.Buffer
	code := runContext(ctx, []string{"verify", cache, "--json"}, &o, &e)
	if doc, err := oneJSON(o.String()); err != nil || code != exitInterrupted || doc["kind"] != "interrupted" {
		t.Errorf("interrupted with --json: exit %d, %v, %q", code, err, o.String())
	}
}

// positional returns placeholder arguments under dir for the arguments
// cmd's Use line requires (and the flags it names, such as -o CACHE;
// optional ones in brackets left out), so that a run reaches the checks
// of its flags.
func positional(cmd *cobra.Command, dir string) []string {
	var a []string
	f := strings.Fields(cmd.Use)
	for i := 1; i < len(f); i++ {
		switch {
		case strings.HasPrefix(f[i], "-") && i+1 < len(f):
			a = append(a, f[i], filepath.Join(dir, strings.ToLower(f[i+1])))
			i++
		case strings.HasPrefix(f[i], "["):
		default:
			a = append(a, filepath.Join(dir, strings.ToLower(f[i])))
		}
	}
	return a
}

// sizeFlags are the string flags that take a byte size.
var sizeFlags = map[string]bool{"memory": true, "size": true, "pinned-limit": true, "pack-max": true}

// TestBadFlagValues runs every command with bad values for each of its
// numeric, boolean and size flags: each is a usage error (exit 2) that
// names the flag and shows no Go internals, before any output or file.
func TestBadFlagValues(t *testing.T) {
	root := newRootCommand(&globals{stdout: io.Discard, stderr: io.Discard})
	var cmds []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && c.HasParent() && !c.HasSubCommands() {
			cmds = append(cmds, c)
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	cases := 0
	for _, cmd := range cmds {
		path := strings.Fields(cmd.CommandPath())[1:]
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			var bad []string
			switch typ := f.Value.Type(); {
			case strings.HasPrefix(typ, "int"):
				bad = []string{"abc", "1.5", "99999999999999999999999", ""}
			case strings.HasPrefix(typ, "uint"):
				bad = []string{"abc", "-1", ""}
			case strings.HasPrefix(typ, "float"):
				bad = []string{"abc", "NaN", "Inf", "-Inf", "+Inf", ""}
			case typ == "duration":
				bad = []string{"abc", "5"}
			case typ == "bool":
				bad = []string{"maybe"}
			case sizeFlags[f.Name]:
				bad = []string{"abc", "NaN", "Inf", "-1", "1e300GiB", "12XB"}
			}
			if ann := f.Annotations[minAnnotation]; len(ann) == 2 {
				min, _ := strconv.ParseInt(ann[0], 10, 64)
				bad = append(bad, strconv.FormatInt(min-1, 10))
			}
			for _, v := range bad {
				cases++
				dir := t.TempDir()
				args := append(append(append([]string{}, path...), positional(cmd, dir)...), "--"+f.Name+"="+v)
				code, out, e := splitzip(t, args...)
				if code != exitUsage || !strings.Contains(e, "--"+f.Name) || out != "" {
					t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 2 naming --%s", strings.Join(args, " "), code, out, e, f.Name)
				}
				if b := showsInternals(e); b != "" {
					t.Errorf("%s: stderr shows %q: %q", strings.Join(args, " "), b, e)
				}
				if ents, _ := os.ReadDir(dir); len(ents) > 0 {
					t.Errorf("%s: left %s behind", strings.Join(args, " "), ents[0].Name())
				}
			}
		})
	}
	t.Logf("%d bad values over %d commands", cases, len(cmds))
}

// TestAmbiguousSourceNamesFlag: a cache of two checkpoints, used without
// --source, is a usage error whose message lists both paths and, on the
// command line only, names the flag that picks one (the library's text,
// which Python shows too, names none).
func TestAmbiguousSourceNamesFlag(t *testing.T) {
	dir := t.TempDir()
	ck, cache := compressed(t, dir)
	ck2 := filepath.Join(dir, "ck2")
	if code, _, e := splitzip(t, "gen", ck2, "--size", "1MiB", "--shards", "1", "--seed", "7"); code != 0 {
		t.Fatalf("gen: %d %s", code, e)
	}
	if code, _, e := splitzip(t, "compress", ck2, "-o", cache, "--no-sync"); code != 0 {
		t.Fatalf("compress: %d %s", code, e)
	}
	code, _, e := splitzip(t, "load", cache, "--device", "cpu")
	if code != exitUsage || !strings.Contains(e, "--source PATH") || !strings.Contains(e, ck) || !strings.Contains(e, ck2) {
		t.Errorf("load of a cache of two checkpoints without --source: exit %d, %q", code, e)
	}
	if code, _, e := splitzip(t, "load", cache, "--device", "cpu", "--source", ck2); code != 0 {
		t.Errorf("load --source %s: exit %d, %q", ck2, code, e)
	}
}

// TestDecompressOutputTaken: decompress into a folder that already has
// the restored files, or onto a file, is a usage error that says so (it
// was an internal error, exit 70), and changes nothing there.
func TestDecompressOutputTaken(t *testing.T) {
	dir := t.TempDir()
	_, cache := compressed(t, dir)
	out := filepath.Join(dir, "out")
	if code, _, e := splitzip(t, "decompress", cache, "-o", out); code != 0 {
		t.Fatalf("decompress: %d %s", code, e)
	}
	file := filepath.Join(dir, "afile")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{out, file} {
		code, _, e := splitzip(t, "decompress", cache, "-o", target)
		if code != exitUsage || !strings.Contains(e, "already exists") || strings.Contains(e, "internal") {
			t.Errorf("decompress -o %s: exit %d, %q", target, code, e)
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "x" {
		t.Errorf("the file in the way was changed: %q %v", b, err)
	}
}

// largestObject returns the largest file under the cache's objects/ and
// its size.
func largestObject(cache string) (path string, size int64) {
	filepath.Walk(filepath.Join(cache, "objects"), func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && info.Size() > size {
			path, size = p, info.Size()
		}
		return nil
	})
	return path, size
}

// TestTruncatedObjectIsIntegrity: a cache object cut short is a corrupt
// cache (exit 1) for verify, decompress and load alike; load called it a
// truncated source file (exit 3).
func TestTruncatedObjectIsIntegrity(t *testing.T) {
	dir := t.TempDir()
	_, cache := compressed(t, dir)
	obj, size := largestObject(cache)
	if err := os.Truncate(obj, size/2); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"verify", cache}, {"decompress", cache, "-o", filepath.Join(dir, "out")}, {"load", cache, "--device", "cpu"}} {
		code, _, e := splitzip(t, args...)
		if code != exitFailure || !strings.Contains(e, "corrupt") || strings.Contains(e, "source file") || !strings.Contains(e, mendHint) {
			t.Errorf("%s with an object cut short: exit %d, %q; want a corrupt object and how to mend it", args[0], code, e)
		}
	}
}

// TestVerifySourceGoneIsInput: verify of a cache whose source is gone is
// an input failure (exit 3), as for decompress and load, and each FAIL
// line names the file once; a corrupt object is still integrity (exit 1).
func TestVerifySourceGoneIsInput(t *testing.T) {
	dir := t.TempDir()
	ck, cache := compressed(t, dir)
	if err := os.Rename(ck, ck+".moved"); err != nil {
		t.Fatal(err)
	}
	code, _, e := splitzip(t, "verify", cache)
	if code != exitInput || !strings.Contains(e, "FAIL") {
		t.Errorf("verify with the source gone: exit %d, %q", code, e)
	}
	for _, line := range strings.Split(strings.TrimSpace(e), "\n") {
		if f, _, ok := strings.Cut(strings.TrimPrefix(line, "FAIL "), ": "); ok && strings.Count(line, f) > 1 {
			t.Errorf("a FAIL line names its file twice: %q", line)
		}
	}
	if err := os.Rename(ck+".moved", ck); err != nil {
		t.Fatal(err)
	}
	if code, _, e := splitzip(t, "verify", cache); code != 0 {
		t.Fatalf("verify with the source back: exit %d, %q", code, e)
	}
}

// TestInputErrorsNotInternal: inputs a user gets wrong are usage or input
// errors, not bugs (exit 70): an s3:// reference without a prefix, an
// oci:// one without a registry, a malformed SPLITZIP_PROFILE, a shared
// folder others may write.
func TestInputErrorsNotInternal(t *testing.T) {
	dir := t.TempDir()
	_, cache := compressed(t, dir)
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte("{garbage"), 0o644)
	share := filepath.Join(dir, "share")
	os.Mkdir(share, 0o755)
	os.Chmod(share, 0o777)
	for _, c := range []struct {
		env  []string
		args []string
		code int
	}{
		{nil, []string{"push", cache, "s3://bucket"}, exitUsage},
		{nil, []string{"pull", "s3://bucket", filepath.Join(dir, "p")}, exitUsage},
		{nil, []string{"push", cache, "oci:///repo"}, exitUsage},
		{nil, []string{"inspect", "oci://localhost:1/m/a:v1"}, exitUsage},
		{nil, []string{"gc", "s3://bucket/prefix"}, exitUsage},
		{nil, []string{"decompress", "oci://localhost:1/m/a:v1", "-o", filepath.Join(dir, "out")}, exitUsage},
		{[]string{"SPLITZIP_PROFILE=" + bad}, []string{"inspect", cache, "--cost"}, exitInput},
		{[]string{"SPLITZIP_SHARE_DIR=" + share}, []string{"load", cache, "--device", "cpu", "--share"}, exitUsage},
	} {
		for _, e := range c.env {
			k, v, _ := strings.Cut(e, "=")
			t.Setenv(k, v)
		}
		if code, _, e := splitzip(t, c.args...); code != c.code || strings.Contains(e, "internal error") {
			t.Errorf("%v %v: exit %d, %q; want %d", c.env, c.args, code, e, c.code)
		}
		for _, e := range c.env {
			k, _, _ := strings.Cut(e, "=")
			os.Unsetenv(k)
		}
	}
}

// TestSourceTimeHints: a source of the same size and another time is
// met with relocate's hint where a cache's source is read, and with
// compress's own where compress found its file changing under it.
func TestSourceTimeHints(t *testing.T) {
	var stderr strings.Builder
	g := &globals{stdout: io.Discard, stderr: &stderr}
	root := newRootCommand(g)
	err := &shardcache.FileError{File: "/m/model.safetensors", Err: fmt.Errorf("%w (size 10, mtime ...)", shardcache.ErrSourceTime)}
	for name, want := range map[string]string{
		"compress": "changed while compress read it: run compress again",
		"load":     "'splitzip relocate CACHE DIR' re-hashes it",
		"verify":   "'splitzip relocate CACHE DIR' re-hashes it",
	} {
		cmd, _, ferr := root.Find([]string{name})
		if ferr != nil || cmd.Name() != name {
			t.Fatalf("%s: %v", name, ferr)
		}
		stderr.Reset()
		if code := g.report(cmd, err); code != exitInput || !strings.Contains(stderr.String(), want) {
			t.Errorf("%s: exit %d, %q; want %q", name, code, stderr.String(), want)
		}
		if name == "compress" && strings.Contains(stderr.String(), "relocate") {
			t.Errorf("compress suggests relocate: %q", stderr.String())
		}
	}
}

// TestInterrupted: a run ended by Ctrl-C is "interrupted" (exit 130);
// a gc stopped after its commit also says the commit stands.
func TestInterrupted(t *testing.T) {
	plain := interrupted(context.Canceled)
	if plain.Error() != "interrupted" || failure.ExitCode(plain) != exitInterrupted {
		t.Errorf("interrupted: %q, exit %d", plain, failure.ExitCode(plain))
	}
	committed := interrupted(fmt.Errorf("%w: %w", shardcache.ErrStraysLeft, context.Canceled))
	if !strings.Contains(committed.Error(), shardcache.ErrStraysLeft.Error()) || failure.ExitCode(committed) != exitInterrupted {
		t.Errorf("interrupted after gc's commit: %q, exit %d", committed, failure.ExitCode(committed))
	}
}

// TestLoadRawConflicts: each option that chooses how payloads load, and
// --compare, refused beside --raw in words about that option alone.
func TestLoadRawConflicts(t *testing.T) {
	for flag, says := range map[string]string{"--cost": "--cost chooses how payloads load: not with --raw",
		"--read-through": "--read-through chooses how payloads load: not with --raw", "--entropy-on-host": "--entropy-on-host chooses how payloads load: not with --raw",
		"--compare=2": "--compare alternates raw and compressed loads: not with --raw"} {
		code, _, e := splitzip(t, "load", t.TempDir(), "--raw", flag, "--device", "cpu")
		if code != exitUsage || !strings.Contains(e, says) {
			t.Errorf("load --raw %s: exit %d, %q; want %q", flag, code, e, says)
		}
	}
}

// TestBenchDeviceCPU: a command whose --device is a GPU ordinal, given
// cpu, says so and where cpu is taken, not that "cpu" is not a number.
func TestBenchDeviceCPU(t *testing.T) {
	for _, args := range [][]string{{"bench", "decode"}, {"bench", "h2d"}, {"bench", "gemv"}, {"verify", t.TempDir(), "--gpu"}} {
		code, _, e := splitzip(t, append(args, "--device", "cpu")...)
		if code != exitUsage || !strings.Contains(e, "a GPU ordinal") || !strings.Contains(e, "take --device cpu") {
			t.Errorf("%v --device cpu: exit %d, %q", args, code, e)
		}
	}
}

// TestGenShapeFlags: a flag of another shape than the one chosen is a
// usage error naming it, not ignored.
func TestGenShapeFlags(t *testing.T) {
	for _, args := range [][]string{{"--tiny", "10", "--hidden", "128"}, {"--mix", "10", "--hidden", "128"}, {"--tiny", "10", "--layers", "2"}, {"--tiny", "10", "--size", "1MiB"}} {
		code, _, e := splitzip(t, append([]string{"gen", filepath.Join(t.TempDir(), "g")}, args...)...)
		if code != exitUsage || !strings.Contains(e, args[2]) {
			t.Errorf("gen %v: exit %d, %q", args, code, e)
		}
	}
}

// TestFlippedObjectMendHint: a flipped byte inside a stored payload (its
// checksum fails) says how to mend it, as an object cut short does.
func TestFlippedObjectMendHint(t *testing.T) {
	dir := t.TempDir()
	_, cache := compressed(t, dir)
	obj, size := largestObject(cache)
	b, err := os.ReadFile(obj)
	if err != nil {
		t.Fatal(err)
	}
	b[size/2] ^= 1
	os.WriteFile(obj, b, 0o644)
	for _, args := range [][]string{{"verify", cache}, {"decompress", cache, "-o", filepath.Join(dir, "out")}, {"load", cache, "--device", "cpu"}} {
		if code, _, e := splitzip(t, args...); code != exitFailure || !strings.Contains(e, mendHint) {
			t.Errorf("%s with a flipped byte in an object: exit %d, %q; want how to mend it", args[0], code, e)
		}
	}
}
