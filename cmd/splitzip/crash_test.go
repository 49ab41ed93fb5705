package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/splitzip/splitzip/shardcache"
)

// TestCrashChild is the splitzip process of the crash harness: when the
// harness starts this test binary with its command line in
// SPLITZIP_CRASH_CHILD_ARGS, it runs that command line and exits with its
// code. Run any other way it has nothing to do.
func TestCrashChild(t *testing.T) {
	s := os.Getenv(crashChildEnv)
	if s == "" {
		return
	}
	var args []string
	if err := json.Unmarshal([]byte(s), &args); err != nil {
		fmt.Fprintf(os.Stderr, "crash crashHarness: bad %s: %v\n", crashChildEnv, err)
		os.Exit(99)
	}
	os.Exit(run(args, os.Stdout, os.Stderr))
}

// crashFixture is what every crash scenario starts from: two checkpoints
// that share one shard (so they share objects), and caches holding A, and
// A and B, committed by uninterrupted runs.
type crashFixture struct {
	dir          string
	a, b         crashSource
	cacheA       string
	cacheAB      string
	checkpoints  map[string]crashSource // by recorded root
	compressFull time.Duration          // an uninterrupted compress of A into an empty cache
}

// TestCrash kills compress, decompress, gc and relocate with SIGKILL at
// seeded random points spread over each command's run, runs them against
// a full disk, and checks what they leave: verify accepts the cache and it
// restores the right bytes, or rejects it with a clear message (never
// accepts wrong bytes); a checkpoint committed before is never lost; the
// next gc leaves no stray files; a killed decompress leaves nothing, the
// whole output, or leftovers the next decompress cleans; a killed relocate
// leaves the old root or the new one.
func TestCrash(t *testing.T) {
	h := newCrashHarness(t)
	fx := newCrashFixture(t, h)
	// In parallel: the children wait on the disk much of the time, and a
	// kill lands at a random point of the run whatever the load.
	for _, c := range []struct {
		name string
		run  func(*testing.T, *crashHarness, *crashFixture)
	}{{"Compress", crashCompress}, {"Decompress", crashDecompress}, {"GC", crashGC}, {"Relocate", crashRelocate}, {"FullDisk", crashFullDisk}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, h.sub(t), fx)
		})
	}
}

func newCrashFixture(t *testing.T, h *crashHarness) *crashFixture {
	t.Helper()
	dir := t.TempDir()
	if d, err := filepath.EvalSymlinks(dir); err == nil {
		dir = d // the cache records resolved roots
	}
	fx := &crashFixture{dir: dir, checkpoints: map[string]crashSource{}}
	a, b := filepath.Join(dir, "A"), filepath.Join(dir, "B")
	h.must("gen", a, "--size", "4MiB", "--shards", "2", "--seed", "1")
	h.must("gen", b, "--size", "4MiB", "--shards", "2", "--seed", "2")
	// B shares A's first shard: its objects are used by both sources.
	shard := "model-00001-of-00002.safetensors"
	bytesA, err := os.ReadFile(filepath.Join(a, shard))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b, shard), bytesA, 0o644); err != nil {
		t.Fatal(err)
	}
	fx.a = crashSource{dir: a, pristine: crashReadTree(t, a)}
	fx.b = crashSource{dir: b, pristine: crashReadTree(t, b)}
	fx.checkpoints[a], fx.checkpoints[b] = fx.a, fx.b
	fx.cacheA, fx.cacheAB = filepath.Join(dir, "cacheA"), filepath.Join(dir, "cacheAB")
	h.must("compress", a, "-o", fx.cacheA, "-q")
	crashCopyTree(t, fx.cacheA, fx.cacheAB)
	h.must("compress", b, "-o", fx.cacheAB, "-q")
	for _, c := range []string{fx.cacheA, fx.cacheAB} {
		if s := crashStrays(t, c); len(s) > 0 {
			t.Fatalf("%s has strays after uninterrupted runs: %v", c, s)
		}
	}
	return fx
}

// sub returns the harness for a subtest: its failures, and kill delays
// of its own drawn from the seed and its name, so parallel subtests replay
// the same delays.
func (h *crashHarness) sub(t *testing.T) *crashHarness {
	c := *h
	c.t = t
	name := fnv.New64a()
	name.Write([]byte(t.Name()))
	c.rng = rand.New(rand.NewPCG(h.seed, name.Sum64()))
	return &c
}

// checkCache runs verify on cache and, when it accepts the cache, restores
// every recorded source and compares it with its pristine copy. It
// returns whether verify accepted the cache.
func (h *crashHarness) checkCache(f *crashFindings, cache string, cps map[string]crashSource, detail string) bool {
	h.t.Helper()
	if _, err := os.Stat(cache); errors.Is(err, fs.ErrNotExist) {
		return false // killed before it made the cache: nothing to check
	}
	r := h.run("verify", cache, "-q")
	if r.code != 0 {
		f.checkMessage("verify rejects the cache", detail, r)
		return false
	}
	if !strings.Contains(r.stdout, "verify ok") {
		f.add("verify exits 0 without saying ok", detail+"; "+r.String())
	}
	c, err := shardcache.Open(cache)
	if err != nil {
		f.add("verify accepts a cache the library cannot open", fmt.Sprintf("%s; %v", detail, err))
		return true
	}
	c.Close() // its index is all this reads
	for _, s := range c.Index().Sources {
		cp, ok := cps[s.Root]
		if !ok {
			f.add("verify accepts a cache that records a source nobody compressed", detail+"; root "+s.Root)
			continue
		}
		out := filepath.Join(h.t.TempDir(), "restored")
		d := h.run("decompress", cache, "--source", s.Root, "-o", out, "-q")
		switch {
		case d.code != 0:
			f.add("verify accepts a cache decompress cannot restore", detail+"; "+d.String())
		default:
			if diff := crashDiffTree(h.t, out, cp.pristine); diff != "" {
				f.add("verify accepts a cache that restores wrong bytes", detail+"; source "+s.Root+": "+diff)
			}
		}
		os.RemoveAll(out)
	}
	return true
}

// gcClean runs gc to its end on cache and reports what it leaves that it
// should not.
func (h *crashHarness) gcClean(f *crashFindings, cache, detail string) {
	h.t.Helper()
	if _, err := os.Stat(cache); errors.Is(err, fs.ErrNotExist) {
		return // killed before it made the cache: nothing to collect
	}
	g := h.run("gc", cache, "-q")
	if _, err := os.Stat(filepath.Join(cache, shardcache.IndexName)); errors.Is(err, fs.ErrNotExist) {
		// Never committed: gc removes temporary files only, and refuses
		// (exit 3) where object files are there.
		left := crashStrays(h.t, cache)
		objects := "objects" + string(filepath.Separator) // crashStrays's paths are relative
		switch {
		case slices.ContainsFunc(left, func(p string) bool { return strings.HasPrefix(p, objects) }):
			if g.code != 3 || !strings.Contains(g.stderr, "no committed index") {
				f.add("gc does not refuse an uncommitted cache's objects", detail+"; "+g.String())
			}
		case g.code != 0:
			f.add("gc fails on an uncommitted cache without objects", detail+"; "+g.String())
		case len(left) > 0:
			f.add("gc leaves strays", fmt.Sprintf("%s; left %s", detail, strings.Join(left, ", ")))
		}
		return
	}
	if g.code != 0 {
		f.add("gc fails after the interrupted run", detail+"; "+g.String())
		return
	}
	if s := crashStrays(h.t, cache); len(s) > 0 {
		f.add("gc leaves strays", fmt.Sprintf("%s; left %s", detail, strings.Join(s, ", ")))
	}
}

// verifies reports whether verify accepts one source of cache (all of
// them with root "").
func (h *crashHarness) verifies(cache, root string) (bool, crashResult) {
	args := []string{"verify", cache, "-q"}
	if root != "" {
		args = append(args, "--source", root)
	}
	r := h.run(args...)
	return r.code == 0, r
}

// crashCompress kills compress into an empty cache and into a cache that
// holds A already, each with and without --no-sync: four variants, each
// timed by an uninterrupted run and killed at delays spread over its time.
func crashCompress(t *testing.T, h *crashHarness, fx *crashFixture) {
	type variant struct {
		into   string
		src    string
		noSync bool
		full   time.Duration
		delays []time.Duration
	}
	vs := []*variant{{into: "an empty cache", src: fx.a.dir, noSync: true}, {into: "a cache holding A", src: fx.b.dir, noSync: true},
		{into: "an empty cache", src: fx.a.dir}, {into: "a cache holding A", src: fx.b.dir}}
	prepare := func(v *variant) (cache string, args []string) {
		cache = filepath.Join(t.TempDir(), "cache")
		if v.src == fx.b.dir {
			crashCopyTree(t, fx.cacheA, cache)
		}
		args = []string{"compress", v.src, "-o", cache, "-q"}
		if v.noSync {
			args = append(args, "--no-sync")
		}
		return cache, args
	}
	n := crashKills(t, 20, 6)
	for _, v := range vs {
		_, args := prepare(v)
		v.full = h.must(args...).wall
		v.delays = h.delays((n+len(vs)-1)/len(vs), v.full)
		t.Logf("compress into %s (no-sync %v) takes %v uninterrupted", v.into, v.noSync, v.full.Round(time.Millisecond))
	}
	f := newCrashFindings(t)
	finished := 0
	for i := range n {
		v := vs[i%len(vs)]
		delay := v.delays[i/len(vs)]
		cache, args := prepare(v)
		r := h.runKill(delay, args...)
		detail := fmt.Sprintf("run %d: kill after %v of %v: splitzip %s (into %s)", i, delay.Round(time.Millisecond), v.full.Round(time.Millisecond), strings.Join(args, " "), v.into)
		if !r.killed {
			finished++
			if r.code != 0 {
				f.add("compress fails when not killed", detail+"; "+r.String())
			}
		}
		ok := h.checkCache(f, cache, fx.checkpoints, detail)
		if !ok && !r.killed && r.code == 0 {
			f.add("compress exits 0 but verify rejects its cache", detail)
		}
		if v.src == fx.b.dir {
			if okA, vr := h.verifies(cache, fx.a.dir); !okA {
				f.add("a killed compress loses a checkpoint committed before it", detail+"; "+vr.String())
			}
		}
		h.gcClean(f, cache, detail)
		if ok {
			if still, vr := h.verifies(cache, ""); !still {
				f.add("gc after a killed compress breaks a cache that verified", detail+"; "+vr.String())
			}
		}
		// The next compress recovers.
		if c := h.run(args...); c.code != 0 {
			f.add("compress after a killed one fails", detail+"; "+c.String())
		} else if okAll, vr := h.verifies(cache, ""); !okAll {
			f.add("compress after a killed one leaves a cache verify rejects", detail+"; "+vr.String())
		}
	}
	t.Logf("compress: %d kills, %d runs ended before their kill", n, finished)
	f.report(n)
}

// crashDecompress kills decompress of cache A into a new folder; what it
// leaves must be nothing, the whole checkpoint, or leftovers the next
// decompress into that folder cleans.
func crashDecompress(t *testing.T, h *crashHarness, fx *crashFixture) {
	out0 := filepath.Join(t.TempDir(), "full")
	full := h.must("decompress", fx.cacheA, "-o", out0, "-q").wall
	n := crashKills(t, 20, 6)
	f := newCrashFindings(t)
	finished := 0
	for i, delay := range h.delays(n, full) {
		out := filepath.Join(t.TempDir(), "out")
		args := []string{"decompress", fx.cacheA, "-o", out, "-q"}
		r := h.runKill(delay, args...)
		detail := fmt.Sprintf("run %d: kill after %v of %v: splitzip %s", i, delay.Round(time.Millisecond), full.Round(time.Millisecond), strings.Join(args, " "))
		if !r.killed {
			finished++
			if r.code != 0 {
				f.add("decompress fails when not killed", detail+"; "+r.String())
			}
		}
		_, err := os.Stat(out)
		absent := errors.Is(err, fs.ErrNotExist)
		diff := ""
		if !absent {
			diff = crashDiffTree(t, out, fx.a.pristine)
		}
		if !r.killed && r.code == 0 && diff != "" {
			f.add("decompress exits 0 with wrong output", detail+"; "+diff)
		}
		if absent || diff == "" {
			continue
		}
		// Leftovers: the next run must clean them and restore everything.
		left := strings.Join(crashNames(crashReadTree(t, out)), ", ")
		if d := h.run(args...); d.code != 0 {
			f.add("decompress after a killed one fails", fmt.Sprintf("%s; the kill left %s; %v", detail, left, d))
		} else if diff := crashDiffTree(t, out, fx.a.pristine); diff != "" {
			f.add("decompress after a killed one leaves leftovers or wrong bytes", fmt.Sprintf("%s; the kill left %s; after the next run: %s", detail, left, diff))
		}
	}
	if ok, v := h.verifies(fx.cacheA, ""); !ok {
		f.add("killed decompresses damage the cache", v.String())
	}
	t.Logf("decompress: %d kills, %d runs ended before their kill", n, finished)
	f.report(n)
}

// names lists the names of a tree read by crashReadTree.
func crashNames(files map[string][]byte) []string {
	var n []string
	for k := range files {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// crashGC kills gc --forget B on a cache holding A and B (which share
// objects, some in shared packs): A must still verify, B must verify or be
// gone, and the next gc must leave no strays.
func crashGC(t *testing.T, h *crashHarness, fx *crashFixture) {
	full := crashTime(func() time.Duration {
		c0 := filepath.Join(t.TempDir(), "timed")
		crashCopyTree(t, fx.cacheAB, c0)
		return h.must("gc", c0, "--forget", fx.b.dir, "-q").wall
	})
	n := crashKills(t, 20, 6)
	f := newCrashFindings(t)
	finished := 0
	for i, delay := range h.delays(n, full) {
		cache := filepath.Join(t.TempDir(), "cache")
		crashCopyTree(t, fx.cacheAB, cache)
		args := []string{"gc", cache, "--forget", fx.b.dir, "-q"}
		r := h.runKill(delay, args...)
		detail := fmt.Sprintf("run %d: kill after %v of %v: splitzip %s", i, delay.Round(time.Millisecond), full.Round(time.Millisecond), strings.Join(args, " "))
		if !r.killed {
			finished++
			if r.code != 0 {
				f.add("gc fails when not killed", detail+"; "+r.String())
			}
		}
		if !h.checkCache(f, cache, fx.checkpoints, detail) {
			v := h.run("verify", cache, "-q")
			f.add("a killed gc leaves a cache verify rejects", detail+"; "+v.String())
		}
		h.gcClean(f, cache, detail)
		if ok, v := h.verifies(cache, fx.a.dir); !ok {
			f.add("gc after a killed gc loses checkpoint A", detail+"; "+v.String())
		}
	}
	t.Logf("gc: %d kills, %d runs ended before their kill", n, finished)
	f.report(n)
}

// crashTime returns the shortest of three timed runs: the first runs with
// a cold page cache, and a loaded machine stretches some.
func crashTime(run func() time.Duration) time.Duration {
	best := run()
	for range 2 {
		best = min(best, run())
	}
	return best
}

// crashRelocate kills relocate of cache A to a copy of A: the index must
// record the old root or the new one, and verify must accept it.
func crashRelocate(t *testing.T, h *crashHarness, fx *crashFixture) {
	moved := filepath.Join(fx.dir, "A-moved")
	crashCopyTree(t, fx.a.dir, moved)
	cps := map[string]crashSource{fx.a.dir: fx.a, moved: fx.a}
	full := crashTime(func() time.Duration {
		c0 := filepath.Join(t.TempDir(), "timed")
		crashCopyTree(t, fx.cacheA, c0)
		return h.must("relocate", c0, moved, "-q").wall
	})
	n := crashKills(t, 20, 6)
	f := newCrashFindings(t)
	finished := 0
	for i, delay := range h.delays(n, full) {
		cache := filepath.Join(t.TempDir(), "cache")
		crashCopyTree(t, fx.cacheA, cache)
		args := []string{"relocate", cache, moved, "-q"}
		r := h.runKill(delay, args...)
		detail := fmt.Sprintf("run %d: kill after %v of %v: splitzip %s", i, delay.Round(time.Millisecond), full.Round(time.Millisecond), strings.Join(args, " "))
		if !r.killed {
			finished++
			if r.code != 0 {
				f.add("relocate fails when not killed", detail+"; "+r.String())
			}
		}
		c, err := shardcache.Open(cache)
		if err != nil {
			f.add("a killed relocate leaves a cache that cannot be opened", fmt.Sprintf("%s; %v", detail, err))
			continue
		}
		c.Close() // its index is all this reads
		if srcs := c.Index().Sources; len(srcs) != 1 || (srcs[0].Root != fx.a.dir && srcs[0].Root != moved) {
			f.add("a killed relocate records neither the old root nor the new one", fmt.Sprintf("%s; %d sources", detail, len(srcs)))
		}
		if !h.checkCache(f, cache, cps, detail) {
			v := h.run("verify", cache, "-q")
			f.add("a killed relocate leaves a cache verify rejects", detail+"; "+v.String())
		}
		h.gcClean(f, cache, detail)
	}
	t.Logf("relocate: %d kills, %d runs ended before their kill", n, finished)
	f.report(n)
}

// crashDiskSize is the size of the small filesystem of the full-disk runs.
const crashDiskSize = 8 << 20

// crashMount mounts a crashDiskSize tmpfs on a new folder, unmounted at
// the end of the test, or says why it cannot.
func crashMount(t *testing.T) (string, error) {
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+strconv.Itoa(crashDiskSize), "tmpfs", dir).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("unmounting %s: %v: %s", dir, err, out)
		}
	})
	return dir, nil
}

// fill writes a file of n zero bytes (as many as fit).
func crashFill(t *testing.T, path string, n int) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for n > 0 {
		k := min(n, len(buf))
		if _, err := f.Write(buf[:k]); err != nil {
			return // the disk is full: what we wanted
		}
		n -= k
	}
}

// crashSaysFull reports whether a message says the disk or a file size limit
// was reached.
func crashSaysFull(msg string) bool {
	m := strings.ToLower(msg)
	for _, s := range []string{"no space", "disk full", "disk is full", "too large", "file size limit", "quota"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// crashFullDisk runs compress (into an empty cache and into one holding
// A) and decompress out of space: on a small tmpfs filled to several
// levels where mounting works, and under several file size limits
// (RLIMIT_FSIZE: writes fail with EFBIG) always. Each failed run must say
// why, leave no cache verify accepts with wrong bytes, lose no checkpoint
// committed before, and leave no strays after the next gc.
func crashFullDisk(t *testing.T, h *crashHarness, fx *crashFixture) {
	f := newCrashFindings(t)
	runs := 0
	// space returns where the cache and output of a run go and prepares the
	// limit of level lv; undo lifts it.
	type limit struct {
		name  string
		setup func(lv int) (dir string, undo func())
	}
	var limits []limit
	if disk, err := crashMount(t); err != nil {
		t.Logf("full disk: cannot mount a small tmpfs (%v); using file size limits only", err)
	} else {
		t.Logf("full disk: a %d MiB tmpfs at %s, filled to several levels", crashDiskSize>>20, disk)
		limits = append(limits, limit{"tmpfs", func(free int) (string, func()) {
			work := filepath.Join(disk, "work")
			os.RemoveAll(work)
			os.RemoveAll(filepath.Join(disk, "filler"))
			if err := os.Mkdir(work, 0o755); err != nil {
				t.Fatal(err)
			}
			return work, func() { os.RemoveAll(filepath.Join(disk, "filler")) }
		}})
	}
	limits = append(limits, limit{"rlimit", func(int) (string, func()) { return t.TempDir(), func() {} }})
	for _, lm := range limits {
		levels := []int{0, 16 << 10, 256 << 10, 1 << 20, 2 << 20, 3 << 20}
		if lm.name == "rlimit" {
			levels = []int{4 << 10, 64 << 10, 256 << 10, 1 << 20}
		}
		if testing.Short() {
			levels = []int{levels[0], levels[len(levels)/2], levels[len(levels)-1]}
		}
		if lm.name == "rlimit" {
			t.Logf("full disk: file size limits (ulimit -f) of %v bytes", levels)
		}
		for _, lv := range levels {
			for _, into := range []string{"empty", "holding A", "decompress"} {
				runs++
				work, undo := lm.setup(lv)
				cache := filepath.Join(work, "cache")
				args := []string{"compress", fx.a.dir, "-o", cache, "-q"}
				switch into {
				case "holding A":
					crashCopyTree(t, fx.cacheA, cache)
					args[1] = fx.b.dir
				case "decompress":
					args = []string{"decompress", fx.cacheA, "-o", filepath.Join(work, "out"), "-q"}
				}
				hh := *h
				if lm.name == "tmpfs" {
					used := 0
					if into == "holding A" {
						used = crashTreeSize(t, cache)
					}
					crashFill(t, filepath.Join(filepath.Dir(work), "filler"), crashDiskSize-lv-used)
				} else {
					hh.wrap = []string{"sh", "-c", `ulimit -f "$0" && exec "$@"`, strconv.Itoa(max(1, lv/512))}
				}
				r := hh.run(args...)
				detail := fmt.Sprintf("%s, %d bytes: splitzip %s", lm.name, lv, strings.Join(args, " "))
				if r.code == 0 {
					t.Logf("%s: it fit", detail)
				} else {
					if f.checkMessage("a full disk fails", detail, r) && !crashSaysFull(r.stderr) {
						f.add("a full disk fails without saying the disk is full", detail+"; "+r.String())
					}
				}
				undo()
				if into == "decompress" {
					out := filepath.Join(work, "out")
					if _, err := os.Stat(out); r.code != 0 && err == nil {
						if left := crashNames(crashReadTree(t, out)); len(left) > 0 {
							f.add("a decompress that fails on a full disk leaves files", fmt.Sprintf("%s; left %v", detail, left))
						} else {
							f.add("a decompress that fails on a full disk leaves an empty folder", detail)
						}
					} else if r.code == 0 {
						if diff := crashDiffTree(t, out, fx.a.pristine); diff != "" {
							f.add("decompress exits 0 with wrong output", detail+"; "+diff)
						}
					}
					continue
				}
				ok := h.checkCache(f, cache, fx.checkpoints, detail)
				if r.code == 0 && !ok {
					f.add("compress exits 0 on a nearly full disk but verify rejects its cache", detail)
				}
				if into == "holding A" {
					if okA, v := h.verifies(cache, fx.a.dir); !okA {
						f.add("a full disk loses a checkpoint committed before", detail+"; "+v.String())
					}
				}
				h.gcClean(f, cache, detail)
				if c := h.run(args...); c.code != 0 {
					f.add("compress once there is space again fails", detail+"; "+c.String())
				}
			}
		}
	}
	f.report(runs)
}

// crashTreeSize returns the bytes of the files under dir.
func crashTreeSize(t *testing.T, dir string) int {
	n := 0
	for _, b := range crashReadTree(t, dir) {
		n += len(b)
	}
	return n
}
