package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"

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
by its shards in DIR (names and sizes; a shard whose every tensor the
cache holds may be absent, as may the checkpoint's index file), or named
by its recorded root with --source. DIR must be outside the cache.
Shards whose modification time differs from the one recorded (a copy
that did not keep it: scp, rsync without -t, a download) are read whole
and hashed against the index: when every byte is the same their new
times are recorded, else relocate refuses and names what differs. The folder the source is recorded at, with its
times unchanged, changes nothing. verify, decompress and load also take
--source DIR to use a moved source without changing the index.`,
		Args: localCache(args(cobra.ExactArgs(2))),
		RunE: func(cmd *cobra.Command, a []string) error { return runRelocate(cmd.Context(), g, o, a[0], a[1]) },
	}
	cmd.Flags().StringVar(&o.Source, "source", "", "recorded root of the source to move (default: the one whose shards are in DIR)")
	return cmd
}

func runRelocate(ctx context.Context, g *globals, o relocateOptions, cache, dir string) error {
	c, err := shardcache.OpenContext(ctx, cache)
	if err != nil {
		return err
	}
	c.Close() // its index is all relocate reads; the writer it opens next holds the cache
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
	if st, err := os.Stat(abs); err == nil && !st.IsDir() {
		// A single-file checkpoint's new file: relocate records folders.
		return usageError{fmt.Errorf("%s is a file: relocate takes the folder a checkpoint is in now (splitzip relocate %s %s)", dir, cache, filepath.Dir(dir))}
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
	if o.Source != "" && old != abs && !shardcache.HoldsShards(abs, rec) {
		// Asked of rec alone: a fine-tune's folder holds its base's
		// shards by name and size too, which FindSource cannot tell apart.
		return failure.Mark(failure.Input, fmt.Errorf("%s does not hold the shards of source %s", abs, rec.Path()))
	}
	// Shards whose modification time differs (a copy that did not keep
	// it) are read whole and hashed against the index; if every byte is
	// the same, their new times are recorded.
	path := rec.Path()
	times, bytes, err := rehashCopies(ctx, g, rec, abs)
	if err != nil {
		return err
	}
	if old == abs && len(times) == 0 {
		if g.JSON {
			return printJSON(g.stdout, "relocate_summary", map[string]any{"cache": cache, "from": old, "to": abs, "changed": false, "rehashed_shards": 0})
		}
		fmt.Fprintf(g.stdout, "source %s is recorded at %s already; nothing to change\n", path, abs)
		return nil
	}
	w, err := shardcache.Create(cache)
	if err != nil {
		return err
	}
	defer w.Close()
	if old != abs {
		if err := w.Relocate(path, abs); err != nil {
			return err
		}
		moved := *rec // the path it is recorded at now
		moved.Root = abs
		path = moved.Path()
	}
	if err := w.Restamp(path, times); err != nil {
		return err
	}
	if err := w.Commit(); err != nil {
		return err
	}
	if g.JSON {
		return printJSON(g.stdout, "relocate_summary", map[string]any{"cache": cache, "from": old, "to": abs, "changed": true, "rehashed_shards": len(times)})
	}
	if old != abs {
		fmt.Fprintf(g.stdout, "relocated source %s to %s\n", old, abs)
	}
	if len(times) > 0 {
		fmt.Fprintf(g.stdout, "re-hashed %s (%s) whose modification times differed: the same bytes; their new times are recorded\n", count(len(times), "shard"), human(bytes))
	}
	return nil
}

// heldShardHint says what to do with a changed file of a shard whose
// every tensor the cache holds, in a copy at dir of present shards.
func heldShardHint(dir string, present int) string {
	if present > 1 {
		return "the cache holds every tensor of this shard: with this file moved out of " + dir + ", relocate records the other shards and the cache serves this one from what was compressed"
	}
	// No other shard here: every other one is held too, absent.
	return "the cache holds every tensor of this shard, and of the checkpoint's others absent here: it needs no source, so there is nothing to relocate; with this file moved away, verify, load and decompress serve what was compressed"
}

// rehashCopies hashes the shards of rec found in dir whose modification
// times differ from the recorded ones (shardcache.Rehash), several at
// once, and returns their new times by name (with the fingerprints they
// were checked against) and their bytes.
func rehashCopies(ctx context.Context, g *globals, rec *shardcache.Source, dir string) (map[string]shardcache.Stamp, uint64, error) {
	var todo []*shardcache.Shard
	var total uint64
	present := 0
	for i := range rec.Shards {
		sh := &rec.Shards[i]
		st, err := os.Stat(filepath.Join(dir, sh.Name))
		if errors.Is(err, fs.ErrNotExist) && sh.AllInCache() {
			continue // the cache serves it without its file, as at the recorded root
		}
		if err != nil {
			return nil, 0, err
		}
		if uint64(st.Size()) != sh.Size {
			return nil, 0, fmt.Errorf("%s: %w (size %d; compressed from size %d)", filepath.Join(dir, sh.Name), shardcache.ErrSourceChanged, st.Size(), sh.Size)
		}
		present++
		if !st.ModTime().Equal(sh.ModTime) {
			todo = append(todo, sh)
			total += sh.Size
		}
	}
	times := map[string]shardcache.Stamp{}
	if len(todo) == 0 {
		return times, 0, nil
	}
	p := g.progress()
	p.Start("re-hashing", total)
	defer p.Finish()
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for _, sh := range todo {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			t, err := shardcache.Rehash(ctx, sh, filepath.Join(dir, sh.Name))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if errors.Is(err, shardcache.ErrSourceChanged) && sh.AllInCache() {
					err = fmt.Errorf("%w (%s)", err, heldShardHint(dir, present))
				}
				errs = append(errs, err)
				return
			}
			times[sh.Name] = shardcache.Stamp{Fingerprint: sh.Fingerprint, ModTime: t}
			p.Add(sh.Size)
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, 0, err // once, not once a shard
	}
	return times, total, errors.Join(errs...)
}
