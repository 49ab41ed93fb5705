package pipeline

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/splitzip/splitzip/atomicfile"
	"github.com/splitzip/splitzip/checkpoint"
	"github.com/splitzip/splitzip/shardcache"
)

// DecompressOptions configures Decompress.
type DecompressOptions struct {
	Output   string // directory for the restored files; must not hold them yet
	Source   string // which source to restore when the cache holds several (its root)
	Memory   uint64 // memory budget in bytes; 0 means DefaultMemory
	Decoder  Decoder
	Progress Progress
}

// DecompressResult reports a Decompress run.
type DecompressResult struct {
	Source string `json:"source"` // the checkpoint's recorded root
	// Checkpoint is its path (Source.Path: its index, or its one file,
	// else its root): which of the checkpoints of one folder it was.
	Checkpoint string        `json:"checkpoint"`
	Output     string        `json:"output"`
	Files      []string      `json:"files"`
	Bytes      uint64        `json:"bytes"`
	Duration   time.Duration `json:"duration_ns"`
	// StaleTemps counts the temporary files killed runs had left in the
	// output folders, which this run removed.
	StaleTemps int `json:"stale_temp_files_removed"`
	// IndexDamaged is the error of the cache's index where the cache was
	// read from the index's backup (as InspectResult's).
	IndexDamaged string `json:"index_damaged,omitempty"`
}

// Decompress rebuilds the original safetensors files (and index) of one
// source, byte for byte, a piece at a time. Tensors left raw and not
// copied into the cache are read from the source, which must be
// unchanged. The files are written under temporary names and renamed into
// place only when all of them are complete, so a failed run (a full
// disk, a changed source) leaves none of them behind; a new output folder
// is renamed into place whole, so a killed run leaves none of them either.
// Temporary files that killed runs left are removed (StaleTemps).
func Decompress(ctx context.Context, dir string, opts DecompressOptions) (res *DecompressResult, err error) {
	start := time.Now()
	c, err := openCache(ctx, dir, &opts.Decoder)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	mem, err := newBudget(opts.Memory)
	if err != nil {
		return nil, err
	}
	p := orNop(opts.Progress)
	if err := c.RequireCheckpoint(); err != nil {
		return nil, err
	}
	s, err := c.PickSource(opts.Source)
	if err != nil {
		return nil, err
	}
	if err := shardcache.CheckOutside(dir, opts.Output, "the output folder"); err != nil {
		return nil, err
	}
	if checkpoint.Contains(s.Root, opts.Output) && sourcePresent(s) {
		// Where the source is gone (a self-contained cache), its old
		// place is where a user restores it (trial 70).
		return nil, &TensorError{File: opts.Output, Err: fmt.Errorf("%w %s", ErrOutputInSource, s.Root)}
	}
	res = &DecompressResult{Source: s.Root, Checkpoint: s.Path(), Output: opts.Output}
	if err := c.Damaged(); err != nil {
		res.IndexDamaged = err.Error()
	}
	var names []string
	if s.Index != nil {
		names = append(names, s.Index.Name)
	}
	for _, sh := range s.Shards {
		names = append(names, sh.Name)
	}
	if st, err := os.Stat(opts.Output); err == nil && !st.IsDir() {
		return nil, &TensorError{File: opts.Output, Err: fmt.Errorf("%w: it is a file, and the restored files need a folder", ErrOutputExists)}
	}
	for _, n := range names {
		if _, err := os.Lstat(filepath.Join(opts.Output, n)); !errors.Is(err, fs.ErrNotExist) {
			return nil, &TensorError{File: filepath.Join(opts.Output, n), Err: fmt.Errorf("%w: refusing to overwrite it; choose another folder or remove it", ErrOutputExists)}
		}
	}
	// Folders this run makes; a failed run removes them again when they
	// are empty, so it leaves no new empty folder behind.
	var made []string
	defer func() {
		if err != nil {
			for i := len(made) - 1; i >= 0; i-- {
				os.Remove(made[i])
			}
		}
	}()
	// A new output folder is built under a temporary name beside it and
	// renamed into place whole, so that a run killed at any point leaves
	// all of the files or none of them (and a temporary folder the next
	// run removes). Into a folder that exists, the files are renamed in
	// when all of them are complete.
	out, stage := opts.Output, ""
	defer func() {
		if err != nil && stage != "" {
			os.RemoveAll(stage)
		}
	}()
	// A killed run's temporary files and folders are removed from every
	// folder this one writes into; a live writer's stay (atomicfile.Stale).
	cleaned := map[string]bool{}
	clean := func(d string) error {
		if cleaned[d] {
			return nil
		}
		cleaned[d] = true
		files, _, err := atomicfile.RemoveStale(d)
		res.StaleTemps += files
		return err
	}
	if _, err := os.Lstat(opts.Output); errors.Is(err, fs.ErrNotExist) {
		parent := filepath.Dir(filepath.Clean(opts.Output))
		if err := makeDirs(parent, &made); err != nil {
			return nil, err
		}
		if err := clean(parent); err != nil {
			return nil, err
		}
		if stage, err = atomicfile.MkdirTemp(parent, filepath.Base(filepath.Clean(opts.Output))); err != nil {
			return nil, outputError(err, opts.Output)
		}
		out = stage
	}
	for _, n := range names {
		if err := clean(filepath.Dir(filepath.Join(out, n))); err != nil {
			return nil, err
		}
	}
	var total uint64
	for _, sh := range s.Shards {
		total += sh.Size
	}
	p.Start("decompress", total)
	defer p.Finish()
	buf, release, err := mem.take(ctx, uint64(pieceBytes)+writeBuffer)
	if err != nil {
		return nil, err
	}
	defer release()
	// Files written so far, under their temporary names until the end.
	type written struct{ tmp, path string }
	var done []written
	defer func() {
		if err != nil {
			for _, w := range done {
				os.Remove(w.tmp)
			}
		}
	}()
	if err := makeDirs(out, &made); err != nil {
		return nil, err
	}
	if s.Index != nil {
		path := filepath.Join(out, s.Index.Name)
		tmp, err := writeTemp(ctx, path, filepath.Join(opts.Output, s.Index.Name), func(w *bufio.Writer) error {
			obj, _, err := c.OpenObject(s.Index.Key)
			if err != nil {
				return objectFault(c, s.Index.Key, "", err)
			}
			defer obj.Close()
			if err := copyChecked(w, obj, 0, s.Index.Size, s.Index.Key, buf.a, shardcache.ErrObjectCorrupt); err != nil {
				return objectFault(c, s.Index.Key, "", err)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		done = append(done, written{tmp, path})
	}
	for i := range s.Shards {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		sh := &s.Shards[i]
		path := filepath.Join(out, sh.Name)
		if err := makeDirs(filepath.Dir(path), &made); err != nil {
			return nil, outputError(err, filepath.Dir(filepath.Join(opts.Output, sh.Name)))
		}
		tmp, err := writeTemp(ctx, path, filepath.Join(opts.Output, sh.Name), func(w *bufio.Writer) error { return restoreShard(c, s, sh, opts.Decoder, w, p, buf) })
		if err != nil {
			return nil, err
		}
		done = append(done, written{tmp, path})
		// The time compress recorded, so that the restored folder is
		// the source as the cache knows it (verify and loads check
		// size and time; restored into its old folder, nothing needs
		// relocating: review 70b).
		if !sh.ModTime.IsZero() {
			if err := os.Chtimes(tmp, time.Time{}, sh.ModTime); err != nil {
				return nil, outputError(err, filepath.Join(opts.Output, sh.Name))
			}
		}
		res.Bytes += sh.Size
	}
	// The last moment to stop: after it the files are in place.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for k, w := range done {
		rel, _ := filepath.Rel(out, w.path)
		final := filepath.Join(opts.Output, rel)
		if err := os.Rename(w.tmp, w.path); err != nil {
			for _, r := range done[:k] {
				os.Remove(r.path)
			}
			return nil, outputError(err, final)
		}
		res.Files = append(res.Files, final)
	}
	syncDir(out)
	if stage != "" {
		if err := os.Rename(stage, opts.Output); err != nil {
			var le *os.LinkError
			if errors.As(err, &le) {
				err = le.Err
			}
			return nil, fmt.Errorf("%s: the output folder appeared while the files were restored: %w", opts.Output, err)
		}
		stage = ""
		syncDir(filepath.Dir(filepath.Clean(opts.Output)))
	}
	res.Duration = time.Since(start)
	return res, nil
}

// syncDir flushes a folder's entries to disk, as far as it can.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// makeDirs makes dir and the folders above it that are missing, and
// appends the ones it made to made, outermost first.
func makeDirs(dir string, made *[]string) error {
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || filepath.Dir(d) == d {
			break
		}
		missing = append(missing, d)
	}
	if err := os.MkdirAll(dir, atomicfile.DirPerm); err != nil {
		return err
	}
	for i := len(missing) - 1; i >= 0; i-- {
		*made = append(*made, missing[i])
	}
	return nil
}

// writeBuffer is the buffered writer of a restored file.
const writeBuffer = 1 << 20

// restoreShard writes a shard's regions in file order, each checked
// against its content key as it is written.
func restoreShard(c *shardcache.Cache, s *shardcache.Source, sh *shardcache.Shard, dec Decoder, w *bufio.Writer, p Progress, buf *pieces) error {
	type region struct {
		off, size uint64
		t         *shardcache.Tensor
		key       shardcache.Key
	}
	regs := []region{{sh.Header.Offset, sh.Header.Size, nil, sh.Header.Key}}
	for i := range sh.Tensors {
		t := &sh.Tensors[i]
		regs = append(regs, region{t.Offset, t.Size, t, t.Key})
	}
	for _, g := range sh.Gaps {
		regs = append(regs, region{g.Offset, g.Size, nil, g.Key})
	}
	sort.Slice(regs, func(i, j int) bool { return regs[i].off < regs[j].off })
	var src *os.File
	defer func() {
		if src != nil {
			src.Close()
		}
	}()
	var pos uint64
	for _, r := range regs {
		if r.off != pos {
			return fmt.Errorf("%w: region at %d, expected %d", shardcache.ErrIndexCorrupt, r.off, pos)
		}
		name := ""
		if r.t != nil {
			name = r.t.Name
		}
		var err error
		switch {
		case r.t != nil && r.t.Payload():
			if err = restorePayload(c, r.t, dec, w, buf); err != nil {
				err = objectFault(c, r.key, name, err)
			}
		case r.t != nil && !r.t.CopyStored:
			// A raw alias: the bytes are in the source only.
			path := filepath.Join(s.Root, sh.Name)
			if src == nil {
				if err = shardcache.CheckStat(sh, path); errors.Is(err, shardcache.ErrSourceChanged) {
					// The shard's, not this tensor's (the first read from
					// it): the error names the file.
					return err
				}
				if err == nil {
					src, err = os.Open(path)
				}
				if pe, ok := errors.AsType[*fs.PathError](err); ok && errors.Is(err, fs.ErrNotExist) {
					err = fmt.Errorf("%w: %w", shardcache.ErrSourceMissing, pe.Err) // the TensorError names the path
				}
			}
			if err == nil {
				err = copyChecked(w, src, r.off, r.size, r.key, buf.a, shardcache.ErrSourceChanged)
			}
			if err != nil {
				err = &TensorError{File: path, Tensor: name, Err: err}
			}
		default:
			var obj *shardcache.ObjectReader
			if obj, _, err = c.OpenObject(r.key); err == nil {
				err = copyChecked(w, obj, 0, r.size, r.key, buf.a, shardcache.ErrObjectCorrupt)
				obj.Close()
			}
			if err != nil {
				err = objectFault(c, r.key, name, err)
			}
		}
		if err != nil {
			return err
		}
		p.Add(r.size) // the header and gaps too: the total is the shards' sizes
		pos += r.size
	}
	if pos != sh.Size {
		return fmt.Errorf("%w: regions cover %d of %d bytes", shardcache.ErrIndexCorrupt, pos, sh.Size)
	}
	return nil
}

// objectFault is err, a failure reading the object with key (or checking
// what it decodes to) for tensor name ("" for a file's other bytes), as a
// *TensorError naming the object's file: the cache is what is damaged,
// not the file being restored. A pack member's range is in the message.
func objectFault(c *shardcache.Cache, key shardcache.Key, name string, err error) error {
	loc, _, lerr := c.Locate(key)
	if lerr != nil {
		return &TensorError{File: c.Dir(), Tensor: name, Err: err}
	}
	if rest, ok := strings.CutPrefix(err.Error(), loc.Path+": "); ok {
		err = reworded{rest, err} // the error named the file already
	}
	if loc.Packed {
		err = fmt.Errorf("%s: %w", shardcache.PackSpan(loc.Offset, loc.Size), err)
	}
	return &TensorError{File: loc.Path, Tensor: name, Err: err}
}

// reworded is err with another message.
type reworded struct {
	msg string
	err error
}

func (r reworded) Error() string { return r.msg }
func (r reworded) Unwrap() error { return r.err }

// restorePayload decodes a payload into w a piece at a time and checks
// the result against the content key.
func restorePayload(c *shardcache.Cache, t *shardcache.Tensor, dec Decoder, w *bufio.Writer, buf *pieces) error {
	hash := shardcache.NewHasher()
	err := decodeTensor(c, t, dec, buf, func(_ uint64, b []byte) error {
		hash.Write(b)
		_, err := w.Write(b)
		return err
	})
	if err != nil {
		return err
	}
	if shardcache.KeyFromSum([32]byte(hash.Sum(nil))) != t.Key {
		return fmt.Errorf("%w: decoded bytes do not match the content key", shardcache.ErrObjectCorrupt)
	}
	return nil
}

// writeTemp writes a file through a temporary name in path's directory,
// flushed to disk, and returns that name; the caller renames it. Errors
// name final, the file's name once in place: a failure to write it (a
// full disk) is that file's, never a tensor's or a temporary name's; one
// of fill that names what it read (a *TensorError) keeps that name, and
// says final was being restored; any other, a *TensorError naming final.
func writeTemp(ctx context.Context, path, final string, fill func(*bufio.Writer) error) (string, error) {
	f, err := atomicfile.CreateTemp(filepath.Dir(path), filepath.Base(path))
	if err != nil {
		return "", outputError(err, final)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	fw := &fileWriter{ctx: ctx, f: f}
	w := bufio.NewWriterSize(fw, writeBuffer)
	if err := fill(w); err != nil {
		if fw.err != nil {
			return "", outputError(fw.err, final)
		}
		if _, ok := errors.AsType[*TensorError](err); ok {
			// The fault is in what was read (a cache object, the
			// source), which the error names: final is where it was going.
			return "", fmt.Errorf("restoring %s: %w", final, err)
		}
		return "", &TensorError{File: final, Err: err}
	}
	if err := w.Flush(); err != nil {
		return "", outputError(err, final)
	}
	if err := f.Sync(); err != nil {
		return "", outputError(err, final)
	}
	if err := ctx.Err(); err != nil { // stopped while the disk caught up
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", outputError(err, final)
	}
	ok = true
	return f.Name(), nil
}

// fileWriter writes to a file and keeps the first write error, so that a
// write that fails deep in a decode is reported as the file's.
type fileWriter struct {
	ctx context.Context // a stopped run writes no more
	f   *os.File
	err error
}

func (w *fileWriter) Write(b []byte) (int, error) {
	if err := w.ctx.Err(); err != nil {
		if w.err == nil {
			w.err = err
		}
		return 0, err
	}
	n, err := w.f.Write(b)
	if err != nil && w.err == nil {
		w.err = err
	}
	return n, err
}

// outputError is err, an error writing or placing a restored file, with
// the file's final name in place of a temporary one.
func outputError(err error, final string) error { return atomicfile.Named(err, final) }

// sourcePresent reports whether any file of s (a shard, its index) is at
// its recorded root.
func sourcePresent(s *shardcache.Source) bool {
	names := make([]string, 0, len(s.Shards)+1)
	for _, sh := range s.Shards {
		names = append(names, sh.Name)
	}
	if s.Index != nil {
		names = append(names, s.Index.Name)
	}
	for _, n := range names {
		if _, err := os.Lstat(filepath.Join(s.Root, n)); err == nil {
			return true
		}
	}
	return false
}
