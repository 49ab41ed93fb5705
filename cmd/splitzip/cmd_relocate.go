package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/splitzip/splitzip/internal/failure"
	"github.com/splitzip/splitzip/shardcache"
)

// relocateOptions are the flags of relocate.
type relocateOptions struct {
	Source string
}

func newRelocateCommand(g *globals) *cobra.Command {
	var o relocateOptions
	cmd := &cobra.Command{
		Use:   "relocate CACHE DIR",
		Short: "Record that a compressed checkpoint's source moved to DIR",
		Long: `Record in the cache's index that the source checkpoint now lives in DIR
(moved, copied to another machine, mounted elsewhere). The source is found
by its shards in DIR (names and sizes), or named by its recorded root with
--source. DIR must be outside the cache; the folder the source is recorded
at already changes nothing. verify, decompress and load also take
--source DIR to use a moved source without changing the index.`,
		Args: args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, a []string) error { return runRelocate(g, o, a[0], a[1]) },
	}
	cmd.Flags().StringVar(&o.Source, "source", "", "recorded root of the source to move (default: the one whose shards are in DIR)")
	return cmd
}

func runRelocate(g *globals, o relocateOptions, cache, dir string) error {
	c, err := shardcache.Open(cache)
	if err != nil {
		return err
	}
	if err := shardcache.CheckOutside(cache, dir, "the source folder"); err != nil {
		return err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		return err
	}
	sel := o.Source
	if sel == "" {
		sel = abs
	}
	rec, _, err := c.FindSource(sel)
	if err != nil {
		return err
	}
	old := rec.Root
	if old == abs {
		if g.JSON {
			return printJSON(g.stdout, "relocate_summary", map[string]any{"cache": cache, "from": old, "to": abs, "changed": false})
		}
		fmt.Fprintf(g.stdout, "source %s is recorded at %s already; nothing to change\n", rec.Path(), abs)
		return nil
	}
	if o.Source != "" {
		if at, _, err := c.FindSource(abs); err != nil || at != rec {
			return failure.Mark(failure.Input, fmt.Errorf("%s does not hold the shards of source %s", abs, rec.Path()))
		}
	}
	w, err := shardcache.Create(cache)
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Relocate(rec.Path(), abs); err != nil {
		return err
	}
	if err := w.Commit(); err != nil {
		return err
	}
	if g.JSON {
		return printJSON(g.stdout, "relocate_summary", map[string]any{"cache": cache, "from": old, "to": abs, "changed": true})
	}
	fmt.Fprintf(g.stdout, "relocated source %s to %s\n", old, abs)
	return nil
}
