package safetensors

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// IndexFileName is the conventional name of a sharded checkpoint's index.
const IndexFileName = "model.safetensors.index.json"

// maxIndexSize bounds the index file read into memory.
const maxIndexSize = 64 << 20

// Index is a sharded checkpoint's model.safetensors.index.json.
type Index struct {
	Raw       []byte            // the file as stored
	WeightMap map[string]string // tensor name to shard file name
}

// Shards returns the distinct shard file names, sorted.
func (ix *Index) Shards() []string {
	seen := map[string]bool{}
	var out []string
	for _, f := range ix.WeightMap {
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out
}

// ReadIndex reads and checks an index file. Shard names must be plain file
// names in the index's directory.
func ReadIndex(path string) (*Index, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() > maxIndexSize {
		return nil, &FormatError{File: path, Reason: fmt.Sprintf("index of %d bytes exceeds the limit of %d", st.Size(), maxIndexSize)}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if bytes.HasPrefix(raw, []byte("\xef\xbb\xbf")) {
		return nil, &FormatError{File: path, Reason: "not a JSON index: it starts with a UTF-8 byte-order mark, which JSON does not allow (save it without one)"}
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, &FormatError{File: path, Reason: fmt.Sprintf("not a JSON index: %v", err)}
	}
	if len(doc.WeightMap) == 0 {
		return nil, &FormatError{File: path, Reason: "weight_map is missing or empty"}
	}
	for name, f := range doc.WeightMap {
		if f == "" || f != filepath.Base(f) || strings.HasPrefix(f, ".") {
			return nil, &FormatError{File: path, Tensor: name, Reason: fmt.Sprintf("shard %q is not a plain file name", f)}
		}
	}
	return &Index{Raw: raw, WeightMap: doc.WeightMap}, nil
}
