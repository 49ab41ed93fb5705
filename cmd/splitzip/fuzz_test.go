package main

import (
	"bytes"
	"context"
	"math"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// documentedExits are the exit codes the help text lists.
var documentedExits = []int{exitOK, exitFailure, exitUsage, exitInput, exitResource, exitDevice, exitInternal, exitInterrupted}

// fuzzArgv turns a fuzz input into a command line whose paths all lie in
// dir: arguments are the input's lines; every word that is not a command
// name, a flag or a number becomes a name inside dir (so nothing is read
// or written elsewhere), as does a flag's attached value that is not a
// number or a boolean; a short flag with an attached value keeps only the
// flag.
func fuzzArgv(s, dir string) []string {
	if s == "" {
		return nil
	}
	commands := map[string]bool{}
	for _, c := range []string{"compress", "verify", "inspect", "decompress", "gen", "bench", "decode", "h2d", "load", "entropy",
		"gc", "relocate", "plan", "version", "help", "completion", "bash", "zsh", "fish", "powershell", "cpu", "fixed", "auto"} {
		commands[c] = true
	}
	inDir := func(v string) string {
		v = strings.NewReplacer("/", "_", "\\", "_", "..", "_", "\x00", "_").Replace(v)
		return filepath.Join(dir, "p"+v)
	}
	plain := func(v string) bool {
		if _, err := strconv.ParseFloat(v, 64); err == nil {
			return true
		}
		if _, err := strconv.ParseBool(v); err == nil {
			return true
		}
		_, err := parseSize(v)
		return err == nil || commands[v]
	}
	var argv []string
	for _, a := range strings.Split(s, "\n") {
		switch {
		case strings.HasPrefix(a, "--memory"):
			// --memory sets the process's memory limit, which a fuzzing
			// worker's heap may be over for the rest of the run; its values
			// are TestBadFlagValues'.
			a = "--quiet"
		case strings.HasPrefix(a, "__complete"):
			// the shell's completion protocol, text by design
			a = inDir(a)
		case strings.HasPrefix(a, "--"):
			if name, v, ok := strings.Cut(a, "="); ok && !plain(v) {
				a = name + "=" + inDir(v)
			}
		case strings.HasPrefix(a, "-") && len(a) > 2:
			if _, err := strconv.ParseFloat(a, 64); err != nil {
				a = a[:2]
			}
		case a == "-" || plain(a):
		default:
			a = inDir(a)
		}
		argv = append(argv, a)
	}
	return argv
}

// FuzzCommandLine runs random command lines (from the seeds in
// testdata/fuzz/FuzzCommandLine), under a context already cancelled so
// that no command does real work, with every path inside a temporary
// folder: no panic (an internal error), an exit code the help documents,
// with --json exactly one JSON document on stdout, and no Go internals in
// any message.
func FuzzCommandLine(f *testing.F) {
	for _, s := range []string{
		"verify\n--jobs\nabc",
		"compress\nck\n-o\nc\n--min-saving\nNaN\n--json",
		"--json\nfrob",
		"--version\n--json",
		"help\nverify\n--json",
		"load\nc\n--device\ncpu\n--repeat\n0",
		"gen\ng\n--size\n1KiB\n--shards\n1",
		"plan\nc\n--ranks\n-3\n--json",
	} {
		f.Add(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f.Fuzz(func(t *testing.T, s string) {
		dir := t.TempDir()
		t.Chdir(dir) // a relative path left as it is lands in dir too
		argv := fuzzArgv(s, dir)
		defer debug.SetMemoryLimit(math.MaxInt64) // --memory sets it
		var out, errb bytes.Buffer
		code, g := execute(ctx, argv, &out, &errb)
		if code == exitInternal {
			t.Fatalf("%q: internal error: %s", argv, errb.String())
		}
		if !slices.Contains(documentedExits, code) {
			t.Fatalf("%q: exit %d is not documented", argv, code)
		}
		if g.JSON || g.jsonErr {
			if _, err := oneJSON(out.String()); err != nil {
				t.Fatalf("%q with --json: %v; stdout %q", argv, err, out.String())
			}
		} else if jsonRequested(argv) && !g.started && code == exitUsage {
			t.Fatalf("%q: a usage error with --json given printed no JSON document", argv)
		}
		if b := showsInternals(out.String() + errb.String()); b != "" {
			t.Fatalf("%q: output shows %q: %q %q", argv, b, out.String(), errb.String())
		}
	})
}
