package shardcache

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrAmbiguousSource reports a cache of several sources and no choice
// among them.
var ErrAmbiguousSource = errors.New("the cache holds several sources; choose one with --source ROOT")

// PickSource returns the source of the cache that sel names (FindSource)
// with Root set to the directory its shards are in now.
func (c *Cache) PickSource(sel string) (*Source, error) {
	rec, dir, err := c.FindSource(sel)
	if err != nil || rec.Root == dir {
		return rec, err
	}
	moved := *rec
	moved.Root = dir
	return &moved, nil
}

// FindSource returns the record of the source sel names and the directory
// its shards are in now:
//   - sel empty: the only source, at its recorded root;
//   - sel a recorded root: that source;
//   - sel another directory: the one source whose every shard is there
//     with its recorded size (a checkpoint moved, copied or mounted
//     elsewhere), and sel. The index is not changed (Writer.Relocate
//     records the new place).
func (c *Cache) FindSource(sel string) (*Source, string, error) {
	srcs := c.Index().Sources
	if sel == "" {
		if len(srcs) == 1 {
			return &srcs[0], srcs[0].Root, nil
		}
		var roots []string
		for _, s := range srcs {
			roots = append(roots, s.Root)
		}
		return nil, "", fmt.Errorf("%w: %v", ErrAmbiguousSource, roots)
	}
	abs, err := filepath.Abs(sel)
	if err != nil {
		return nil, "", err
	}
	for i := range srcs {
		if srcs[i].Root == abs || srcs[i].Root == sel {
			return &srcs[i], srcs[i].Root, nil
		}
	}
	dir, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, "", fmt.Errorf("%s: source %s: %w (%w)", c.Dir(), sel, ErrNotFound, err)
	}
	var found []*Source
	for i := range srcs {
		if holdsShards(dir, &srcs[i]) {
			found = append(found, &srcs[i])
		}
	}
	switch len(found) {
	case 0:
		return nil, "", fmt.Errorf("%s: %s is no recorded source root and holds the shards of none of the cache's sources: %w", c.Dir(), sel, ErrNotFound)
	case 1:
		return found[0], dir, nil
	}
	return nil, "", fmt.Errorf("%s: %s holds the shards of %d sources; name one by its recorded root", c.Dir(), sel, len(found))
}

// holdsShards reports whether dir has every shard of s with its recorded
// size (and the index file, if s has one).
func holdsShards(dir string, s *Source) bool {
	if len(s.Shards) == 0 {
		return false
	}
	for _, sh := range s.Shards {
		st, err := os.Stat(filepath.Join(dir, sh.Name))
		if err != nil || uint64(st.Size()) != sh.Size {
			return false
		}
	}
	if s.Index != nil {
		if _, err := os.Stat(filepath.Join(dir, s.Index.Name)); err != nil {
			return false
		}
	}
	return true
}
