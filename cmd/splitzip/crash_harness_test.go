package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/splitzip/splitzip/shardcache"
)

// The crash harness runs splitzip as a child process, so a SIGKILL ends
// it where a real kill would: between any two instructions, with its
// files as it left them. The child is this test binary, re-entered
// through TestCrashChild, which costs no build; under the race detector,
// whose children would run several times slower, it is a splitzip binary
// built once without it.

// crashChildEnv carries the child's command line, as a JSON array.
const crashChildEnv = "SPLITZIP_CRASH_CHILD_ARGS"

// crashSeedEnv overrides the seed of the kill delays, to replay a run.
const crashSeedEnv = "SPLITZIP_CRASH_SEED"

// crashKillsEnv overrides the number of kills a command.
const crashKillsEnv = "SPLITZIP_CRASH_KILLS"

// crashResult is how a child run ended.
type crashResult struct {
	args   []string
	code   int  // exit code; -1 when a signal ended it
	killed bool // the harness killed it before it exited
	stdout string
	stderr string
	wall   time.Duration
}

func (r crashResult) String() string {
	msg := strings.TrimSpace(r.stderr)
	if len(msg) > 600 {
		msg = fmt.Sprintf("%s... (%d more bytes)", msg[:600], len(msg)-600)
	}
	return fmt.Sprintf("splitzip %s: exit %d, stderr %q", strings.Join(r.args, " "), r.code, msg)
}

// crashHang bounds one child run: longer is a hang, reported and killed.
const crashHang = 2 * time.Minute

// crashHarness runs the child and records what the invariants found.
type crashHarness struct {
	t    *testing.T
	exe  []string // the splitzip command: a binary and the arguments before splitzip's
	wrap []string // a command the child runs under (a resource limit), or none
	rng  *rand.Rand
	seed uint64
}

func newCrashHarness(t *testing.T) *crashHarness {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("finding the test binary to run as splitzip: %v", err)
	}
	argv := []string{exe, "-test.run=^TestCrashChild$"}
	if crashRaceDetector {
		argv = []string{crashBuild(t)}
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(crashSeedEnv); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q is not a number", crashSeedEnv, s)
		}
	}
	t.Logf("kill delays seeded with %d (replay with %s=%d)", seed, crashSeedEnv, seed)
	return &crashHarness{t: t, exe: argv, rng: rand.New(rand.NewPCG(seed, 0x5eed)), seed: seed}
}

// crashBuild builds splitzip without the race detector and returns its
// path.
func crashBuild(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go") // go test puts its own first on PATH
	if err != nil {
		t.Fatalf("the crash harness builds splitzip and needs the go command: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "splitzip")
	start := time.Now()
	if out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building splitzip: %v\n%s", err, out)
	}
	t.Logf("built splitzip without the race detector in %v", time.Since(start).Round(time.Millisecond))
	return bin
}

// command returns the child process for a splitzip command line.
func (h *crashHarness) command(args ...string) *exec.Cmd {
	argv := append(append([]string{}, h.wrap...), h.exe...)
	if len(h.exe) == 1 {
		argv = append(argv, args...) // a splitzip binary
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	if len(h.exe) > 1 {
		b, _ := json.Marshal(args)
		cmd.Env = append(os.Environ(), crashChildEnv+"="+string(b))
	}
	return cmd
}

// run runs a splitzip command line to its end.
func (h *crashHarness) run(args ...string) crashResult {
	return h.runKill(-1, args...)
}

// runKill runs a splitzip command line and sends it SIGKILL after delay
// (never, when delay < 0), unless it exited before.
func (h *crashHarness) runKill(delay time.Duration, args ...string) crashResult {
	h.t.Helper()
	cmd := h.command(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Start(); err != nil {
		h.t.Fatalf("starting splitzip %v: %v", args, err)
	}
	var mu sync.Mutex
	exited, killed, hung := false, false, false
	after := delay
	if delay < 0 {
		after = crashHang
	}
	timer := time.AfterFunc(after, func() {
		mu.Lock()
		defer mu.Unlock()
		if exited {
			return
		}
		if delay >= 0 {
			killed = cmd.Process.Signal(syscall.SIGKILL) == nil
			return
		}
		// A hang: SIGQUIT makes Go print every goroutine's stack, to say
		// where; SIGKILL follows in case it does not end.
		hung = cmd.Process.Signal(syscall.SIGQUIT) == nil
		time.AfterFunc(5*time.Second, func() { cmd.Process.Signal(syscall.SIGKILL) })
	})
	defer timer.Stop()
	err := cmd.Wait()
	mu.Lock()
	exited = true
	mu.Unlock()
	r := crashResult{args: args, stdout: out.String(), stderr: errb.String(), wall: time.Since(start)}
	r.code = cmd.ProcessState.ExitCode()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		h.t.Fatalf("running splitzip %v: %v", args, err)
	}
	if hung {
		h.t.Errorf("splitzip %v hung: stopped after %v; its goroutines:\n%s", args, crashHang, r.stderr)
		r.stderr = "(hung)"
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		r.killed = killed && ws.Signal() == syscall.SIGKILL
		switch {
		case hung:
		case !r.killed:
			h.t.Errorf("splitzip %v died of %v, not of the harness's kill:\n%s", args, ws.Signal(), r.stderr)
		}
	}
	return r
}

// must runs a command line that has to succeed.
func (h *crashHarness) must(args ...string) crashResult {
	h.t.Helper()
	r := h.run(args...)
	if r.code != 0 {
		h.t.Fatalf("%v", r)
	}
	return r
}

// delays returns n kill delays spread over [0, 1.2*full): one in each of
// n equal slots, at a seeded random place in it, so every phase of the
// command is hit and the run can be replayed.
func (h *crashHarness) delays(n int, full time.Duration) []time.Duration {
	d := make([]time.Duration, n)
	span := float64(full) * 1.2
	for i := range d {
		d[i] = time.Duration(span * (float64(i) + h.rng.Float64()) / float64(n))
	}
	return d
}

// kills returns how many kills a command gets: fewer with -short.
func crashKills(t *testing.T, full, short int) int {
	if s := os.Getenv(crashKillsEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q is not a positive number", crashKillsEnv, s)
		}
		return n
	}
	if testing.Short() {
		return short
	}
	return full
}

// crashGoInternals are fragments a message for a user never shows: traces,
// Go type and package names.
var crashGoInternals = []string{"goroutine ", "panic:", "runtime error", "runtime.", ".go:", "strconv.", "syscall.", "*fs.", "*os.", "*errors.", "0x"}

// unclear says why a failed run's message is not a clear error, or "".
func crashUnclear(r crashResult) string {
	msg := strings.TrimSpace(r.stderr)
	switch {
	case r.killed:
		return "" // a killed run says nothing
	case r.code == 0:
		return "it exited 0"
	case r.code == exitUsage:
		return "exit 2 (a usage error, or a Go crash)"
	case r.code == 70:
		return "exit 70 (an internal error)"
	case msg == "":
		return "no message on stderr"
	}
	for _, s := range crashGoInternals {
		if strings.Contains(msg, s) {
			return fmt.Sprintf("its message shows Go internals (%q)", s)
		}
	}
	return ""
}

// checkMessage records a failed run whose message is not clear as kind
// ("... without a clear error (why)"), and, as a finding of its own, one
// that names a raw system call. It reports whether the message is clear.
func (f *crashFindings) checkMessage(kind, detail string, r crashResult) bool {
	if why := crashUnclear(r); why != "" {
		f.add(kind+" without a clear error ("+why+")", detail+"; "+r.String())
		return false
	}
	if m := crashRawOp.FindString(r.stderr); m != "" && !r.killed {
		f.add(fmt.Sprintf("%s with a message that names a raw system call (%q) where a sentence fits", kind, strings.TrimLeft(m, ": ")), detail+"; "+r.String())
	}
	return true
}

// crashRawOp finds the operation names Go's *fs.PathError and
// *os.LinkError put before a path ("open /x: ..."), which a message for a
// user replaces with a sentence.
var crashRawOp = regexp.MustCompile(`(^|: )(open|stat|lstat|fstat|read|write|mkdir|rename|remove|unlinkat|createtemp|sync|fsync|readdirent|mmap|flock|truncate|seek|close) /`)

// crashSource is a source directory and a pristine copy of its files that
// no command touches, to compare restored bytes with.
type crashSource struct {
	dir      string
	pristine map[string][]byte // name -> bytes
}

func crashReadTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		files[rel] = b
		return nil
	})
	if err != nil {
		t.Fatalf("reading %s: %v", dir, err)
	}
	return files
}

// crashDiffTree says how the files of dir differ from want, or "".
func crashDiffTree(t *testing.T, dir string, want map[string][]byte) string {
	t.Helper()
	got := crashReadTree(t, dir)
	var d []string
	for n, b := range want {
		g, ok := got[n]
		switch {
		case !ok:
			d = append(d, n+" missing")
		case !bytes.Equal(g, b):
			d = append(d, fmt.Sprintf("%s has wrong bytes (%d, want %d)", n, len(g), len(b)))
		}
	}
	for n := range got {
		if _, ok := want[n]; !ok {
			d = append(d, n+" is extra")
		}
	}
	sort.Strings(d)
	return strings.Join(d, "; ")
}

// crashCopyTree copies the files of from into to, with their modification
// times, leaving out a cache's lock file.
func crashCopyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if d.Name() == "lock" {
			return nil // a cache's lock file: a fresh one is made
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return err
		}
		// As mv and cp -p keep it: a moved source is not a changed one.
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.Chtimes(dst, info.ModTime(), info.ModTime())
	})
	if err != nil {
		t.Fatalf("copying %s: %v", from, err)
	}
}

// crashFindings collects invariant violations of one command's kills, the
// first example of each kind in full, so a run with many kills stays
// readable.
type crashFindings struct {
	t     *testing.T
	first map[string]string
	count map[string]int
	order []string
}

func newCrashFindings(t *testing.T) *crashFindings {
	return &crashFindings{t: t, first: map[string]string{}, count: map[string]int{}}
}

// add records a violation of kind; detail says how to see it again.
func (f *crashFindings) add(kind, detail string) {
	if f.count[kind] == 0 {
		f.first[kind] = detail
		f.order = append(f.order, kind)
	}
	f.count[kind]++
}

// report fails the test with each kind of violation, its count out of
// runs, and its first example.
func (f *crashFindings) report(runs int) {
	for _, k := range f.order {
		f.t.Errorf("%s: in %d of %d runs; first: %s", k, f.count[k], runs, f.first[k])
	}
}

// strays lists the files of a cache that are neither its marker, index
// or lock file nor an object a source of its index uses (directly or as a
// member of a pack), and the objects of the index no source uses: what
// gc must leave none of.
func crashStrays(t *testing.T, cache string) []string {
	t.Helper()
	used := map[string]bool{} // paths of object files in use
	var garbage []string
	if c, err := shardcache.Open(cache); err == nil {
		c.Close() // the index is all this reads: the next gc must not find a reader
		ix := c.Index()
		refs := map[shardcache.Key]bool{}
		for _, s := range ix.Sources {
			if s.Index != nil {
				refs[s.Index.Key] = true
			}
			for _, sh := range s.Shards {
				refs[sh.Header.Key] = true
				for _, g := range sh.Gaps {
					refs[g.Key] = true
				}
				for i := range sh.Tensors {
					if sh.Tensors[i].InCache() {
						refs[sh.Tensors[i].Key] = true
					}
				}
			}
		}
		path := func(k shardcache.Key) string {
			h := strings.TrimPrefix(string(k), shardcache.KeyPrefix)
			return filepath.Join(cache, "objects", h[:min(2, len(h))], h)
		}
		for k, o := range ix.Objects {
			switch {
			case o.Kind == shardcache.KindPack:
			case !refs[k]:
				garbage = append(garbage, "index entry of an unused object "+string(k))
			case o.Pack != "":
				used[path(o.Pack)] = true
			default:
				used[path(k)] = true
			}
		}
		for k, o := range ix.Objects {
			if o.Kind == shardcache.KindPack && !used[path(k)] {
				garbage = append(garbage, "index entry of a pack no used object is in "+string(k))
			}
		}
	} else if _, serr := os.Stat(filepath.Join(cache, shardcache.IndexName)); serr == nil {
		t.Logf("strays: %v", err) // a damaged index: every object is a stray
	}
	known := map[string]bool{shardcache.MarkerName: true, shardcache.IndexName: true, shardcache.BackupName: true, "lock": true, shardcache.ReadersName: true, shardcache.PinsDir: true, "objects": true, "tmp": true}
	var out []string
	err := filepath.WalkDir(cache, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(cache, p)
		top := strings.Split(rel, string(filepath.Separator))[0]
		switch {
		case p == cache:
		case !known[top]:
			out = append(out, rel)
		case d.IsDir():
		case top == "objects" && !used[p], top == "tmp":
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("listing %s: %v", cache, err)
	}
	sort.Strings(out)
	return append(out, garbage...)
}
