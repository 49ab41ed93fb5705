package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/splitzip/splitzip/internal/synth"
)

// genOptions are the flags of gen.
type genOptions struct {
	Size   string
	Shards int
	Seed   uint64
	Small  int
	Hidden uint64
}

func newGenCommand(g *globals) *cobra.Command {
	var o genOptions
	cmd := &cobra.Command{
		Use:    "gen DIR",
		Short:  "Write a synthetic Llama-like BF16 checkpoint (for demos and benchmarks)",
		Hidden: true,
		Args:   args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			return runGen(cmd.Context(), g, o, a[0])
		},
	}
	cmd.Flags().StringVar(&o.Size, "size", "64MiB", "approximate checkpoint size")
	cmd.Flags().IntVar(&o.Shards, "shards", 2, "number of shard files")
	cmd.Flags().Uint64Var(&o.Seed, "seed", 1, "random seed")
	cmd.Flags().Uint64Var(&o.Hidden, "hidden", 0, "hidden size (default: chosen from --size; 4096 gives 90 MB MLP tensors)")
	cmd.Flags().IntVar(&o.Small, "small", 0, "write this many small BF16 tensors (1-64 KiB) instead; --size is ignored")
	return cmd
}

func runGen(ctx context.Context, g *globals, o genOptions, dir string) error {
	size, err := parseSize(o.Size)
	if err != nil {
		return usageError{err}
	}
	if o.Shards < 1 || o.Small < 0 {
		return usageError{fmt.Errorf("--shards must be at least 1 and --small not negative")}
	}
	p := g.progress()
	cfg := synth.Config{Bytes: size, Shards: o.Shards, Seed: o.Seed, Small: o.Small, Hidden: o.Hidden}
	// The bar counts the tensor bytes the plan will write.
	var total uint64
	for _, t := range synth.Plan(cfg) {
		total += t.Size
	}
	p.Start("gen", total)
	var last uint64
	cfg.Progress = func(w uint64) { p.Add(w - last); last = w }
	paths, err := synth.Write(ctx, dir, cfg)
	p.Finish() // cleared before the summary is printed
	if err != nil {
		return err
	}
	if g.JSON {
		return printJSON(g.stdout, "gen_summary", map[string]any{"dir": dir, "files": paths})
	}
	fmt.Fprintf(g.stdout, "wrote %d files into %s\n", len(paths), dir)
	return nil
}
