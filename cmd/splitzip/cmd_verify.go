package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/splitzip/splitzip/gpu"
	"github.com/splitzip/splitzip/internal/failure"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/shardcache"
)

// verifyOptions are the flags of verify.
type verifyOptions struct {
	remoteOptions
	Source string
	Memory string
	Jobs   int
	GPU    bool
	Device int
}

func newVerifyCommand(g *globals) *cobra.Command {
	var o verifyOptions
	cmd := &cobra.Command{
		Use:   "verify CACHE",
		Short: "Check that every tensor round-trips bit for bit against its source",
		Long: `Decode every payload and compare it with the source tensor, check every
object's hash and size, and check that no source shard changed since it was
compressed. Exits 1 when stored data is wrong (a damaged object or
index), 3 when only the source is (changed or missing), with each problem
and its kind in --json.

` + remoteHelp,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			return runVerify(cmd.Context(), g, o, a[0])
		},
	}
	cmd.Flags().IntVarP(&o.Jobs, "jobs", "j", 0, "tensors checked at once (default: number of CPUs; 0 is refused)")
	cmd.Flags().BoolVar(&o.GPU, "gpu", false, "decode every payload on the GPU (in place) instead of the CPU")
	cmd.Flags().IntVar(&o.Device, "device", 0, "GPU ordinal for --gpu")
	cmd.Flags().StringVar(&o.Source, "source", "", "verify one source: its recorded root, or the directory it was moved to")
	addMemoryFlag(cmd.Flags(), &o.Memory)
	atLeast(cmd.Flags(), "jobs", 1, jobsHint)
	atLeast(cmd.Flags(), "device", 0, "")
	o.remoteOptions.addFlags(cmd)
	remoteArg(cmd, 0)
	return cmd
}

func runVerify(ctx context.Context, g *globals, o verifyOptions, dir string) error {
	mem, err := memoryBudget(o.Memory)
	if err != nil {
		return err
	}
	arg := dir
	dir, sources, done, err := o.pull(ctx, g, dir)
	if err != nil {
		return err
	}
	defer done()
	opts := pipeline.VerifyOptions{Source: o.Source, Jobs: o.Jobs, Memory: mem, Progress: g.progress()}
	if o.Source == "" {
		opts.Only = sources // a remote cache's checkpoints, not the rest of --local-cache
	}
	if o.GPU {
		d, closeGPU, err := gpuDecoder(o.Device)
		if err != nil {
			return err
		}
		defer closeGPU()
		opts.Decoder = &lockedDecoder{d: d}
	}
	res, err := pipeline.Verify(ctx, dir, opts)
	if err != nil {
		return err
	}
	if isRemote(arg) && o.LocalCache == "" {
		res.Cache = arg // not the temporary folder, gone when this returns
	}
	for i := range res.Problems {
		if p := &res.Problems[i]; p.Err != nil {
			// The line names the file already.
			p.Error = strings.TrimPrefix(failure.Message(p.Err), p.File+": ")
			p.Kind = failure.KindOf(p.Err).String()
		}
	}
	// The FAIL lines go to stderr with --json too, for the person
	// watching (README; they were missing there, trial 71).
	printProblems(g, res.Problems)
	if g.JSON {
		// A failed verify's one document is its summary, which says, as an
		// error document would, the kind and exit code of the failure.
		doc := struct {
			*pipeline.VerifyResult
			OK       bool   `json:"ok"`
			Kind     string `json:"kind,omitempty"`
			ExitCode int    `json:"exit_code"`
		}{VerifyResult: res, OK: res.OK()}
		if !res.OK() {
			k := problemsKind(res.Problems)
			doc.Kind, doc.ExitCode = k.String(), k.ExitCode()
		}
		if err := printJSON(g.stdout, "verify_summary", doc); err != nil {
			return err
		}
	} else {
		for _, a := range res.Absent {
			if strings.HasSuffix(a, ".safetensors") {
				fmt.Fprintf(g.stderr, "note: %s is absent; its tensors were checked against their content keys\n", a)
			} else {
				fmt.Fprintf(g.stderr, "note: %s is absent; the cache's copy of it was checked against its content key\n", a)
			}
		}
		// Shards whose one problem is a new modification time (their
		// tensors matched): a copy of the same bytes, which relocate
		// records. A shard with changed bytes as well gets no such hint.
		byFile := map[string][]error{}
		for _, p := range res.Problems {
			byFile[p.File] = append(byFile[p.File], p.Err)
		}
		touched := 0
		for _, errs := range byFile {
			if len(errs) == 1 && errors.Is(errs[0], shardcache.ErrSourceTime) {
				touched++
			}
		}
		if slices.ContainsFunc(res.Problems, func(p pipeline.Problem) bool {
			// A source file, not a cache object (nor the cache, gone).
			return errors.Is(p.Err, fs.ErrNotExist) && !errors.Is(p.Err, shardcache.ErrObjectCorrupt) && !errors.Is(p.Err, shardcache.ErrCacheGone)
		}) {
			fmt.Fprintf(g.stderr, "note: %s\n", movedHint(dir))
		}
		if touched > 0 {
			fmt.Fprintf(g.stderr, "note: %s: %s\n", count(touched, "shard"), relocateHint(dir))
		}
		// Damage to a tensor's or region's object, which compress stores
		// anew; not to a pack's padding alone (a problem of the pack's
		// file), which no member's check reads and compress keeps.
		objects, _ := filepath.Abs(filepath.Join(res.Cache, "objects"))
		if slices.ContainsFunc(res.Problems, func(p pipeline.Problem) bool {
			file, _ := filepath.Abs(p.File)
			// ObjectAt: the stored bytes are at fault (a payload whose
			// checksum fails, too).
			return p.ObjectAt != nil || errors.Is(p.Err, shardcache.ErrObjectCorrupt) && !strings.HasPrefix(file, objects+string(filepath.Separator))
		}) {
			fmt.Fprintf(g.stderr, "note: %s\n", mendHint)
		}
		status := "ok"
		if !res.OK() {
			status = fmt.Sprintf("FAILED (%s)", count(len(res.Problems), "problem"))
		}
		where := res.Decoder
		if res.EntropyPayloads > 0 {
			where += fmt.Sprintf("; %d of them entropy payloads", res.EntropyPayloads)
		}
		unchecked := ""
		if res.Unchecked > 0 {
			unchecked = fmt.Sprintf(" (and %d not checked: only in an absent source)", res.Unchecked)
		}
		fmt.Fprintf(g.stdout, "verify %s: %s%s, %s decoded (%s) and compared, %s in %.2fs\n",
			status, count(res.Tensors, "tensor"), unchecked, count(res.Payloads, "payload"), where, human(res.Bytes), res.Duration.Seconds())
	}
	if !res.OK() {
		return failure.Mark(problemsKind(res.Problems), errFailed)
	}
	return nil
}

// shownChanged is how many tensors of a changed source shard verify
// names one by one (--json names them all).
const shownChanged = 3

// printProblems prints a FAIL line a problem, but of the tensors a
// changed source shard fails for that reason (one truncated shard fails
// each tensor past its new end) only the first shownChanged, then how
// many more.
func printProblems(g *globals, ps []pipeline.Problem) {
	changed := map[string]int{}
	for _, p := range ps {
		if p.Tensor != "" && errors.Is(p.Err, shardcache.ErrSourceChanged) {
			changed[p.File]++
			if changed[p.File] > shownChanged {
				continue
			}
		}
		fmt.Fprintln(g.stderr, failLine(p))
	}
	for _, p := range ps { // in the problems' order, once a file
		if n := changed[p.File]; n > shownChanged {
			fmt.Fprintf(g.stderr, "FAIL %s: %s, for the same reason (--json lists every one)\n", p.File, count(n-shownChanged, "more tensor"))
			changed[p.File] = 0
		}
	}
}

// failLine is a problem's FAIL line: its file, tensor and message (the
// Error field, reworded as runVerify does), and the cache object it lies
// in where the message does not name it (a pack member's range always).
func failLine(p pipeline.Problem) string {
	where := ""
	if at := p.ObjectAt; at != nil {
		switch {
		case !strings.Contains(p.Error, at.Path):
			where = " (cache object " + at.Name() + ")"
		case at.Packed:
			where = " (" + shardcache.PackSpan(at.Offset, at.Size) + ")"
		}
	}
	if p.Tensor != "" {
		return fmt.Sprintf("FAIL %s: tensor %q: %s%s", p.File, p.Tensor, p.Error, where)
	}
	return fmt.Sprintf("FAIL %s: %s%s", p.File, p.Error, where)
}

// problemsKind is the kind of failure verify's problems make: integrity
// when any is (or is of no known kind), else the kind they share, such as
// input for a source that is gone or changed; mixed kinds are integrity.
func problemsKind(ps []pipeline.Problem) failure.Kind {
	kind := failure.OK
	for _, p := range ps {
		k := failure.KindOf(p.Err)
		if p.Err == nil || k == failure.Internal || kind != failure.OK && k != kind {
			return failure.Integrity
		}
		kind = k
	}
	if kind == failure.OK {
		return failure.Integrity
	}
	return kind
}

// lockedDecoder serializes a GPU decoder shared by verify's jobs.
type lockedDecoder struct {
	mu sync.Mutex
	d  *gpu.Decoder
}

func (l *lockedDecoder) DecodeStream(r io.ReaderAt, size uint64, buf []byte, fn func(off uint64, b []byte) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.d.DecodeStream(r, size, buf, fn)
}

func (l *lockedDecoder) Name() string { return l.d.Name() }
