package shardcache

import (
	"fmt"
	"path/filepath"
	"slices"
)

// What copying a cache to another place (a registry, another machine)
// needs: its index's bytes parsed as Open parses them, the files that
// hold its objects, a check that it needs no source, and on the
// receiving side a way to record objects moved in whole.

// ParseIndex parses the bytes of an index file as Open does; name says
// where they came from in errors.
func ParseIndex(b []byte, name string) (*Index, error) {
	if len(b) > maxIndexSize {
		return nil, fmt.Errorf("%s: %w: %d bytes", name, ErrIndexCorrupt, len(b))
	}
	return unmarshalIndex(b, name)
}

// Files returns, in key order, the objects stored in files of their own
// and the packs: the files a copy of the cache moves. members holds each
// pack's objects, which move with it.
func (ix *Index) Files() (files []Key, members map[Key][]Key) {
	members = map[Key][]Key{}
	for k, o := range ix.Objects {
		if o.Pack == "" {
			files = append(files, k)
		} else {
			members[o.Pack] = append(members[o.Pack], k)
		}
	}
	slices.Sort(files)
	return files, members
}

// FilePath returns where the file of key (an object of its own or a
// pack) lies in the cache.
func (c *Cache) FilePath(key Key) (string, error) {
	if c.remote != nil {
		return "", fmt.Errorf("%s: %w", c.dir, ErrRemote)
	}
	return objectPath(c.dir, key)
}

// CheckSelfContained checks that every tensor of every source has its
// bytes in the cache, in files of the recorded sizes: a copy of the cache
// then loads and decompresses without its source. A cache with tensors
// whose bytes are only in their source is ErrNotSelfContained, counting
// them and naming the first, whether or not that source is there.
func (c *Cache) CheckSelfContained() error {
	n, first, file := 0, "", ""
	for si := range c.ix.Sources {
		s := &c.ix.Sources[si]
		for hi := range s.Shards {
			sh := &s.Shards[hi]
			for i := range sh.Tensors {
				if t := &sh.Tensors[i]; !t.InCache() {
					if n++; first == "" {
						first, file = t.Name, filepath.Join(s.Root, sh.Name)
					}
				}
			}
		}
	}
	if n > 0 {
		what := fmt.Sprintf("the bytes of %d tensors are", n)
		if n == 1 {
			what = "the bytes of 1 tensor are"
		}
		// The first named as a TensorError, for callers that report the
		// tensor and file apart from the text (--json).
		return &TensorError{Tensor: first, File: file, Err: fmt.Errorf("%w: %s only in their source shards (this one the first)", ErrNotSelfContained, what)}
	}
	for si := range c.ix.Sources {
		s := &c.ix.Sources[si]
		for hi := range s.Shards {
			sh := &s.Shards[hi]
			if err := c.CheckAbsent(sh, filepath.Join(s.Root, sh.Name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Adopt records key and members, its objects when it is a pack (Files),
// as ix describes them, leaving each that this cache records already as
// it is: for a file that NewObject and Commit moved into place whole from
// a cache whose index is ix (a pull), or one found here already. Commit
// then writes them into this cache's index.
func (w *Writer) Adopt(ix *Index, key Key, members []Key) error {
	o, ok := ix.Objects[key]
	if !ok {
		return fmt.Errorf("shardcache: object %s: %w", key, ErrNotFound)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	// A record of this cache is kept unless Has found its object
	// damaged: then the adopted copy replaces it, if it has its form (the
	// cache's other records name that form: review 70c).
	replaces := func(k Key, o *Object) bool {
		lo, ok := w.ix.Objects[k]
		return !ok || w.damaged[k] != nil && lo.Kind == o.Kind
	}
	if replaces(key, o) {
		w.record(key, o)
	}
	for _, m := range members {
		mo, ok := ix.Objects[m]
		if !ok || mo.Pack != key {
			return fmt.Errorf("shardcache: object %s is not a member of pack %s", m, key)
		}
		if replaces(m, mo) {
			w.record(m, mo)
		}
	}
	return nil
}

// AddSources records every source of ix, whose objects have all been
// adopted, replacing a source of the same path.
func (w *Writer) AddSources(ix *Index) {
	for _, s := range ix.Sources {
		w.SetSource(s)
	}
}

// Replaces reports whether recording s would replace a different
// checkpoint the cache records at the same path (other shards, or
// shards of other bytes, by their fingerprints): the cache knows one
// checkpoint a path.
func (w *Writer) Replaces(s *Source) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.ix.Sources {
		if r := &w.ix.Sources[i]; r.Path() == s.Path() {
			return !sameShards(r, s)
		}
	}
	return false
}

// ForgetCopy forgets the checkpoint recorded at root whose shards are s's
// (the same checkpoint, recorded at another folder than s's: a pull of it
// before pulls recorded their checkpoints at PulledRoot, or a pull
// keeping its roots into a cache a pull recorded it in), if there is one.
// It takes effect with Commit.
func (w *Writer) ForgetCopy(root string, s *Source) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.ix.Sources {
		if r := &w.ix.Sources[i]; r.Root == root && r.Root != s.Root && sameIndex(r, s) && sameShards(r, s) {
			w.ix.Sources = append(w.ix.Sources[:i], w.ix.Sources[i+1:]...)
			return
		}
	}
}

// Records reports whether the cache records s as it is: at its path,
// with the same index file and shards.
func (c *Cache) Records(s *Source) bool {
	srcs := c.Index().Sources
	for i := range srcs {
		if r := &srcs[i]; r.Root == s.Root && r.Path() == s.Path() {
			return sameIndex(r, s) && sameShards(r, s)
		}
	}
	return false
}

// sameIndex reports whether two records of a checkpoint have the same
// index file (or none).
func sameIndex(a, b *Source) bool {
	if a.Index == nil || b.Index == nil {
		return a.Index == nil && b.Index == nil
	}
	return *a.Index == *b.Index
}

// sameShards reports whether two records of a checkpoint name the same
// shards with the same bytes.
func sameShards(a, b *Source) bool {
	if len(a.Shards) != len(b.Shards) {
		return false
	}
	for i := range a.Shards {
		x, y := &a.Shards[i], &b.Shards[i]
		if x.Name != y.Name || x.Size != y.Size || x.Fingerprint != y.Fingerprint {
			return false
		}
	}
	return true
}
