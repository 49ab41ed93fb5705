package transport

import (
	"errors"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/vmm"
)

// Specs returns the arena specs of every tensor of a cached source, after
// checking that the source is usable: a shard that is there must be
// unchanged; a shard that is absent must have all its tensors' bytes in
// the cache (a self-contained cache), in objects of their recorded sizes,
// so every size from the index is bounded by a file before the arena is
// sized from it. A payload's spec names its source slice (the payload
// transport finds the payload by it); a raw tensor's names where its bytes
// are read, the source slice or, for an absent source, its copy in the
// cache.
func Specs(c *shardcache.Cache, src *shardcache.Source) ([]vmm.Spec, error) {
	n := 0
	for si := range src.Shards {
		n += len(src.Shards[si].Tensors)
	}
	out := make([]vmm.Spec, 0, n)
	hits := make([]shardcache.SliceHit, n) // one allocation, not one a tensor
	for si := range src.Shards {
		sh := &src.Shards[si]
		path := filepath.Join(src.Root, sh.Name)
		present, err := c.CheckShard(sh, path)
		if err != nil {
			return nil, err
		}
		for ti := range sh.Tensors {
			t := &sh.Tensors[ti]
			file, off := path, t.Offset
			if t.Stored != shardcache.StoredFixed && !present {
				// An entropy payload without its source keeps its source
				// slice: the payload transport finds it by it and
				// decodes it on the host.
				if file, off, err = c.CopySlice(sh, path, t); errors.Is(err, shardcache.ErrHostDecode) {
					file, off = path, t.Offset
				} else if err != nil {
					return nil, err
				}
			}
			hit := &hits[len(out)]
			*hit = shardcache.SliceHit{Source: src, Shard: sh, Tensor: t}
			if t.Stored != shardcache.StoredRaw || t.CopyStored {
				c.Resolve(hit) // its object, found once here rather than at every fault
			}
			out = append(out, vmm.Spec{Name: t.Name, DType: t.DType, Shape: t.Shape, Shard: file, Offset: off, Size: t.Size, Ref: hit})
		}
	}
	return out, nil
}

// layerPrefix starts the names of a decoder layer's tensors.
const layerPrefix = "model.layers."

// LayerOf returns the layer of a tensor named "model.layers.N. ...": the
// groups a load faults in, one layer at a time after the others
// (embeddings, final norm, head), and the groups in which a shared copy
// of the payloads lays them out (LayoutShared).
func LayerOf(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, layerPrefix)
	if !ok {
		return 0, false
	}
	digits, _, ok := strings.Cut(rest, ".")
	if !ok || digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	return n, err == nil
}
