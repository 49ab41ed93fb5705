// Package checkpoint finds the shards of a safetensors checkpoint: one
// .safetensors file, a directory of them, or a model.safetensors.index.json,
// and reads and checks their headers.
package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/splitzip/splitzip/safetensors"
)

// ErrNoShards reports a path that holds no safetensors files.
var ErrNoShards = errors.New("no safetensors files found")

// Shard is one safetensors file of a checkpoint.
type Shard struct {
	Name    string // path relative to Root
	Path    string
	Size    uint64
	ModTime time.Time
	Header  *safetensors.File
}

// Checkpoint is a set of shards under one root directory.
type Checkpoint struct {
	Root      string // absolute, symlinks resolved
	Index     *safetensors.Index
	IndexName string // file name of the index in Root, if any
	Shards    []*Shard
}

// Open resolves path to a checkpoint and reads every shard's header.
// Symlinks are followed for reading but names come from the path given:
// in a Hugging Face hub snapshot the shards and the index are links into
// blobs/, and the checkpoint is still model.safetensors.index.json and
// its model-*.safetensors files.
func Open(path string) (*Checkpoint, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		if abs, err = filepath.EvalSymlinks(abs); err != nil {
			return nil, err
		}
	} else {
		// Resolve the directory only, and keep the file's own name.
		dir, err := filepath.EvalSymlinks(filepath.Dir(abs))
		if err != nil {
			return nil, err
		}
		abs = filepath.Join(dir, filepath.Base(abs))
	}
	ck := &Checkpoint{Root: abs}
	var names []string
	switch {
	case st.IsDir():
		if _, err := os.Stat(filepath.Join(abs, safetensors.IndexFileName)); err == nil {
			return openIndexed(ck, filepath.Join(abs, safetensors.IndexFileName))
		}
		ents, err := os.ReadDir(abs)
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".safetensors") && !e.IsDir() {
				if fi, err := os.Stat(filepath.Join(abs, e.Name())); err == nil && fi.Mode().IsRegular() {
					names = append(names, e.Name())
				}
			}
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("%s: %w", abs, ErrNoShards)
		}
	case strings.HasSuffix(abs, ".json"):
		ck.Root = filepath.Dir(abs)
		return openIndexed(ck, abs)
	default:
		ck.Root = filepath.Dir(abs)
		names = []string{filepath.Base(abs)}
	}
	sort.Strings(names)
	return ck, ck.readShards(names)
}

func openIndexed(ck *Checkpoint, path string) (*Checkpoint, error) {
	ix, err := safetensors.ReadIndex(path)
	if err != nil {
		return nil, err
	}
	ck.Index = ix
	ck.IndexName = filepath.Base(path)
	if err := ck.readShards(ix.Shards()); err != nil {
		return nil, err
	}
	// Every tensor the index names must be in the shard it names.
	have := map[string]map[string]bool{}
	for _, s := range ck.Shards {
		have[s.Name] = map[string]bool{}
		for _, t := range s.Header.Tensors {
			have[s.Name][t.Name] = true
		}
	}
	for name, shard := range ix.WeightMap {
		if !have[shard][name] {
			return nil, &safetensors.FormatError{File: filepath.Join(ck.Root, shard), Tensor: name,
				Reason: "named in " + ck.IndexName + " but not in this shard"}
		}
	}
	return ck, nil
}

func (ck *Checkpoint) readShards(names []string) error {
	for _, n := range names {
		p := filepath.Join(ck.Root, n)
		f, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("shard %s: %w", p, err)
		}
		if err != nil {
			return err
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return err
		}
		if !st.Mode().IsRegular() {
			f.Close()
			return fmt.Errorf("shard %s: not a regular file", p)
		}
		h, err := safetensors.Read(f, st.Size(), p)
		f.Close()
		if err != nil {
			return err
		}
		ck.Shards = append(ck.Shards, &Shard{Name: n, Path: p, Size: uint64(st.Size()), ModTime: st.ModTime(), Header: h})
	}
	return nil
}

// Contains reports whether path is root or inside it, after resolving
// symlinks of the longest existing prefix of path.
func Contains(root, path string) bool {
	abs, err := filepath.Abs(path)
	if err != nil {
		return false
	}
	// Resolve what exists of path.
	rest := ""
	for {
		if r, err := filepath.EvalSymlinks(abs); err == nil {
			abs = filepath.Join(r, rest)
			break
		}
		parent := filepath.Dir(abs)
		if parent == abs {
			break
		}
		rest = filepath.Join(filepath.Base(abs), rest)
		abs = parent
	}
	rel, err := filepath.Rel(root, abs)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
