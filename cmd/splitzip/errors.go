package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/internal/failure"
	"github.com/splitzip/splitzip/shardcache"
)

// Exit codes, one per kind of failure (package failure; a test checks
// they agree).
const (
	exitOK          = 0
	exitFailure     = 1 // integrity: a mismatch, a corrupt cache or payload
	exitUsage       = 2
	exitInput       = 3
	exitResource    = 4
	exitDevice      = 5
	exitInternal    = 70
	exitInterrupted = 130 // as shells report a command ended by Ctrl-C
)

// usageError marks errors in how the command was called.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// FailureKind makes a usageError a failure of kind usage.
func (usageError) FailureKind() failure.Kind { return failure.Usage }

// errFailed reports a job that ran but found problems it already printed
// (verify's mismatches): an integrity failure with nothing more to say.
var errFailed = errors.New("failed")

// movedHint is what to do about a source shard that is not where the
// cache recorded it.
func movedHint(cache string) string {
	return "if the source moved, pass --source DIR, the folder it is in now, or record its new place with 'splitzip relocate " + cache + " DIR'"
}

// relocateHint says what to do about a source shard whose modification
// time alone differs (shardcache.ErrSourceTime), for cache.
func relocateHint(cache string) string {
	return "its size is the recorded one but its modification time is not: if the source is a copy of the same bytes, 'splitzip relocate " + cache + " DIR' re-hashes it and records its new times (and refuses it if its bytes changed)"
}

// mendHint is what to do about a damaged cache object. Only the
// checkpoint (or artifact) that stored an object can store it again in its
// form: another checkpoint with the same bytes in another dtype or codec
// takes the damaged one's form and leaves it (review 70c).
const mendHint = "compressing again the checkpoint that stored a damaged object, or pulling again the artifact that brought it, replaces it: objects an earlier run stored are checked before they are reused"

// streamedArg reports whether cmd reads a remote cache in place: its
// first argument a registry's or bucket's, without --local-cache.
func streamedArg(cmd *cobra.Command) bool {
	if cmd == nil || len(cmd.Flags().Args()) == 0 || !isRemote(cmd.Flags().Args()[0]) {
		return false
	}
	lc := cmd.Flags().Lookup("local-cache")
	return lc == nil || lc.Value.String() == ""
}

// storeMendHint is what to do about a damaged object of a registry's or
// bucket's cache, read in place: pulling fetches the same bytes.
const storeMendHint = "the store's copy is damaged, and a pull fetches the same bytes: push the checkpoint again from a cache that verifies, after deleting the damaged blob from the store (pull names it)"

// indexHint is what to do about a damaged index.
const indexHint = "its backup (" + shardcache.BackupName + ", which a cache written since 2026-12-07 keeps) is damaged, absent or of another commit; to rebuild it, move the cache's " + shardcache.IndexName + " aside and compress each checkpoint into the cache again, or pull it again: the objects stay, and each is checked before it is used again"

// localIndex reports whether err names a local cache's index file (not
// a registry's or bucket's artifact index, which a pull reads: there the
// local cache is intact).
func localIndex(err error) bool {
	file, _ := failure.Locate(err)
	if filepath.Base(file) != shardcache.IndexName {
		return false
	}
	_, serr := os.Stat(file)
	return serr == nil
}

// exitCodes is the table of exit codes the root command's help prints
// (README.md has the same; a test checks both).
func exitCodes() string {
	kinds := slices.Clone(failure.Kinds)
	slices.SortFunc(kinds, func(a, b failure.Kind) int { return a.ExitCode() - b.ExitCode() })
	var b strings.Builder
	b.WriteString("Exit codes (the same for every command; with --json the error document's\n\"kind\" names the row):\n")
	fmt.Fprintf(&b, "  %3d  %-12s %s\n", 0, "ok", failure.OK.Description())
	for _, k := range kinds {
		fmt.Fprintf(&b, "  %3d  %-12s %s\n", k.ExitCode(), k, k.Description())
	}
	return b.String()
}

// report prints a failure once, as text on stderr and, with --json, as the
// error document on stdout, and returns its exit code.
func (g *globals) report(cmd *cobra.Command, err error) int {
	kind := failure.KindOf(err)
	msg := failure.Message(err)
	if errors.Is(err, shardcache.ErrAmbiguousSource) {
		// The library's text names no flag (Python sees it too): the
		// command's own that names a checkpoint (gc's is --forget).
		flag := "source"
		if cmd != nil && cmd.Flags().Lookup("source") == nil && cmd.Flags().Lookup("forget") != nil {
			flag = "forget"
		}
		msg += " (pass --" + flag + " PATH, one of the paths above)"
	}
	switch {
	case errors.Is(err, shardcache.ErrSourceChanged) && cmd != nil && cmd.Name() == "compress":
		// Not a cache's source that moved: the file compress was reading.
		msg += " (the file changed while compress read it: run compress again once nothing writes to it)"
	case errors.Is(err, shardcache.ErrSourceTime):
		msg += " (" + relocateHint("CACHE") + ")"
	}
	if errors.Is(err, shardcache.ErrSourceMissing) {
		msg += " (" + movedHint("CACHE") + ")"
	}
	if errors.Is(err, shardcache.ErrIndexCorrupt) && localIndex(err) {
		msg += " (" + indexHint + ")"
	} else if streamedArg(cmd) && (errors.Is(err, shardcache.ErrObjectCorrupt) || errors.Is(err, codec.ErrChecksum) || errors.Is(err, codec.ErrCorrupt)) {
		msg += " (" + storeMendHint + ")" // a remote cache read in place
	} else if (errors.Is(err, shardcache.ErrObjectCorrupt) || errors.Is(err, codec.ErrChecksum) || errors.Is(err, codec.ErrCorrupt)) && (cmd == nil || cmd.Name() != "gc") {
		// A payload whose checksum fails is a damaged object too: its
		// bytes come from the cache (gc's refusal says its own).
		msg += " (" + mendHint + ")"
	}
	if errors.Is(err, shardcache.ErrLocked) {
		msg += " (run this command again when the other one ends; a killed run's lock ends with its process)"
	}
	switch kind {
	case failure.Usage:
		name := "splitzip"
		if cmd != nil {
			name = cmd.CommandPath()
		}
		fmt.Fprintf(g.stderr, "splitzip: %s\nRun '%s --help' for usage.\n", msg, name)
	case failure.Internal:
		fmt.Fprintf(g.stderr, "splitzip: internal error: %s\n(this is a bug in splitzip: please report it with the command line that caused it)\n", msg)
	default:
		fmt.Fprintf(g.stderr, "splitzip: %s\n", msg)
	}
	if g.JSON || g.jsonArg && !g.started && (g.flagErr || cmd == nil || !cmd.Flags().Parsed()) {
		// Where parsing stopped before --json (a flag error, an unknown
		// command), the command line decides; where it ended, the flag.
		g.jsonErr = true
		doc := map[string]any{"error": msg, "kind": kind.String(), "exit_code": kind.ExitCode()}
		file, tensor := failure.Locate(err)
		if file != "" {
			doc["file"] = file
		}
		if tensor != "" {
			doc["tensor"] = tensor
		}
		printJSON(g.stdout, "error", doc)
	}
	return kind.ExitCode()
}

// jsonRequested reports whether argv asks for --json (before a "--"), as
// pflag would read it.
func jsonRequested(argv []string) bool {
	on := false
	for _, a := range argv {
		if a == "--" {
			break
		}
		if a == "--json" {
			on = true
		} else if v, ok := strings.CutPrefix(a, "--json="); ok {
			b, err := strconv.ParseBool(v)
			on = err == nil && b
		}
	}
	return on
}

// flagError rewrites pflag's errors in plain words: the flag, the value
// and what it should have been, never the Go function that parsed it.
func (g *globals) flagError(err error) error {
	g.flagErr = true
	var iv *pflag.InvalidValueError
	if !errors.As(err, &iv) {
		return usageError{err}
	}
	f, v := iv.GetFlag(), iv.GetValue()
	want := ""
	switch f.Value.Type() {
	case "int", "int8", "int16", "int32", "int64":
		want = "a whole number"
	case "uint", "uint8", "uint16", "uint32", "uint64":
		want = "a whole number, 0 or more"
	case "float32", "float64":
		want = "a number"
	case "bool":
		want = "true or false"
	case "duration":
		want = "a duration such as 30s, 5m or 1h30m"
	default:
		want = "a " + f.Value.Type()
	}
	if errors.Is(err, strconv.ErrRange) {
		return usageError{fmt.Errorf("--%s: %q is out of range (want %s)", f.Name, v, want)}
	}
	if f.Name == "device" && strings.EqualFold(v, "cpu") {
		// The commands whose --device is a GPU ordinal: the GPU
		// benchmarks, and verify's --gpu (without which it runs on the
		// CPU).
		return usageError{fmt.Errorf("--device: %q: a GPU ordinal (this command's --device picks a GPU; verify runs on the CPU without --gpu, and load, bench load and calibrate take --device cpu)", v)}
	}
	return usageError{fmt.Errorf("--%s: %q is not %s", f.Name, v, want)}
}
