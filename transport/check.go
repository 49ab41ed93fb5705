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
// them) back from eng and compares it with its source slice or, where
// the source is absent, with its content key; the first difference is an
// *Error naming the tensor.
func CheckArena(eng engine.Engine, bs []*vmm.Binding, src *shardcache.Source) error {
	keys := keysOf(src)
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
		f, ok := files[b.Shard]
		if !ok {
			var err error
			f, err = os.Open(b.Shard)
			if errors.Is(err, fs.ErrNotExist) {
				// An absent source (or a remote cache's file): the
				// content key is the reference.
				want := keys[slice{b.Shard, b.Offset}]
				if hit, ok := b.Ref.(*shardcache.SliceHit); ok && hit != nil {
					want = hit.Tensor.Key
				}
				if shardcache.KeyOf(got) != want {
					return &Error{Tensor: b.Name, Err: fmt.Errorf("%w: they do not match the content key", ErrMismatch)}
				}
				continue
			}
			if err != nil {
				return err
			}
			files[b.Shard] = f
		}
		want := make([]byte, b.Size)
		if _, err := f.ReadAt(want, int64(b.Offset)); err != nil {
			return fmt.Errorf("%s: %w", b.Shard, err)
		}
		if !bytes.Equal(got, want) {
			return &Error{Tensor: b.Name, Err: fmt.Errorf("%w: they differ from the source", ErrMismatch)}
		}
	}
	return nil
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
