package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/shardcache"
)

// gcOptions are the flags of gc.
type gcOptions struct {
	DryRun     bool
	Forget     []string
	Unfinished bool
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
A pull that did not finish keeps what it fetched for the next pull to
resume from (a pin under pins/ names it): gc keeps those objects and says
so, unless --unfinished lets them go. gc refuses a cache that a load,
verify, decompress or push has open, or a Python or C loader (from
opening the cache to closing it), and a pack it would rewrite whose
members still in use are damaged.
--dry-run changes nothing, works on a read-only cache, and waits for a
compress or pull that is writing the cache to finish (up to two minutes).`,
		Args: localCache(args(cobra.ExactArgs(1))),
		RunE: func(cmd *cobra.Command, a []string) error { return runGC(cmd.Context(), g, o, a[0]) },
	}
	cmd.Flags().BoolVarP(&o.DryRun, "dry-run", "n", false, "only report what would be removed")
	cmd.Flags().StringArrayVar(&o.Forget, "forget", nil, "drop the record of the checkpoint compressed from this path first (repeatable)")
	cmd.Flags().BoolVar(&o.Unfinished, "unfinished", false, "also remove what unfinished pulls fetched (a pull run again fetches it anew)")
	return cmd
}

func runGC(ctx context.Context, g *globals, o gcOptions, dir string) error {
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
		if c, err := shardcache.OpenContext(ctx, dir); err == nil {
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
	res, err := gc(ctx, o, dir, g.stderr)
	// (Stopped after its commit, gc's error is reported as interrupted
	// with shardcache.ErrStraysLeft's sentence: main.)
	if err != nil {
		return err
	}
	if g.JSON {
		forgot := append([]string{}, o.Forget...) // [] rather than null
		return printJSON(g.stdout, "gc_summary", map[string]any{"cache": dir, "dry_run": o.DryRun, "forgot": forgot, "result": res})
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
		repacked = fmt.Sprintf(" and %s %s with the members still in use", map[bool]string{false: "rewrote", true: "would rewrite"}[o.DryRun], count(res.Repacked, "pack"))
	}
	fmt.Fprintf(g.stdout, "gc: %s %s and %s%s: %s %s\n", verb, count(res.Objects, "object"), count(res.Files, "stray file"), repacked,
		human(res.Bytes), map[bool]string{false: "freed", true: "to free"}[o.DryRun])
	for _, p := range res.Dropped {
		fmt.Fprintf(g.stdout, "gc: %s what an unfinished pull fetched (%s): %s\n", map[bool]string{false: "let go of", true: "would let go of"}[o.DryRun], p.Name, p.Note)
	}
	if res.Pinned > 0 {
		fmt.Fprintf(g.stderr, "note: kept %s that unfinished pulls fetched, for a pull run again to resume from (%s); --unfinished removes them\n",
			count(res.Pinned, "object"), pinNotes(res.Pins))
	}
	return nil
}

// gc runs gc, or its dry run, which opens nothing for writing and says
// on stderr when it waits for a writer.
func gc(ctx context.Context, o gcOptions, dir string, stderr io.Writer) (shardcache.GCResult, error) {
	// Payload members a repack copies are checked as loads check them.
	opts := shardcache.GCOptions{DryRun: o.DryRun, Forget: o.Forget, DropPins: o.Unfinished, Check: pipeline.CheckStoredPayload}
	if o.DryRun {
		if shardcache.WriterBusy(dir) {
			fmt.Fprintf(stderr, "waiting for another splitzip command writing to %s (compress, pull or gc; up to 2 minutes)\n", dir)
		}
		return shardcache.DryRunGC(ctx, dir, opts)
	}
	if !shardcache.IsCache(dir) {
		// Open says why: missing, not a directory, or not a cache.
		c, err := shardcache.OpenContext(ctx, dir)
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
	return w.GC(ctx, opts)
}

// pinNotes says what pins keep objects for, one after another.
func pinNotes(pins []shardcache.Pin) string {
	notes := make([]string, len(pins))
	for i, p := range pins {
		notes[i] = p.Note
	}
	return strings.Join(notes, "; ")
}
