package shardcache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Forget removes the record of the source with the given root; its
// objects stay until GC. It takes effect with Commit.
func (w *Writer) Forget(root string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.ix.Sources {
		if w.ix.Sources[i].Root == root {
			w.ix.Sources = append(w.ix.Sources[:i], w.ix.Sources[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("%s: source %s: %w", w.dir, root, ErrNotFound)
}

// Relocate records that the source compressed from root is now at
// newRoot (an absolute directory). It takes effect with Commit.
func (w *Writer) Relocate(root, newRoot string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	at := -1
	for i := range w.ix.Sources {
		switch w.ix.Sources[i].Root {
		case newRoot:
			return fmt.Errorf("%s: a source is recorded at %s already", w.dir, newRoot)
		case root:
			at = i
		}
	}
	if at < 0 {
		return fmt.Errorf("%s: source %s: %w", w.dir, root, ErrNotFound)
	}
	w.ix.Sources[at].Root = newRoot
	return nil
}

// referenced returns the keys the sources use (w.mu held).
func (w *Writer) referenced() map[Key]bool {
	used := map[Key]bool{}
	for _, s := range w.ix.Sources {
		if s.Index != nil {
			used[s.Index.Key] = true
		}
		for _, sh := range s.Shards {
			used[sh.Header.Key] = true
			for _, g := range sh.Gaps {
				used[g.Key] = true
			}
			for _, t := range sh.Tensors {
				if t.Stored == StoredSplitZip || t.CopyStored {
					used[t.Key] = true
				}
			}
		}
	}
	return used
}

// GCResult reports what GC removed (or would remove).
type GCResult struct {
	Objects int    `json:"objects"`
	Bytes   uint64 `json:"bytes"`
	Files   int    `json:"stray_files"` // files under objects/ that no index entry names
}

// GC removes objects no source references, and files under objects/ the
// index does not know (left by an interrupted writer). The index is
// committed first, so a crash midway leaves only unreferenced files. With
// dryRun it only counts.
func (w *Writer) GC(dryRun bool) (GCResult, error) {
	var res GCResult
	w.mu.Lock()
	used := w.referenced()
	var drop []Key
	for k, o := range w.ix.Objects {
		if !used[k] {
			drop = append(drop, k)
			res.Objects++
			if dryRun {
				res.Bytes += o.Size
			}
		}
	}
	if !dryRun {
		for _, k := range drop {
			delete(w.ix.Objects, k)
		}
	}
	known := map[string]bool{}
	for k := range w.ix.Objects {
		if p, err := objectPath(w.dir, k); err == nil {
			known[p] = true
		}
	}
	w.mu.Unlock()
	if !dryRun {
		if err := w.Commit(); err != nil {
			return res, err
		}
	}
	// Files no index entry names: objects of a run that was killed, and
	// its temporary files.
	for _, sub := range []string{"objects", "tmp"} {
		err := filepath.WalkDir(filepath.Join(w.dir, sub), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || known[p] {
				return err
			}
			if info, ierr := d.Info(); ierr == nil {
				res.Files++
				res.Bytes += uint64(info.Size())
			}
			if dryRun {
				return nil
			}
			return os.Remove(p)
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return res, err
		}
	}
	if !dryRun {
		res.Files = max(0, res.Files-res.Objects) // dropped objects were walked as files too
	}
	return res, nil
}
