package shardcache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/splitzip/splitzip/internal/atomicfile"
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
				if t.InCache() {
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
	// Repacked counts packs rewritten because some of their members were
	// removed and others are still used.
	Repacked int `json:"repacked"`
}

// GC removes objects no source references, and files under objects/ the
// index does not know (left by an interrupted writer). A pack goes when
// none of its members is used; one with both used members and removed
// ones is rewritten with the used ones only. The index is committed
// first, so a crash midway leaves only unreferenced files. With dryRun it
// only counts.
func (w *Writer) GC(dryRun bool) (GCResult, error) {
	var res GCResult
	w.mu.Lock()
	used := w.referenced()
	// A pack is used while a member is; it is rewritten when it also has
	// members that go.
	live, dead := map[Key]bool{}, map[Key]bool{}
	for k, o := range w.ix.Objects {
		if o.Pack != "" {
			if used[k] {
				live[o.Pack] = true
			} else {
				dead[o.Pack] = true
			}
		}
	}
	var drop []Key
	var liveBytes = map[Key]uint64{} // aligned bytes of used members, per pack
	for k, o := range w.ix.Objects {
		if o.Pack != "" && used[k] {
			liveBytes[o.Pack] += alignPack(o.Size)
		}
	}
	for k, o := range w.ix.Objects {
		switch {
		case o.Kind == KindPack && live[k] && dead[k]:
			res.Repacked++
			res.Bytes += o.Size - min(o.Size, liveBytes[k])
		case o.Kind == KindPack && live[k], used[k]:
			continue
		case o.Kind == KindPack || o.Pack == "":
			res.Bytes += o.Size // a file of its own
		}
		drop = append(drop, k)
		if o.Kind != KindPack {
			res.Objects++
		}
	}
	known := w.knownFiles()
	if !dryRun {
		if err := w.unpackLive(used, live, dead); err != nil {
			w.mu.Unlock()
			return res, err
		}
		for _, k := range drop {
			delete(w.ix.Objects, k)
		}
	}
	w.mu.Unlock()
	if !dryRun {
		if err := w.Commit(); err != nil {
			return res, err
		}
	}
	// Files no index entry names: objects of a run that was killed, and
	// its temporary files. They are counted against the index GC began
	// with, and removed against the one it committed.
	w.mu.Lock()
	keep := w.knownFiles()
	w.mu.Unlock()
	for _, sub := range []string{"objects", "tmp"} {
		err := filepath.WalkDir(filepath.Join(w.dir, sub), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			if !known[p] && !keep[p] { // not a pack this gc wrote
				if info, ierr := d.Info(); ierr == nil {
					res.Files++
					res.Bytes += uint64(info.Size())
				}
			}
			if dryRun || keep[p] {
				return nil
			}
			return os.Remove(p)
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return res, err
		}
	}
	return res, nil
}

// knownFiles returns the paths of the files the index names (w.mu held).
func (w *Writer) knownFiles() map[string]bool {
	known := map[string]bool{}
	for k, o := range w.ix.Objects {
		if o.Pack != "" {
			continue
		}
		if p, err := objectPath(w.dir, k); err == nil {
			known[p] = true
		}
	}
	return known
}

// unpackLive copies the used members of packs that also have unused ones
// into tmp/ as pending objects, so that Commit writes them into new packs
// (w.mu held). Their records leave the index until then; the old pack
// file stays until the new index is committed.
func (w *Writer) unpackLive(used, live, dead map[Key]bool) error {
	files := map[Key]*os.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for k, o := range w.ix.Objects {
		if o.Pack == "" || !used[k] || !live[o.Pack] || !dead[o.Pack] || w.pending[k].path != "" {
			continue
		}
		f, ok := files[o.Pack]
		if !ok {
			p, err := objectPath(w.dir, o.Pack)
			if err != nil {
				return err
			}
			if f, err = os.Open(p); err != nil {
				return err
			}
			files[o.Pack] = f
		}
		b := make([]byte, o.Size)
		if _, err := f.ReadAt(b, int64(o.Offset)); err != nil {
			return fmt.Errorf("%s: %w", f.Name(), err)
		}
		tmp, err := atomicfile.CreateTemp(filepath.Join(w.dir, "tmp"), "object-")
		if err != nil {
			return err
		}
		_, err = tmp.Write(b)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(tmp.Name())
			return err
		}
		m := *o
		m.Pack, m.Offset = "", 0
		w.pending[k] = pendingObject{path: tmp.Name(), meta: &m}
		w.pendingOrder = append(w.pendingOrder, k)
		delete(w.ix.Objects, k)
	}
	return nil
}
