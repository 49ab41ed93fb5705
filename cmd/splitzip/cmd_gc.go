package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/shardcache"
)

// gcOptions are the flags of gc.
type gcOptions struct {
	DryRun bool
	Forget []string
}

func newGCCommand(g *globals) *cobra.Command {
	var o gcOptions
	cmd := &cobra.Command{
		Use:   "gc CACHE",
		Short: "Remove objects no checkpoint of the cache uses",
		Long: `Remove objects that no source of the cache references (left when a
checkpoint is compressed again or forgotten) and stray files left by an
interrupted compress. A folder with no committed index (a first compress
that was killed, or a cache that lost its index) is refused where its
objects/ holds files: nothing tells which it is; compress again, or remove
the folder. --forget PATH first drops the record of the checkpoint
compressed from PATH (a folder, or the file of a single-file checkpoint),
given as for compress: relative to the working directory, symlinks allowed.
--dry-run changes nothing, and works on a read-only cache.`,
		Args: localCache(args(cobra.ExactArgs(1))),
		RunE: func(cmd *cobra.Command, a []string) error { return runGC(g, o, a[0]) },
	}
	cmd.Flags().BoolVarP(&o.DryRun, "dry-run", "n", false, "only report what would be removed")
	cmd.Flags().StringArrayVar(&o.Forget, "forget", nil, "drop the record of the checkpoint compressed from this path first (repeatable)")
	return cmd
}

func runGC(g *globals, o gcOptions, dir string) error {
	for _, f := range o.Forget {
		if strings.HasPrefix(f, "-") {
			// "--forget --json" takes --json for the path: say so.
			return usageError{fmt.Errorf("--forget %s: a path, not a flag (write ./%s for a file of that name)", f, f)}
		}
		if f == "" {
			return usageError{errors.New("--forget is empty: name the checkpoint's folder or file (an unset shell variable?)")}
		}
	}
	// One checkpoint named twice (its folder and its index, say) is
	// forgotten once.
	if len(o.Forget) > 1 {
		if c, err := shardcache.Open(dir); err == nil {
			c.Close() // its index is all this reads; gc takes the cache from readers
			seen := map[int]bool{}
			var once []string
			for _, f := range o.Forget {
				i, err := c.Index().SourceFor(f)
				if err == nil && seen[i] {
					continue
				}
				seen[i] = err == nil
				once = append(once, f)
			}
			o.Forget = once
		}
	}
	res, err := gc(o, dir)
	if err != nil {
		return err
	}
	if g.JSON {
		return printJSON(g.stdout, "gc_summary", map[string]any{"cache": dir, "dry_run": o.DryRun, "result": res})
	}
	verb := "removed"
	if o.DryRun {
		verb = "would remove"
	}
	for _, f := range o.Forget {
		if o.DryRun {
			fmt.Fprintf(g.stdout, "gc: would forget the checkpoint compressed from %s\n", f)
		} else {
			fmt.Fprintf(g.stdout, "gc: forgot the checkpoint compressed from %s\n", f)
		}
	}
	repacked := ""
	if res.Repacked > 0 {
		repacked = fmt.Sprintf("; %s %s with the members still in use", map[bool]string{false: "rewrote", true: "would rewrite"}[o.DryRun], count(res.Repacked, "pack"))
	}
	fmt.Fprintf(g.stdout, "gc: %s %s and %s, %s%s\n", verb, count(res.Objects, "object"), count(res.Files, "stray file"), human(res.Bytes), repacked)
	return nil
}

// gc runs gc, or its dry run, which opens nothing for writing.
func gc(o gcOptions, dir string) (shardcache.GCResult, error) {
	if o.DryRun {
		return shardcache.DryRunGC(dir, o.Forget)
	}
	if !shardcache.IsCache(dir) {
		// Open says why: missing, not a directory, or not a cache.
		c, err := shardcache.Open(dir)
		if err != nil {
			return shardcache.GCResult{}, err
		}
		c.Close()
	}
	w, err := shardcache.Create(dir)
	if err != nil {
		return shardcache.GCResult{}, err
	}
	defer w.Close()
	w.SetPayloadCheck(pipeline.CheckStoredPayload) // the members a repack copies
	for _, p := range o.Forget {
		if err := w.Forget(p); err != nil {
			return shardcache.GCResult{}, err
		}
	}
	return w.GC(false)
}
