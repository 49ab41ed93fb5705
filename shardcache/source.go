package shardcache

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ErrAmbiguousSource reports a cache of several checkpoints and no choice
// among them. Its text names no flag or argument: each front end says how
// its users choose (the CLI's --source, Python's source=).
var ErrAmbiguousSource = errors.New("the cache holds several checkpoints; choose one")

// Path returns the resolved path that identifies the checkpoint s was
// compressed from: its index file when it has one; its one shard when it
// has a single shard and no index, since several single-file checkpoints
// can share a folder; else its root directory. A cache holds at most one
// source of each path (Writer.SetSource).
func (s *Source) Path() string {
	switch {
	case s.Index != nil:
		return filepath.Join(s.Root, s.Index.Name)
	case len(s.Shards) == 1:
		return filepath.Join(s.Root, s.Shards[0].Name)
	}
	return s.Root
}

// SourceFor returns the position in ix.Sources of the checkpoint that path
// names, a path as the shell gave it (relative to the working directory,
// symlinks allowed): the source whose Path it is, else the one source
// whose root it is. Several sources under that root are ErrAmbiguousSource
// (name the file); none is ErrNotFound. It does not look for checkpoints
// that moved (Cache.FindSource does).
func (ix *Index) SourceFor(path string) (int, error) {
	cands := resolvedForms(path)
	for _, p := range cands {
		for i := range ix.Sources {
			if ix.Sources[i].Path() == p {
				return i, nil
			}
		}
	}
	for _, p := range cands {
		var at []int
		for i := range ix.Sources {
			if ix.Sources[i].Root == p {
				at = append(at, i)
			}
		}
		switch len(at) {
		case 0:
			continue
		case 1:
			return at[0], nil
		}
		paths := make([]string, len(at))
		for j, i := range at {
			paths[j] = ix.Sources[i].Path()
		}
		return -1, fmt.Errorf("%w: %s holds %d of them (%s); name the file", ErrAmbiguousSource, p, len(at), strings.Join(paths, ", "))
	}
	return -1, fmt.Errorf("source %s: %w", path, ErrNotFound)
}

// resolvedForms returns path as given, absolute, and with symlinks resolved
// (of its directory only, when it names no file: a checkpoint that is
// gone can still be named), without duplicates.
func resolvedForms(path string) []string {
	forms := []string{path}
	add := func(p string) {
		for _, f := range forms {
			if f == p {
				return
			}
		}
		forms = append(forms, p)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return forms
	}
	add(abs)
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		add(r)
	} else if d, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		add(filepath.Join(d, filepath.Base(abs)))
	}
	return forms
}

// PickSource returns the source of the cache that sel names (FindSource)
// with Root set to the directory its shards are in now.
func (c *Cache) PickSource(sel string) (*Source, error) {
	rec, dir, err := c.FindSource(sel)
	if err != nil || rec.Root == dir {
		return rec, err
	}
	moved := *rec
	moved.Root = dir
	return &moved, nil
}

// FindSource returns the record of the source sel names and the directory
// its shards are in now:
//   - sel empty: the only source, at its recorded root;
//   - sel a source's Path or a recorded root (Index.SourceFor);
//   - sel the folder a pulled checkpoint was compressed from, or a file
//     of it (PulledRoot);
//   - sel another directory (or file): the one source whose shards are
//     there as holdsShards wants them (a checkpoint moved, copied or
//     mounted elsewhere: every shard with a tensor the cache does not
//     hold, with its recorded size), and sel. Where several are (a
//     fine-tune beside its base: the same names and sizes), the bytes
//     of the smallest piece their keys differ in pick one (byContent),
//     then the shards' modification times. The index is not changed
//     (Writer.Relocate records the new place).
func (c *Cache) FindSource(sel string) (*Source, string, error) {
	srcs := c.Index().Sources
	if sel == "" {
		switch len(srcs) {
		case 0:
			return nil, "", c.noCheckpoint()
		case 1:
			return &srcs[0], srcs[0].Root, nil
		}
		paths := make([]string, len(srcs))
		for i := range srcs {
			paths[i] = srcs[i].Path()
		}
		return nil, "", fmt.Errorf("%s: %w: %s", c.Dir(), ErrAmbiguousSource, strings.Join(paths, ", "))
	}
	i, err := c.Index().SourceFor(sel)
	switch {
	case err == nil:
		return &srcs[i], srcs[i].Root, nil
	case !errors.Is(err, ErrNotFound):
		return nil, "", fmt.Errorf("%s: %w", c.Dir(), err)
	}
	if i := pulledAt(srcs, sel); i >= 0 {
		// The folder a pulled checkpoint was compressed from, on the
		// machine that pushed it: the cache's record, never the files
		// that lie there on this one.
		return &srcs[i], srcs[i].Root, nil
	}
	abs, err := filepath.Abs(sel)
	if err != nil {
		return nil, "", err
	}
	dir, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, "", fmt.Errorf("%s: source %s: %w (%w)", c.Dir(), sel, ErrNotFound, err)
	}
	// A file names a single-file checkpoint (or an index) that moved: look
	// for the sources of that name in its folder.
	name := ""
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		dir, name = filepath.Dir(dir), filepath.Base(dir)
	}
	var found []*Source
	for i := range srcs {
		if holdsShards(dir, &srcs[i]) && (name == "" || filepath.Base(srcs[i].Path()) == name) {
			found = append(found, &srcs[i])
		}
	}
	if len(found) > 1 {
		// A fine-tune's shards have its base's names and sizes: the
		// bytes of a piece whose keys differ tell them apart.
		found = byContent(dir, found)
	}
	if len(found) > 1 {
		// Sources with the same bytes where dir has them (or whose
		// piece could not be read): the modification times a move
		// keeps tell them apart.
		var same []*Source
		for _, s := range found {
			if sameTimes(dir, s) {
				same = append(same, s)
			}
		}
		if len(same) == 1 {
			found = same
		}
	}
	switch len(found) {
	case 0:
		return nil, "", notFound(fmt.Sprintf("%s: %s is no recorded source root and holds the shards of none of the cache's sources%s", c.Dir(), sel, nearest(dir, name, srcs)))
	case 1:
		return found[0], dir, nil
	}
	paths := make([]string, len(found))
	for i, s := range found {
		paths[i] = s.Path()
	}
	return nil, "", fmt.Errorf("%s: %w: %s holds the shards of %d of them by name and size (%s), and neither their bytes nor their modification times tell which; name one by its recorded path, or, if this folder is one of them moved, record its place with 'splitzip relocate %s %s --source RECORDED-PATH' (which checks its bytes)",
		c.Dir(), ErrAmbiguousSource, sel, len(found), strings.Join(paths, ", "), c.Dir(), sel)
}

// maxContentRead is the most bytes byContent reads to tell sources apart.
const maxContentRead = 256 << 20

// byContent keeps the sources of found whose bytes dir holds. It finds the
// smallest piece (a shard's header or a tensor; the first by shard name
// and offset among equals) at the same place in every source's shard of
// the same name, a shard dir has with its recorded size, whose recorded
// keys are not all the same; reads it from dir and keeps the sources whose
// key for it matches; and goes on while several are left and a piece
// tells them apart. found is returned as is where no piece does (the
// sources record the same bytes wherever dir has their shards), the piece
// is larger than maxContentRead or cannot be read, or dir's bytes match
// none of the sources (the one verify then checks names what differs).
func byContent(dir string, found []*Source) []*Source {
	for len(found) > 1 {
		p, keys, ok := differingPiece(dir, found)
		if !ok {
			return found
		}
		got, err := pieceKey(filepath.Join(dir, p.shard), p.offset, p.size)
		if err != nil {
			return found
		}
		var same []*Source
		for i, s := range found {
			if keys[i] == got {
				same = append(same, s)
			}
		}
		if len(same) == 0 {
			return found
		}
		found = same
	}
	return found
}

// piece is a byte range of a shard.
type piece struct {
	shard        string
	offset, size uint64
}

// differingPiece is byContent's choice of a piece to read, with each
// source's key for it (in found's order).
func differingPiece(dir string, found []*Source) (piece, []Key, bool) {
	keys := map[piece][]Key{}
	for i, s := range found {
		for _, sh := range s.Shards {
			if st, err := os.Stat(filepath.Join(dir, sh.Name)); err != nil || uint64(st.Size()) != sh.Size {
				continue
			}
			add := func(off, size uint64, k Key) {
				p := piece{sh.Name, off, size}
				if len(keys[p]) == i {
					keys[p] = append(keys[p], k)
				}
			}
			add(sh.Header.Offset, sh.Header.Size, sh.Header.Key)
			for _, t := range sh.Tensors {
				add(t.Offset, t.Size, t.Key)
			}
		}
	}
	var best piece
	ok := false
	for p, ks := range keys {
		if len(ks) != len(found) || p.size > maxContentRead || !slices.ContainsFunc(ks, func(k Key) bool { return k != ks[0] }) {
			continue
		}
		if !ok || p.size < best.size || p.size == best.size && (p.shard < best.shard || p.shard == best.shard && p.offset < best.offset) {
			best, ok = p, true
		}
	}
	return best, keys[best], ok
}

// pieceKey is the content key of size bytes of the file at path from
// offset, hashed as they are read (a piece may be up to maxContentRead).
func pieceKey(path string, offset, size uint64) (Key, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := NewHasher()
	if n, err := io.Copy(h, io.NewSectionReader(f, int64(offset), int64(size))); err != nil || uint64(n) != size {
		return "", fmt.Errorf("%s: read %d of %d bytes at %d: %w", path, n, size, offset, cmp.Or(err, io.ErrUnexpectedEOF))
	}
	return KeyFromSum([32]byte(h.Sum(nil))), nil
}

// sameTimes reports whether every shard of s that dir has has its
// recorded modification time.
func sameTimes(dir string, s *Source) bool {
	for _, sh := range s.Shards {
		st, err := os.Stat(filepath.Join(dir, sh.Name))
		if errors.Is(err, fs.ErrNotExist) {
			continue // a shard the cache holds whole (holdsShards checked)
		}
		if err != nil || !st.ModTime().Equal(sh.ModTime) {
			return false
		}
	}
	return true
}

// HoldsShards reports whether dir holds the shards of s with their
// recorded sizes (those the cache holds every tensor of may be absent).
func HoldsShards(dir string, s *Source) bool { return holdsShards(dir, s) }

// holdsShards reports whether dir has the shards of s that a moved copy
// must have: at least one, and every shard with a tensor the cache does
// not hold, each with its recorded size (shardsIn).
func holdsShards(dir string, s *Source) bool {
	held, lacks := shardsIn(dir, s)
	return held > 0 && len(lacks) == 0
}

// shardsIn counts the shards of s that dir has with their recorded
// size, and says what is wrong with each of the rest. A shard whose every
// tensor the cache holds (AllInCache) may be absent, as at the recorded
// root, and so may the index file, which the cache holds whole.
func shardsIn(dir string, s *Source) (held int, lacks []string) {
	for _, sh := range s.Shards {
		st, err := os.Stat(filepath.Join(dir, sh.Name))
		switch {
		case errors.Is(err, fs.ErrNotExist) && sh.AllInCache():
		case err != nil:
			lacks = append(lacks, sh.Name+" is missing")
		case uint64(st.Size()) != sh.Size:
			why := fmt.Sprintf("%s has %d bytes, the recorded shard %d", sh.Name, st.Size(), sh.Size)
			if sh.AllInCache() {
				why += " (the cache holds its every tensor: a copy without this file is one)"
			}
			lacks = append(lacks, why)
		default:
			held++
		}
	}
	return held, lacks
}

// nearest says which source dir holds some shards of, and what it
// lacks of it ("" where it holds none of any): why dir is no moved copy.
func nearest(dir, name string, srcs []Source) string {
	best, most := -1, 0
	var lacks []string
	for i := range srcs {
		if name != "" && filepath.Base(srcs[i].Path()) != name {
			continue
		}
		if held, l := shardsIn(dir, &srcs[i]); held > most {
			best, most, lacks = i, held, l
		}
	}
	if best < 0 {
		return ""
	}
	more := ""
	if len(lacks) > 3 {
		lacks, more = lacks[:3], fmt.Sprintf(" and %d more", len(lacks)-3)
	}
	return fmt.Sprintf("; it holds %d of the %d shards of %s: %s%s", most, len(srcs[best].Shards), srcs[best].Path(), strings.Join(lacks, ", "), more)
}

// notFound is ErrNotFound in words of its own: msg says what was not
// found, without the sentinel's "not in the cache" after it.
type notFound string

func (e notFound) Error() string { return string(e) }

// Is reports ErrNotFound.
func (e notFound) Is(target error) bool { return target == ErrNotFound }
