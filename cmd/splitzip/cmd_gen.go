package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/spf13/cobra"

	"github.com/splitzip/splitzip/atomicfile"
	"github.com/splitzip/splitzip/internal/synth"
)

// genOptions are the flags of gen.
type genOptions struct {
	Size   string
	Shards int
	Seed   uint64
	Small  int
	Tiny   int
	Mix    int
	MoE    int
	Layers int
	Hidden uint64
	DType  string
	// sizeSet and layersSet say --size and --layers were given.
	sizeSet, layersSet bool
}

func newGenCommand(g *globals) *cobra.Command {
	var o genOptions
	cmd := &cobra.Command{
		Use:    "gen DIR",
		Short:  "Write a synthetic Llama-like checkpoint (BF16 unless --dtype says otherwise; for demos and benchmarks)",
		Hidden: true,
		Args:   args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			o.sizeSet, o.layersSet = cmd.Flags().Changed("size"), cmd.Flags().Changed("layers")
			return runGen(cmd.Context(), g, o, a[0])
		},
	}
	cmd.Flags().StringVar(&o.Size, "size", "64MiB", "approximate checkpoint size")
	cmd.Flags().IntVar(&o.Shards, "shards", 2, "number of shard files")
	cmd.Flags().Uint64Var(&o.Seed, "seed", 1, "random seed")
	cmd.Flags().Uint64Var(&o.Hidden, "hidden", 0, "hidden size, a multiple of 32 from 64 to 65536 (default: chosen from --size; 4096 gives 90 MB MLP tensors)")
	cmd.Flags().IntVar(&o.Small, "small", 0, "write this many small BF16 tensors (1-64 KiB) instead of --size's checkpoint")
	cmd.Flags().IntVar(&o.Tiny, "tiny", 0, "write this many tiny BF16 tensors (32 B to 4 KiB) instead of --size's checkpoint")
	cmd.Flags().IntVar(&o.Mix, "mix", 0, "write this many BF16 tensors with the size mix of real models (60% under 16 KiB, the rest up to 4 MiB) instead")
	cmd.Flags().IntVar(&o.MoE, "moe", 0, "write a mixture of experts with this many experts per layer instead (--layers, --hidden: 48, 2048)")
	cmd.Flags().IntVar(&o.Layers, "layers", 0, "layers of --moe (default 48)")
	for _, n := range []string{"shards", "small", "tiny", "mix", "moe", "layers"} {
		atLeast(cmd.Flags(), n, 1, "")
	}
	atLeast(cmd.Flags(), "hidden", 64, "a multiple of 32 from 64 to 65536")
	cmd.Flags().StringVar(&o.DType, "dtype", "BF16", "dtype of the Llama-like checkpoint's weights and norms: BF16, F16, F32, F8_E4M3 or F8_E5M2 (cast from BF16; FP8 scaled per row)")
	return cmd
}

func runGen(ctx context.Context, g *globals, o genOptions, dir string) error {
	size, err := parseSize(o.Size)
	if err != nil {
		return usageError{fmt.Errorf("--size: %v", err)}
	}
	if o.Shards < 1 || o.Small < 0 || o.Tiny < 0 || o.Mix < 0 || o.MoE < 0 || o.Layers < 0 {
		return usageError{fmt.Errorf("--shards must be at least 1, and --small, --tiny, --mix, --moe and --layers not negative")}
	}
	if btoi(o.Small > 0)+btoi(o.Tiny > 0)+btoi(o.Mix > 0)+btoi(o.MoE > 0) > 1 {
		return usageError{fmt.Errorf("--small, --tiny, --mix and --moe each choose a shape: give one")}
	}
	if size == 0 && o.Small+o.Tiny+o.Mix+o.MoE == 0 {
		return usageError{fmt.Errorf("--size must be more than 0")}
	}
	if o.sizeSet && o.Small+o.Tiny+o.Mix+o.MoE > 0 {
		return usageError{fmt.Errorf("--size applies to the Llama-like checkpoint: --small, --tiny, --mix and --moe set their own size")}
	}
	if o.layersSet && o.MoE == 0 {
		return usageError{fmt.Errorf("--layers applies to --moe only (the Llama-like checkpoint's layers follow --size)")}
	}
	if o.Hidden > 0 && o.Small+o.Tiny+o.Mix > 0 {
		return usageError{fmt.Errorf("--hidden applies to the Llama-like checkpoint and --moe: --small, --tiny and --mix set their own shapes")}
	}
	if o.Hidden > 0 && (o.Hidden%32 != 0 || o.Hidden < 64 || o.Hidden > 1<<16) {
		return usageError{fmt.Errorf("--hidden must be a multiple of 32 from 64 to 65536, got %d", o.Hidden)}
	}
	// Shards written beside another checkpoint's would make a folder of
	// neither (and every cache of it fail its source check): a new or
	// empty folder only.
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		return usageError{fmt.Errorf("%s is a file; gen writes a checkpoint into a new or empty folder", dir)}
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 && onlyTemps(ents) {
		// A killed gen's temporary files, and nothing else: removed
		// (those of a process still running stay, and the folder is
		// refused below).
		atomicfile.RemoveStale(dir)
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return usageError{fmt.Errorf("%s is not empty (%d entries); gen writes a checkpoint into a new or empty folder", dir, len(ents))}
	}
	p := g.progress()
	if !slices.Contains(synth.DTypes(), o.DType) {
		return usageError{fmt.Errorf("--dtype must be one of %v, got %q", synth.DTypes(), o.DType)}
	}
	if o.DType != "BF16" && o.Small+o.Tiny+o.Mix+o.MoE > 0 {
		return usageError{fmt.Errorf("--dtype applies to the Llama-like checkpoint only")}
	}
	if err := ctx.Err(); err != nil {
		return err // planning a large checkpoint takes a while: not after Ctrl-C
	}
	if o.Small+o.Tiny+o.Mix+o.MoE == 0 {
		// The plan of a size the disk cannot hold could fill memory.
		if err := roomFor(dir, size); err != nil {
			return err
		}
	}
	dt := o.DType
	if dt == "BF16" {
		dt = ""
	}
	cfg := synth.Config{Bytes: size, Shards: o.Shards, Seed: o.Seed, Small: o.Small, Tiny: o.Tiny, Mix: o.Mix, MoE: o.MoE, Layers: o.Layers, Hidden: o.Hidden, DType: dt}
	// The bar counts the tensor bytes the plan will write.
	var total uint64
	plan := synth.Plan(cfg)
	for _, t := range plan {
		total += t.Size
	}
	if err := roomFor(dir, total); err != nil {
		return err
	}
	p.Start("gen", total)
	var last uint64
	cfg.Progress = func(w uint64) { p.Add(w - last); last = w }
	paths, err := synth.Write(ctx, dir, cfg)
	p.Finish() // cleared before the summary is printed
	if err != nil {
		return err
	}
	// A Llama-like checkpoint has a smallest shape (one layer of the
	// smallest hidden size): say so where --size asked for less.
	over := o.Small+o.Tiny+o.Mix+o.MoE == 0 && total > size+size/2
	if g.JSON {
		doc := map[string]any{"dir": dir, "files": paths, "tensors": len(plan), "tensor_bytes": total}
		if over {
			doc["size_requested"] = size
		}
		return printJSON(g.stdout, "gen_summary", doc)
	}
	fmt.Fprintf(g.stdout, "wrote %s into %s: %d tensors, %s", count(len(paths), "file"), dir, len(plan), human(total))
	if over {
		fmt.Fprintf(g.stdout, " (the smallest Llama-like checkpoint; --size asked for %s)", human(size))
	}
	fmt.Fprintln(g.stdout)
	return nil
}

// onlyTemps reports whether every entry is a temporary file (atomicfile).
func onlyTemps(ents []os.DirEntry) bool {
	for _, e := range ents {
		if !atomicfile.IsTemp(e.Name()) {
			return false
		}
	}
	return true
}

// roomFor checks that the file system of dir (or of its nearest existing
// parent) has n bytes free, with a margin for the headers: a checkpoint
// too large for the disk is refused before a byte is written.
func roomFor(dir string, n uint64) error {
	at := dir
	for {
		var st unix.Statfs_t
		err := unix.Statfs(at, &st)
		if err == nil {
			if free := st.Bavail * uint64(st.Bsize); n+n/64 > free {
				return fmt.Errorf("%s: %w: the checkpoint needs %s, %s are free", dir, syscall.ENOSPC, human(n), human(free))
			}
			return nil
		}
		parent := filepath.Dir(at)
		if !errors.Is(err, fs.ErrNotExist) || parent == at {
			return nil // no answer: the writes will tell
		}
		at = parent
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
