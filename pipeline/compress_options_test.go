package pipeline

import (
	"context"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"

	"github.com/splitzip/splitzip/shardcache"
)

// TestCompressRejectsBadOptions: options out of range (negative, NaN,
// infinite, too small, unknown) are refused as ErrOption before anything
// is read or written: no cache folder appears.
func TestCompressRejectsBadOptions(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "ck")
	gen(t, src, 1<<20, 1, 3)
	for _, c := range []struct {
		name string
		opts CompressOptions
	}{
		{"no output", CompressOptions{}},
		{"negative jobs", CompressOptions{Jobs: -1}},
		{"NaN min-saving", CompressOptions{MinSaving: math.NaN()}},
		{"infinite min-saving", CompressOptions{MinSaving: math.Inf(1)}},
		{"minus infinite min-saving", CompressOptions{MinSaving: math.Inf(-1)}},
		{"negative min-saving", CompressOptions{MinSaving: -0.1}},
		{"min-saving of 1", CompressOptions{MinSaving: 1}},
		{"pack-max too large", CompressOptions{PackMax: shardcache.MaxPackMax + 1}},
		{"memory below the minimum", CompressOptions{Memory: MinMemory - 1}},
		{"unknown codec", CompressOptions{Codec: "zip"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(dir, "cache-"+c.name)
			if c.name != "no output" {
				c.opts.Output = out
			}
			c.opts.NoSync = true
			_, err := Compress(context.Background(), src, c.opts)
			if !errors.Is(err, ErrOption) {
				t.Errorf("error %v, want ErrOption", err)
			}
			if _, err := os.Lstat(out); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the refused run left %s (%v)", out, err)
			}
		})
	}
}

// progressPhase is one phase a countingProgress saw.
type progressPhase struct {
	label        string
	total, added uint64
	finished     bool
}

// countingProgress records each phase's total and the sum of its Adds.
type countingProgress struct {
	mu     sync.Mutex
	phases []progressPhase
	// goroutines is the most goroutines seen running at an Add.
	goroutines int
}

func (p *countingProgress) Start(label string, total uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.phases = append(p.phases, progressPhase{label: label, total: total})
}

func (p *countingProgress) Add(n uint64) {
	g := runtime.NumGoroutine()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.phases[len(p.phases)-1].added += n
	p.goroutines = max(p.goroutines, g)
}

func (p *countingProgress) Finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.phases[len(p.phases)-1].finished = true
}

// TestCompressJobsWithinBudget: a huge job count under a small memory
// budget starts no more jobs than the budget admits at once (and no more
// than there are tensors), and reports how many it ran.
func TestCompressJobsWithinBudget(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "ck")
	gen(t, src, 2<<20, 2, 5)
	for _, c := range []struct {
		jobs    int
		memory  uint64
		maxJobs int
	}{
		{100_000, MinMemory, (MinMemory - runBytes) / compressCost},
		{100_000, 0, (DefaultMemory - runBytes) / compressCost},
		{1, MinMemory, 1},
		{0, 0, runtime.GOMAXPROCS(0)},
	} {
		p := &countingProgress{}
		before := runtime.NumGoroutine()
		res, err := Compress(context.Background(), src, CompressOptions{Output: filepath.Join(dir, "cache"), Jobs: c.jobs,
			Memory: c.memory, MinSaving: DefaultMinSaving, NoSync: true, Progress: p})
		if err != nil {
			t.Fatal(err)
		}
		if res.Jobs < 1 || res.Jobs > c.maxJobs || res.Jobs > res.Totals.Tensors {
			t.Errorf("--jobs %d --memory %d: %d jobs, want 1 to min(%d, %d tensors)", c.jobs, c.memory, res.Jobs, c.maxJobs, res.Totals.Tensors)
		}
		// The jobs, the hasher's helpers they start, and a few of the
		// runtime's: never one a requested job.
		if limit := before + 4*res.Jobs + 32; p.goroutines > limit {
			t.Errorf("--jobs %d --memory %d: %d goroutines running, want at most %d", c.jobs, c.memory, p.goroutines, limit)
		}
	}
}

// TestCompressFailureLeavesNoNewFolder: a run that fails after creating
// the cache folder removes it; a folder that was there before, empty or a
// cache, stays.
func TestCompressFailureLeavesNoNewFolder(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "ck")
	gen(t, src, 1<<20, 2, 8)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	fresh := filepath.Join(dir, "fresh")
	if _, err := Compress(canceled, src, CompressOptions{Output: fresh, NoSync: true}); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled compress: %v", err)
	}
	if _, err := os.Lstat(fresh); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a failed compress left its new folder %s (%v)", fresh, err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Compress(canceled, src, CompressOptions{Output: empty, NoSync: true}); err == nil {
		t.Fatal("canceled compress succeeded")
	}
	if _, err := os.Stat(empty); err != nil {
		t.Errorf("a failed compress removed the folder that was there before: %v", err)
	}
	cache := filepath.Join(dir, "cache")
	compress(t, src, cache, false)
	if _, err := Compress(canceled, src, CompressOptions{Output: cache, NoSync: true}); err == nil {
		t.Fatal("canceled compress succeeded")
	}
	if v := mustVerify(t, cache); !v.OK() {
		t.Errorf("the cache a failed compress added to: %+v", v.Problems)
	}
}

// TestCompressProgressSums: the bytes a compress adds to its progress sum
// to the total it started with, with every codec, whether tensors become
// payloads, stay raw by dtype or by the gate (before or after a second
// pass), are copied into a self-contained cache or are found stored.
func TestCompressProgressSums(t *testing.T) {
	dir := t.TempDir()
	llama, floats := filepath.Join(dir, "llama"), filepath.Join(dir, "floats")
	gen(t, llama, 2<<20, 2, 9)
	if err := os.Mkdir(floats, 0o755); err != nil {
		t.Fatal(err)
	}
	floatCheckpoint(t, filepath.Join(floats, "model.safetensors"))
	n := 0
	for _, src := range []string{llama, floats} {
		for _, codec := range []string{CodecFixed, CodecEntropy, CodecAuto} {
			for _, minSaving := range []float64{0, DefaultMinSaving, 0.2, 0.9} {
				for _, self := range []bool{false, true} {
					n++
					cache := filepath.Join(dir, "cache", filepath.Base(src), codec)
					if self {
						cache += "-self"
					}
					// The second run into one cache finds every tensor
					// stored.
					for run := range 2 {
						p := &countingProgress{}
						_, err := Compress(context.Background(), src, CompressOptions{Output: cache, Jobs: 2, Codec: codec,
							MinSaving: minSaving, SelfContained: self, NoSync: true, Progress: p})
						if err != nil {
							t.Fatal(err)
						}
						if len(p.phases) == 0 || p.phases[0].label != "compress" || !p.phases[len(p.phases)-1].finished {
							t.Fatalf("phases %+v", p.phases)
						}
						if ph := p.phases[0]; ph.added != ph.total {
							t.Errorf("%s --codec %s --min-saving %g --self-contained=%v, run %d: progress added %d of %d bytes",
								filepath.Base(src), codec, minSaving, self, run+1, ph.added, ph.total)
						}
					}
					os.RemoveAll(cache)
				}
			}
		}
	}
	t.Logf("%d configurations", n)
}

// TestFirstOf: jobs' errors are reported as the first, with how many more
// jobs failed, not counting those the first one's failure stopped.
func TestFirstOf(t *testing.T) {
	full := &TensorError{File: "a.safetensors", Tensor: "w", Err: syscall.ENOSPC}
	stopped := &TensorError{File: "b.safetensors", Tensor: "x", Err: context.Canceled}
	other := &TensorError{File: "b.safetensors", Tensor: "y", Err: syscall.ENOSPC}
	for _, c := range []struct {
		errs []error
		want string
	}{
		{[]error{full}, full.Error()},
		{[]error{full, stopped}, full.Error()},
		{[]error{full, stopped, other}, full.Error() + " (and 1 more tensor failed too)"},
		{[]error{full, other, other}, full.Error() + " (and 2 more tensors failed too)"},
	} {
		err := firstOf(c.errs)
		if err.Error() != c.want || !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("%v: %q, want %q", c.errs, err, c.want)
		}
	}
}
