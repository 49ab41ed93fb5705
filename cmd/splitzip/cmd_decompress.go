package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/splitzip/splitzip/pipeline"
)

// decompressOptions are the flags of decompress.
type decompressOptions struct {
	Memory string
	Output string
	Source string
}

func newDecompressCommand(g *globals) *cobra.Command {
	var o decompressOptions
	cmd := &cobra.Command{
		Use:   "decompress CACHE -o DIR",
		Short: "Rebuild the original safetensors files byte for byte",
		Long: `Rebuild the original safetensors files (and index.json) of a cached
checkpoint, with the modification times compress recorded (so the folder
serves as the checkpoint's source again). Tensors left raw are read from
the source unless the cache was made with --self-contained. The output may
be any folder outside the cache, but not inside the source checkpoint's
folder while the source is there; once it is gone (a self-contained
cache), its old folder is where it is restored. Files of those names
already in the output are not overwritten. The checkpoint folder's other
files (config.json, a tokenizer) are not in the cache.`,
		Args: localCache(args(cobra.ExactArgs(1))),
		RunE: func(cmd *cobra.Command, a []string) error {
			return runDecompress(cmd.Context(), g, o, a[0])
		},
	}
	cmd.Flags().StringVarP(&o.Output, "output", "o", "", "directory for the restored files")
	cmd.Flags().StringVar(&o.Source, "source", "", "source to restore: a recorded root (when the cache holds several), or the directory a moved source is in now")
	addMemoryFlag(cmd.Flags(), &o.Memory)
	return cmd
}

func runDecompress(ctx context.Context, g *globals, o decompressOptions, dir string) error {
	if o.Output == "" {
		return usageError{fmt.Errorf("decompress needs -o DIR")}
	}
	mem, err := memoryBudget(o.Memory)
	if err != nil {
		return err
	}
	res, err := pipeline.Decompress(ctx, dir, pipeline.DecompressOptions{Output: o.Output, Source: o.Source, Memory: mem, Progress: g.progress()})
	if err != nil {
		return err
	}
	warnBackup(g, res.IndexDamaged)
	if g.JSON {
		return printJSON(g.stdout, "decompress_summary", res)
	}
	if res.StaleTemps > 0 {
		fmt.Fprintf(g.stderr, "note: removed %s that a killed run had left in %s\n", count(res.StaleTemps, "temporary file"), res.Output)
	}
	fmt.Fprintf(g.stdout, "restored %s (%s) of %s into %s in %.2fs\n", count(len(res.Files), "file"), human(res.Bytes), res.Checkpoint, res.Output, res.Duration.Seconds())
	return nil
}
