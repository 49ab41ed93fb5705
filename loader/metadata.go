package loader

import (
	"bytes"
	"fmt"

	"github.com/splitzip/splitzip/safetensors"
)

// ShardMetadata is one source shard's __metadata__ (safetensors' free
// string map), as its header holds it.
type ShardMetadata struct {
	Shard    string            `json:"shard"`    // its file name under the checkpoint's root
	Metadata map[string]string `json:"metadata"` // nil: the header has none
}

// Metadata returns every shard's __metadata__, in the checkpoint's order,
// read from the header each shard's record keeps in the cache (checked
// against its content key), so that it needs no source file.
func (l *Loader) Metadata() ([]ShardMetadata, error) {
	out := make([]ShardMetadata, 0, len(l.src.Shards))
	for i := range l.src.Shards {
		sh := &l.src.Shards[i]
		b, _, err := l.c.ReadObject(sh.Header.Key)
		if err != nil {
			return nil, fmt.Errorf("%s: header: %w", sh.Name, err)
		}
		f, err := safetensors.Read(bytes.NewReader(b), int64(sh.Size), sh.Name)
		if err != nil {
			return nil, err
		}
		out = append(out, ShardMetadata{Shard: sh.Name, Metadata: f.Metadata})
	}
	return out, nil
}
