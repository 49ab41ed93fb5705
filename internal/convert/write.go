package convert

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/splitzip/splitzip/safetensors"
)

// WriteCheckpoint writes tensors as safetensors shards of at most
// shardBytes of data each (a tensor larger than that gets a shard of its
// own) into dir, with a model.safetensors.index.json, and returns the
// shard file names. Tensor names must be distinct.
func WriteCheckpoint(dir string, tensors []Tensor, shardBytes uint64, metadata map[string]string) ([]string, error) {
	seen := map[string]bool{}
	for _, t := range tensors {
		if seen[t.Name] {
			return nil, fmt.Errorf("convert: tensor name %q is used twice", t.Name)
		}
		seen[t.Name] = true
	}
	var groups [][]Tensor
	var cur []Tensor
	var size, total uint64
	for _, t := range tensors {
		n := uint64(len(t.Data))
		if len(cur) > 0 && size+n > shardBytes {
			groups, cur, size = append(groups, cur), nil, 0
		}
		cur, size, total = append(cur, t), size+n, total+n
	}
	if len(cur) > 0 || len(groups) == 0 {
		groups = append(groups, cur)
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, err
	}
	weightMap := map[string]string{}
	var names []string
	for i, g := range groups {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(groups))
		specs := make([]safetensors.TensorSpec, len(g))
		for k, t := range g {
			specs[k] = safetensors.TensorSpec{Name: t.Name, DType: t.DType, Shape: t.Shape, Size: uint64(len(t.Data))}
			weightMap[t.Name] = name
		}
		head, _, err := safetensors.EncodeHeader(metadata, specs)
		if err != nil {
			return nil, err
		}
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		_, err = f.Write(head)
		for _, t := range g {
			if err == nil {
				_, err = f.Write(t.Data)
			}
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	ix, err := json.MarshalIndent(map[string]any{"metadata": map[string]uint64{"total_size": total}, "weight_map": weightMap}, "", "  ")
	if err != nil {
		return nil, err
	}
	return names, os.WriteFile(filepath.Join(dir, safetensors.IndexFileName), append(ix, '\n'), 0o666)
}
