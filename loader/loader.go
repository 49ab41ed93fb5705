// Package loader serves the tensors of a cached checkpoint to a loader
// process: lookups by name, content key and source slice, and each
// tensor's original bytes, decoded into host memory or uploaded and
// decoded in place into a device range the caller owns, on the caller's
// CUDA stream. It is what the C ABI (capi) and the Python package use.
package loader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/load"
	"github.com/splitzip/splitzip/oci"
	"github.com/splitzip/splitzip/s3store"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/transport"
	"github.com/splitzip/splitzip/vmm"
)

// Errors callers test with errors.Is (the C ABI maps them to codes).
var (
	ErrNotFound = shardcache.ErrNotFound
	ErrTooSmall = errors.New("too small for what it must hold")
	ErrInvalid  = errors.New("invalid argument")
)

// Tensor describes one tensor of the checkpoint.
type Tensor struct {
	Index      int
	Name       string
	DType      string
	Shape      []uint64
	Shard      string // path of the source shard
	Offset     uint64
	Size       uint64
	Key        shardcache.Key
	Compressed bool
	Stored     uint64 // payload bytes, or Size
	shard      *shardcache.Shard
	rec        *shardcache.Tensor  // its record in the index
	hit        shardcache.SliceHit // and with its source, for transports (vmm.Spec.Ref)
}

// Loader serves one checkpoint of a cache. Its methods are safe for
// concurrent use.
type Loader struct {
	c       *shardcache.Cache
	src     *shardcache.Source
	tensors []Tensor
	byName  map[string]int
	byKey   map[shardcache.Key]int
	bySlice map[slice]int
	files   sync.Map // shard path -> *os.File

	gpuMu sync.Mutex
	gpus  map[int]*gpuState
	// opts and staging make each upload stream's transports: staging is
	// planned by Open from the checkpoint (load.Staging: what its tensors
	// need, at most two buffers a reader, all within PinnedLimit, default
	// 256 MiB, 1 GiB for a remote cache) and returned to the stream's
	// engine when the handle closes.
	opts    load.Options
	staging transport.Staging
	// resident: uploads keep what they read in pinned memory
	// (SetResident); shared: the payloads' copies are the machine's
	// shared host copy (SetShared); uploading: a transport has been made.
	resident, shared, uploading atomic.Bool
	shareDir                    atomic.Pointer[string] // SetShared's folder, if set
	specs                       []vmm.Spec             // the tensors, for the shared copy's layout
}

type slice struct {
	shard        string // base name
	offset, size uint64
}

// Options configures OpenWith.
type Options struct {
	// Source is the checkpoint's root ("" when the cache holds one).
	Source string
	// PinnedLimit caps the pinned staging of each upload stream the
	// loader uses (0: transport.DefaultPinnedLimit, or
	// load.RemotePinnedLimit for a remote cache; negative: no cap).
	// Staging is sized from the checkpoint first, so a small one pins
	// less.
	PinnedLimit int64
}

// Open opens the checkpoint source (its root; "" when the cache holds one)
// of the cache in dir, with the default options.
func Open(dir, source string) (*Loader, error) { return OpenWith(dir, Options{Source: source}) }

// OpenWith opens a checkpoint of the cache in dir.
func OpenWith(dir string, o Options) (*Loader, error) {
	c, err := openCache(dir)
	if errors.Is(err, shardcache.ErrNotCache) {
		// A folder that is no cache is a wrong argument, not corrupt data.
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err != nil {
		return nil, err
	}
	src, err := c.PickSource(o.Source)
	if err != nil {
		c.Close()
	}
	if errors.Is(err, shardcache.ErrAmbiguousSource) {
		return nil, fmt.Errorf("%w: %w; give its root as the source argument", ErrInvalid, err)
	}
	if err != nil {
		return nil, err
	}
	l := &Loader{c: c, src: src, byName: map[string]int{}, byKey: map[shardcache.Key]int{}, bySlice: map[slice]int{}, gpus: map[int]*gpuState{}}
	var specs []vmm.Spec
	for si := range src.Shards {
		sh := &src.Shards[si]
		for ti, t := range sh.Tensors {
			i := len(l.tensors)
			tt := Tensor{Index: i, Name: t.Name, DType: t.DType, Shape: t.Shape, Shard: filepath.Join(src.Root, sh.Name),
				Offset: t.Offset, Size: t.Size, Key: t.Key, Stored: t.Size, shard: sh, rec: &sh.Tensors[ti],
				hit: shardcache.SliceHit{Source: src, Shard: sh, Tensor: &sh.Tensors[ti]}}
			if t.Stored != shardcache.StoredRaw || t.CopyStored {
				c.Resolve(&tt.hit) // its object, found once here rather than at every fault
			}
			if t.Stored == shardcache.StoredFixed {
				o, err := c.Lookup(t.Key)
				if err != nil {
					c.Close()
					return nil, err
				}
				tt.Compressed, tt.Stored = true, o.Size
			}
			l.tensors = append(l.tensors, tt)
			l.byName[t.Name] = i
			if _, ok := l.byKey[t.Key]; !ok {
				l.byKey[t.Key] = i
			}
			l.bySlice[slice{filepath.Base(sh.Name), t.Offset, t.Size}] = i
			specs = append(specs, vmm.Spec{Name: t.Name, Shard: tt.Shard, Offset: t.Offset, Size: t.Size})
		}
	}
	l.opts = load.Options{PinnedLimit: o.PinnedLimit}
	l.specs = specs
	if l.staging, err = load.Staging(c, specs, l.opts); err != nil {
		c.Close()
		return nil, err
	}
	// Resident memory grows with what a stream uploads (SetResident), in
	// blocks of the default size, not of the whole checkpoint's payloads:
	// a runtime uploads parts of it on several streams.
	l.staging.Resident, l.staging.SmallResident, l.staging.Device = 0, 0, 0
	return l, nil
}

// PinnedBytes returns the pinned staging each upload stream of the loader
// holds once used.
func (l *Loader) PinnedBytes() uint64 { return l.staging.PinnedBytes() }

// Tensors returns every tensor, in shard order.
func (l *Loader) Tensors() []Tensor { return l.tensors }

// Tensor returns tensor i.
func (l *Loader) Tensor(i int) (*Tensor, error) {
	if i < 0 || i >= len(l.tensors) {
		return nil, fmt.Errorf("%w: tensor index %d: want 0 to %d", ErrInvalid, i, len(l.tensors)-1)
	}
	return &l.tensors[i], nil
}

// FindName returns the index of a tensor by name.
func (l *Loader) FindName(name string) (int, error) {
	if i, ok := l.byName[name]; ok {
		return i, nil
	}
	return -1, fmt.Errorf("tensor %q: %w", name, ErrNotFound)
}

// FindKey returns the index of a tensor by content key.
func (l *Loader) FindKey(key string) (int, error) {
	if i, ok := l.byKey[shardcache.Key(key)]; ok {
		return i, nil
	}
	return -1, fmt.Errorf("content key %s: %w", key, ErrNotFound)
}

// FindSlice returns the index of the tensor stored at [offset, offset+size)
// of the shard file named shard (a path or a base name).
func (l *Loader) FindSlice(shard string, offset, size uint64) (int, error) {
	if i, ok := l.bySlice[slice{filepath.Base(shard), offset, size}]; ok {
		return i, nil
	}
	return -1, fmt.Errorf("slice %s[%d:+%d]: %w", shard, offset, size, ErrNotFound)
}

// ReadHost writes tensor i's original bytes into dst, decoding on the CPU.
// A payload (fixed or entropy) is always decoded from the cache, and
// checked as it is, even when the tensor's source slice is there: a
// corrupt payload is then an error (codec.ErrChecksum, ...) naming the
// tensor, never hidden by a read of the source. Only raw tensors are read
// from their source shard (checked unchanged since compression).
func (l *Loader) ReadHost(i int, dst []byte) error {
	t, err := l.Tensor(i)
	if err != nil {
		return err
	}
	if uint64(len(dst)) < t.Size {
		return fmt.Errorf("tensor %q: %w: a destination of %d bytes for %d", t.Name, ErrTooSmall, len(dst), t.Size)
	}
	dst = dst[:t.Size]
	switch t.rec.Stored {
	case shardcache.StoredFixed, shardcache.StoredEntropy:
		p, _, err := l.c.ReadObject(t.Key)
		if err != nil {
			return l.objectError(t, err)
		}
		if t.rec.Stored == shardcache.StoredEntropy {
			err = entropy.Decode(dst, p, 0)
		} else {
			err = codec.Decode(dst, p)
		}
		if err != nil {
			// A payload that does not decode is a damaged object:
			// the error names its file (a pack's with the range).
			if loc, _, lerr := l.c.Locate(t.Key); lerr == nil {
				return fileError(t, loc.Name(), loc.Path, err)
			}
			return fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		return nil
	}
	return l.readSource(t, dst)
}

// readSource reads a raw tensor from its shard, which must not have
// changed since compression, or, when the shard is absent, from its copy
// in the cache, checked (checkCopy). Payloads never come here (ReadHost
// decodes them).
func (l *Loader) readSource(t *Tensor, dst []byte) error {
	path, off, err := l.rawSlice(t)
	if err != nil {
		return err
	}
	if ok, err := l.c.ReadRemote(path, dst, int64(off)); ok {
		if err != nil {
			return fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		return l.checkCopy(t, dst)
	}
	f, err := l.file(path)
	if err != nil && path != t.Shard && errors.Is(err, fs.ErrNotExist) {
		// The index names the copy: a cache that lost a file is damaged
		// (unless the whole cache went).
		return fileError(t, path, path, shardcache.MissingObject(path))
	}
	if err != nil {
		return fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	if _, err := f.ReadAt(dst, int64(off)); err != nil {
		if path != t.Shard && errors.Is(err, io.EOF) {
			// The copy's file ends before the bytes the index places
			// there: a damaged cache, as a payload cut short is.
			err = fmt.Errorf("%w: the file ends before the raw copy's %d bytes at %d", shardcache.ErrObjectCorrupt, len(dst), off)
		}
		return fileError(t, path, path, err)
	}
	if path == t.Shard {
		return nil // the source, unchanged since compression (size and time)
	}
	return l.checkCopy(t, dst)
}

// checkCopy checks b, tensor t's bytes read from its raw copy in the
// cache: against the copy's CRC-32C where the index records one (a
// cache written since 2026-12-07), else against the content key. Wrong
// bytes are ErrObjectCorrupt naming the copy's file.
func (l *Loader) checkCopy(t *Tensor, b []byte) error {
	loc, o, err := l.c.Locate(t.Key)
	if err != nil {
		return fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	switch {
	case o.Checksum != 0:
		if sum := codec.UpdateChecksum(0, b); sum != o.Checksum {
			what := "its bytes are damaged"
			if shardcache.KeyOf(b) == t.Key {
				what = "its bytes are its content key's: the index's record of it is wrong"
			}
			return fileError(t, loc.Name(), loc.Path, fmt.Errorf("%w: the raw copy's CRC-32C is %08x, the index records %08x (%s)", shardcache.ErrObjectCorrupt, sum, o.Checksum, what))
		}
	case shardcache.KeyOf(b) != t.Key:
		return fileError(t, loc.Name(), loc.Path, fmt.Errorf("%w: the raw copy's bytes do not hash to the content key %s", shardcache.ErrObjectCorrupt, t.Key))
	}
	return nil
}

// rawSlice returns where a raw tensor's bytes are read (shardcache.RawSlice); its
// errors name the tensor once.
func (l *Loader) rawSlice(t *Tensor) (string, uint64, error) {
	path, off, err := l.c.RawSlice(t.shard, t.Shard, t.rec)
	if te := (*shardcache.TensorError)(nil); err != nil && !errors.As(err, &te) {
		err = fmt.Errorf("tensor %q: %w", t.Name, err) // one that names it already is left as it is
	}
	return path, off, err
}

func (l *Loader) file(path string) (*os.File, error) {
	if f, ok := l.files.Load(path); ok {
		return f.(*os.File), nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if old, loaded := l.files.LoadOrStore(path, f); loaded {
		f.Close()
		return old.(*os.File), nil
	}
	return f, nil
}

// openCache opens a cache folder, or a remote cache in place: an
// s3://bucket/prefix[:tag] layout or an oci://registry/repo:tag artifact
// (oci.Open: read by ranged GETs, no local copy; credentials and
// endpoints from the environment, as the CLI takes them; plain HTTP for a
// registry with SPLITZIP_INSECURE=1).
func openCache(dir string) (*shardcache.Cache, error) {
	ref, isOCI := strings.CutPrefix(dir, "oci://")
	if !isOCI && !s3store.IsURL(dir) {
		return shardcache.Open(dir)
	}
	return oci.Open(context.Background(), ref, oci.Options{Insecure: os.Getenv("SPLITZIP_INSECURE") == "1"})
}

// Close waits for uploads and frees everything.
func (l *Loader) Close() error {
	l.gpuMu.Lock()
	for d, g := range l.gpus {
		g.close()
		delete(l.gpus, d)
	}
	l.gpuMu.Unlock()
	l.files.Range(func(k, v any) bool {
		v.(*os.File).Close()
		l.files.Delete(k)
		return true
	})
	return l.c.Close() // the cache's readers lock: gc may run
}
