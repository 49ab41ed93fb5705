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
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/splitzip/splitzip/safetensors"
)

// ErrNoShards reports a path that holds no safetensors files.
var ErrNoShards = errors.New("no safetensors files found")

// ErrSeveralIndexes reports a folder with several indexes (variants of one
// model, say) and none named model.safetensors.index.json: which one is
// the checkpoint is for the caller to say, by its path.
var ErrSeveralIndexes = errors.New("the folder holds several safetensors indexes")

// indexSuffix ends the name of any safetensors index: the conventional
// model.safetensors.index.json, diffusers' diffusion_pytorch_model
// .safetensors.index.json and its variants (...fp16.safetensors.index.json).
const indexSuffix = ".safetensors.index.json"

// MissingError reports a shard the checkpoint names that is not there: a
// file the index names that does not exist, or a link, named in the index
// or found in the folder, to nothing. It matches fs.ErrNotExist.
type MissingError struct {
	File  string // the shard's path
	Index string // the index that names it, if any
	Link  string // where the link points, if the shard is a broken link
}

func (e *MissingError) Error() string {
	what := e.File + ": shard"
	if e.Index != "" {
		what += " named in " + e.Index
	}
	if e.Link != "" {
		return what + " is a link to " + e.Link + ", which does not exist"
	}
	return what + " does not exist"
}

// Unwrap returns fs.ErrNotExist.
func (e *MissingError) Unwrap() error { return fs.ErrNotExist }

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
	// Unindexed names the .safetensors files of a folder opened through
	// its index that the index does not name (not part of the
	// checkpoint: a consolidated copy, another model's file).
	Unindexed []string
	// LeftOut names what a folder holds beside the checkpoint that is not
	// part of it: other indexes, and subfolders with .safetensors files
	// (diffusers' unet/, text_encoder/), which are checkpoints of their
	// own.
	LeftOut []string
	// Others names the other files of a folder compressed whole (not
	// .safetensors, not an index, not hidden: config.json, a tokenizer,
	// a README), which a cache does not hold.
	Others []string
	// Duplicates lists the tensor names that more than one shard holds:
	// a checkpoint a loader cannot serve by name (decompress restores it).
	Duplicates []Duplicate
	// Unnamed lists tensors of an indexed checkpoint's shards that its
	// index does not name.
	Unnamed []string
}

// Duplicate is a tensor name that several shards hold.
type Duplicate struct {
	Name   string   `json:"name"`
	Shards []string `json:"shards"`
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
		if errors.Is(err, fs.ErrNotExist) {
			if lst, lerr := os.Lstat(abs); lerr == nil && lst.Mode()&fs.ModeSymlink != 0 {
				return nil, missing(abs, "") // a link to nothing
			}
		}
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
		ents, err := os.ReadDir(abs)
		if err != nil {
			return nil, err
		}
		index, others, err := folderIndex(abs, ents)
		if err != nil {
			return nil, err
		}
		ck.LeftOut = append(others, subfolders(abs, ents)...)
		ck.Others = otherFiles(abs, ents, ck.LeftOut)
		if index != "" {
			if _, err := openIndexed(ck, filepath.Join(abs, index)); err != nil {
				return nil, err
			}
			ck.Unindexed = ck.unindexed()
			ck.note()
			return ck, nil
		}
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".safetensors") || e.IsDir() {
				continue
			}
			p := filepath.Join(abs, e.Name())
			fi, err := os.Stat(p)
			if errors.Is(err, fs.ErrNotExist) {
				// A link to nothing: a shard that was meant to be here.
				return nil, missing(p, "")
			}
			if err != nil {
				return nil, err
			}
			if fi.Mode().IsRegular() {
				names = append(names, e.Name())
			}
		}
		if len(names) == 0 {
			if len(ck.LeftOut) > 0 {
				return nil, fmt.Errorf("%s: %w in the folder itself; it holds %s (compress each by its path)", abs, ErrNoShards, strings.Join(ck.LeftOut, ", "))
			}
			return nil, fmt.Errorf("%s: %w", abs, ErrNoShards)
		}
	case strings.HasSuffix(abs, ".json"):
		ck.Root = filepath.Dir(abs)
		if _, err := openIndexed(ck, abs); err != nil {
			return nil, err
		}
		if ents, err := os.ReadDir(ck.Root); err == nil {
			ck.Others = otherFiles(ck.Root, ents, subfolders(ck.Root, ents))
		}
		ck.note()
		return ck, nil
	default:
		ck.Root = filepath.Dir(abs)
		names = []string{filepath.Base(abs)}
	}
	sort.Strings(names)
	if err := ck.readShards(names); err != nil {
		return nil, err
	}
	ck.note()
	return ck, nil
}

// folderIndex picks the index of the folder abs, whose entries are ents:
// model.safetensors.index.json if there is one, else the only file
// named *.safetensors.index.json ("" if none). others are the indexes
// left out, described for LeftOut. Several and none conventional is
// ErrSeveralIndexes.
func folderIndex(abs string, ents []os.DirEntry) (index string, others []string, err error) {
	var all []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), indexSuffix) && !e.IsDir() {
			all = append(all, e.Name())
		}
	}
	switch {
	case slices.Contains(all, safetensors.IndexFileName):
		index = safetensors.IndexFileName
	case len(all) == 1:
		index = all[0]
	case len(all) > 1:
		return "", nil, fmt.Errorf("%s: %w (%s): name one by its path", abs, ErrSeveralIndexes, strings.Join(all, ", "))
	}
	for _, n := range all {
		if n != index {
			others = append(others, n+" (another index: compress it by its path)")
		}
	}
	return index, others, nil
}

// maxWalk bounds the entries subfolders looks at below each subfolder.
const maxWalk = 10000

// otherFiles names what the folder abs (entries ents) holds besides the
// checkpoint and what LeftOut names (Checkpoint.Others): files that are
// neither .safetensors files nor indexes, and subfolders without
// .safetensors files below them (Llama's original/), as "name/"; hidden
// entries apart. A link is named as what it points to.
func otherFiles(abs string, ents []os.DirEntry, leftOut []string) []string {
	var out []string
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, ".") || strings.HasSuffix(n, ".safetensors") || strings.HasSuffix(n, indexSuffix) {
			continue
		}
		dir := e.IsDir()
		if e.Type()&fs.ModeSymlink != 0 {
			if st, err := os.Stat(filepath.Join(abs, n)); err == nil {
				dir = st.IsDir()
			}
		}
		if !dir {
			out = append(out, n)
			continue
		}
		if !slices.ContainsFunc(leftOut, func(l string) bool { return strings.HasPrefix(l, n+"/") }) {
			out = append(out, n+"/")
		}
	}
	return out
}

// subfolders describes the subfolders of abs (entries ents) below which
// .safetensors files lie, hidden ones (.git, .cache) apart. Each is
// searched up to maxWalk entries: a count that stopped there says "at
// least".
func subfolders(abs string, ents []os.DirEntry) []string {
	var out []string
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		top := filepath.Join(abs, e.Name())
		n, seen := 0, 0
		filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if seen++; seen > maxWalk {
				return fs.SkipAll
			}
			switch {
			case err != nil:
				return nil
			case d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != top:
				return fs.SkipDir
			case !d.IsDir() && strings.HasSuffix(d.Name(), ".safetensors"):
				n++
			}
			return nil
		})
		if n > 0 {
			least := ""
			if seen > maxWalk {
				least = "at least "
			}
			out = append(out, fmt.Sprintf("%s/ (%s%d .safetensors %s)", e.Name(), least, n, map[bool]string{true: "file", false: "files"}[n == 1]))
		}
	}
	return out
}

// note finds the tensor names that several shards hold and, for an
// indexed checkpoint, the tensors its index does not name.
func (ck *Checkpoint) note() {
	where := map[string][]string{}
	for _, s := range ck.Shards {
		for _, t := range s.Header.Tensors {
			where[t.Name] = append(where[t.Name], s.Name)
			if ck.Index != nil {
				if _, ok := ck.Index.WeightMap[t.Name]; !ok {
					ck.Unnamed = append(ck.Unnamed, s.Name+": "+t.Name)
				}
			}
		}
	}
	for name, shards := range where {
		if len(shards) > 1 {
			ck.Duplicates = append(ck.Duplicates, Duplicate{Name: name, Shards: shards})
		}
	}
	slices.SortFunc(ck.Duplicates, func(a, b Duplicate) int { return strings.Compare(a.Name, b.Name) })
}

// unindexed returns the .safetensors files in Root that are not shards
// of ck.
func (ck *Checkpoint) unindexed() []string {
	ents, err := os.ReadDir(ck.Root)
	if err != nil {
		return nil
	}
	shard := map[string]bool{}
	for _, s := range ck.Shards {
		shard[s.Name] = true
	}
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".safetensors") && !e.IsDir() && !shard[e.Name()] {
			out = append(out, e.Name())
		}
	}
	return out
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
			return missing(p, ck.IndexName)
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

// missing describes the shard at p, named in the index (if not empty),
// that os.Stat or os.Open did not find.
func missing(p, index string) error {
	e := &MissingError{File: p, Index: index}
	if target, err := os.Readlink(p); err == nil {
		e.Link = target
	}
	return e
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
