package transport

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/vmm"
)

// CheckArena reads every binding of bs (of src's tensors, as Specs makes
// them) back from eng and compares it with its content key and, where
// the source is there, with its source slice; the first difference is an
// *Error naming the tensor.
func CheckArena(eng engine.Engine, bs []*vmm.Binding, src *shardcache.Source) error {
	return CheckArenaOf(eng, nil, bs, src)
}

// CheckArenaOf is CheckArena for bs loaded from c: a source is there
// where c takes it for there (Cache.SourcePresent: never a remote cache's,
// whose files are another machine's, whatever lies at their paths here).
func CheckArenaOf(eng engine.Engine, c *shardcache.Cache, bs []*vmm.Binding, src *shardcache.Source) error {
	keys := keysOf(src)
	absent := map[string]bool{} // by shard path, where c says
	files := map[string]*os.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, b := range bs {
		got := make([]byte, b.Size)
		if err := eng.ReadBack(got, b.Addr); err != nil {
			return &Error{Tensor: b.Name, Err: err}
		}
		// The content key recorded at compress time is the reference,
		// also where the source is there: a source edited in place since
		// (its size and time kept) is a changed source, whether the arena
		// holds its new bytes (read raw from it) or what was compressed
		// (decoded from a payload).
		want := keys[slice{b.Shard, b.Offset}]
		hit, _ := b.Ref.(*shardcache.SliceHit)
		if hit != nil {
			want = hit.Tensor.Key
		}
		keyed := want != "" && shardcache.KeyOf(got) == want
		if hit != nil && hit.Tensor.CopyStored && b.Shard != filepath.Join(src.Root, hit.Shard.Name) {
			// Read from its raw copy in the cache (the source is absent):
			// the copy is read again to tell its damage from the load's.
			if !keyed {
				return copyMismatch(b, want)
			}
			continue
		}
		if c != nil && hit != nil {
			gone, seen := absent[b.Shard]
			if !seen {
				present, err := c.SourcePresent(hit.Shard, b.Shard)
				gone = err == nil && !present
				absent[b.Shard] = gone
			}
			if gone {
				if !keyed {
					return &Error{Tensor: b.Name, Err: fmt.Errorf("%w: they do not match the content key", ErrMismatch)}
				}
				continue
			}
		}
		f, ok := files[b.Shard]
		if !ok {
			var err error
			f, err = os.Open(b.Shard)
			if errors.Is(err, fs.ErrNotExist) {
				// An absent source (or a remote cache's file): the key
				// is the check.
				if !keyed {
					return &Error{Tensor: b.Name, Err: fmt.Errorf("%w: they do not match the content key", ErrMismatch)}
				}
				continue
			}
			if err != nil {
				return err
			}
			files[b.Shard] = f
		}
		src := make([]byte, b.Size)
		if _, err := f.ReadAt(src, int64(b.Offset)); err != nil {
			return fmt.Errorf("%s: %w", b.Shard, err)
		}
		same := bytes.Equal(got, src)
		switch {
		case keyed && !same:
			return &Error{Tensor: b.Name, Err: fmt.Errorf("%s: %w: the tensor's bytes there differ from what was compressed (the arena holds those: its content key %s), though the file's size and time are the same (edited in place?)", b.Shard, shardcache.ErrSourceChanged, want)}
		case !keyed && same && want != "":
			return &Error{Tensor: b.Name, Err: fmt.Errorf("%s: %w: the tensor's bytes there no longer match the content key recorded when it was compressed (%s), though the file's size and time do (edited in place?)", b.Shard, shardcache.ErrSourceChanged, want)}
		case !same:
			return &Error{Tensor: b.Name, Err: fmt.Errorf("%w: they differ from the source", ErrMismatch)}
		}
	}
	return nil
}

// copyMismatch is the error of binding b, loaded from its raw copy in
// the cache, whose bytes miss their content key want: a corrupt object
// where the copy misses it too, else a mismatch of the load's.
func copyMismatch(b *vmm.Binding, want shardcache.Key) error {
	copied := make([]byte, b.Size)
	f, err := os.Open(b.Shard)
	if err == nil {
		_, err = f.ReadAt(copied, int64(b.Offset))
		f.Close()
	}
	switch {
	case err != nil:
		return &Error{Tensor: b.Name, Err: fmt.Errorf("%s: %w", b.Shard, err)}
	case shardcache.KeyOf(copied) != want:
		return &Error{Tensor: b.Name, Err: fmt.Errorf("%s: %w: the raw copy's bytes do not match the content key %s", b.Shard, shardcache.ErrObjectCorrupt, want)}
	}
	return &Error{Tensor: b.Name, Err: fmt.Errorf("%w: they differ from the raw copy in the cache (%s), which matches its content key", ErrMismatch, b.Shard)}
}

// slice is a tensor's source slice: shard path and offset.
type slice struct {
	path string
	off  uint64
}

// keysOf maps every tensor's source slice to its content key.
func keysOf(src *shardcache.Source) map[slice]shardcache.Key {
	m := map[slice]shardcache.Key{}
	for _, sh := range src.Shards {
		for _, t := range sh.Tensors {
			m[slice{filepath.Join(src.Root, sh.Name), t.Offset}] = t.Key
		}
	}
	return m
}
