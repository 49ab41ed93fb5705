package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/shardcache"
)

// VerifyOptions configures Verify.
type VerifyOptions struct {
	// Source selects one source (Cache.PickSource): a recorded root, or the
	// directory a moved source is in now. Empty means every source, or
	// those Only names.
	Source string
	// Only, without Source, names the sources to check by their paths
	// (Source.Path): a remote cache's, pulled into a folder that may hold
	// others. A path the cache does not record is an error.
	Only     []string
	Jobs     int     // tensors checked at once; 0 means GOMAXPROCS
	Memory   uint64  // memory budget in bytes; 0 means DefaultMemory
	Decoder  Decoder // nil means CPUDecoder
	Progress Progress
}

// Problem is one failed check.
type Problem struct {
	File   string `json:"file"`
	Tensor string `json:"tensor,omitempty"`
	// Object is the cache object a tensor's problem lies in (its file,
	// and its range of a pack), where the stored bytes are at fault;
	// ObjectAt is the same as a location, for callers that word it.
	Object   string               `json:"object,omitempty"`
	ObjectAt *shardcache.Location `json:"-"`
	Error    string               `json:"error"`
	// Kind is the failure kind of Err (the exit code's row), set by the
	// caller that classifies it.
	Kind string `json:"kind,omitempty"`
	// Err is the error itself, for callers that classify or reword it.
	Err error `json:"-"`
}

// VerifyResult reports a Verify run.
type VerifyResult struct {
	Cache    string `json:"cache"`
	Decoder  string `json:"decoder"`
	Tensors  int    `json:"tensors"`
	Payloads int    `json:"payloads"` // payloads decoded and compared
	// EntropyPayloads counts the payloads among them that are entropy
	// payloads: decoded on the host whatever Decoder is.
	EntropyPayloads int       `json:"entropy_payloads"`
	Bytes           uint64    `json:"bytes"` // source bytes compared
	Problems        []Problem `json:"problems"`
	// Absent lists source files that are not there: shards whose tensors
	// are all in the cache (checked against their content keys alone),
	// and index files (the cache always holds a copy, checked so); not a
	// pulled checkpoint's (shardcache.PulledRoot), which never are.
	Absent []string `json:"absent_sources,omitempty"`
	// Unchecked counts the tensors that could not be checked: those only
	// in a source shard that is absent or cannot be read (a problem of
	// the shard's).
	Unchecked int           `json:"unchecked_tensors,omitempty"`
	Duration  time.Duration `json:"duration_ns"`
}

// OK reports whether every check passed.
func (r *VerifyResult) OK() bool { return len(r.Problems) == 0 }

// Verify checks that every tensor in the cache round-trips bit for bit
// against its source, that every object is intact, and that the sources
// have not changed. Failed checks are returned as Problems; the error is
// for failures to run at all.
func Verify(ctx context.Context, dir string, opts VerifyOptions) (*VerifyResult, error) {
	start := time.Now()
	c, err := openCache(ctx, dir, &opts.Decoder)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if opts.Jobs < 0 {
		return nil, fmt.Errorf("%w: jobs must be at least 1, got %d", ErrOption, opts.Jobs)
	}
	if opts.Jobs == 0 {
		opts.Jobs = runtime.GOMAXPROCS(0)
	}
	mem, err := newBudget(opts.Memory)
	if err != nil {
		return nil, err
	}
	p := orNop(opts.Progress)
	res := &VerifyResult{Cache: dir, Decoder: opts.Decoder.Name(), Problems: []Problem{}}
	var mu sync.Mutex
	fail := func(file, tensor string, err error) {
		mu.Lock()
		pr := Problem{File: file, Tensor: tensor, Error: err.Error(), Err: err}
		if oe, ok := errors.AsType[*objectError](err); ok {
			pr.Object, pr.ObjectAt = oe.at.Name(), &oe.at
		}
		res.Problems = append(res.Problems, pr)
		mu.Unlock()
	}
	if err := c.RequireCheckpoint(); err != nil {
		return nil, err
	}
	// Opening the cache did not read the index's statistics (loads never
	// need them): their hash is checked here, a problem of the index
	// file and no reason to stop.
	if err := c.Index().LoadStats(); err != nil {
		fail(filepath.Join(dir, shardcache.IndexName), "", err)
	}
	if err := c.Damaged(); err != nil {
		// Read from the backup: the rest is checked as it says.
		fail(filepath.Join(dir, shardcache.IndexName), "", fmt.Errorf("%w; the cache was read from the index's backup (%s): compress, gc or relocate writes the index again from it", err, shardcache.BackupName))
	}
	sources, picks := c.Index().Sources, opts.Only
	if opts.Source != "" {
		picks = []string{opts.Source}
	}
	if len(picks) > 0 {
		sources = nil
		for _, p := range picks {
			s, err := c.PickSource(p)
			if err != nil {
				return nil, err
			}
			sources = append(sources, *s)
		}
	}
	var total uint64
	for _, s := range sources {
		for _, sh := range s.Shards {
			for _, t := range sh.Tensors {
				total += t.Size
			}
		}
	}
	p.Start("verify", total)
	defer p.Finish()
	for si := range sources {
		s := &sources[si]
		if s.Index != nil {
			// The checkpoint's index file is always stored in the cache:
			// an absent one is checked against its key, as an absent shard
			// whose tensors are all in the cache is.
			path := filepath.Join(s.Root, s.Index.Name)
			var err error
			if _, serr := os.Stat(path); errors.Is(serr, fs.ErrNotExist) {
				if !shardcache.IsPulledRoot(s.Root) { // a pulled one never is: no news
					res.Absent = append(res.Absent, path)
				}
				err = compareRegion(c, nil, shardcache.Region{Size: s.Index.Size, Key: s.Index.Key}, newPieces())
			} else {
				err = compareFile(c, s.Index.Key, path, s.Index.Size)
			}
			if errors.Is(err, shardcache.ErrSourceChanged) {
				err = &indexChanged{err}
			}
			if err != nil {
				fail(path, "", regionInObject(c, s.Index.Key, err))
			}
		}
		for hi := range s.Shards {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if err := verifyShard(ctx, c, s, &s.Shards[hi], opts, mem, p, res, fail); err != nil {
				return nil, err
			}
		}
	}
	// Packs whole: bytes no member's check reads (the padding between
	// members) must match their keys too. A pack already named by a
	// member's problem is not named again.
	packs := packsOf(c, sources)
	if len(packs) > 0 {
		var size uint64
		for _, k := range packs {
			if o, err := c.Lookup(k); err == nil {
				size += o.Size
			}
		}
		p.Start("verify packs", size) // the shards' phase ends
	}
	for i, err := range c.CheckPacks(ctx, packs, opts.Jobs, p.Add) {
		if err == nil {
			continue
		}
		path, _ := c.FilePath(packs[i])
		if rest, ok := strings.CutPrefix(err.Error(), path+": "); ok {
			err = reworded{rest, err} // the problem names the file
		}
		if !slices.ContainsFunc(res.Problems, func(pr Problem) bool { return strings.HasPrefix(pr.Object, path) || pr.File == path }) {
			fail(path, "", &objectError{at: shardcache.Location{Path: path}, err: err})
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res.Duration = time.Since(start)
	return res, nil
}

// packsOf returns the packs that hold objects of sources, each once.
func packsOf(c *shardcache.Cache, sources []shardcache.Source) []shardcache.Key {
	seen := map[shardcache.Key]bool{}
	var packs []shardcache.Key
	add := func(k shardcache.Key) {
		if o, err := c.Lookup(k); err == nil && o.Pack != "" && !seen[o.Pack] {
			seen[o.Pack] = true
			packs = append(packs, o.Pack)
		}
	}
	for si := range sources {
		s := &sources[si]
		if s.Index != nil {
			add(s.Index.Key)
		}
		for hi := range s.Shards {
			sh := &s.Shards[hi]
			add(sh.Header.Key)
			for _, g := range sh.Gaps {
				add(g.Key)
			}
			for _, t := range sh.Tensors {
				if t.InCache() {
					add(t.Key)
				}
			}
		}
	}
	return packs
}

// openCache opens a cache for verify or decompress and defaults the
// decoder to the CPU reference; its wait for a gc ends with ctx.
func openCache(ctx context.Context, dir string, dec *Decoder) (*shardcache.Cache, error) {
	if *dec == nil {
		*dec = CPUDecoder{}
	}
	return shardcache.OpenContext(ctx, dir)
}

// verifyShard checks one shard's regions and tensors with opts.Jobs
// workers, each holding its share of the memory budget while it works.
func verifyShard(ctx context.Context, c *shardcache.Cache, s *shardcache.Source, sh *shardcache.Shard, opts VerifyOptions, mem *budget, p Progress, res *VerifyResult, fail func(string, string, error)) error {
	var mu sync.Mutex
	path := filepath.Join(s.Root, sh.Name)
	if fp := shardcache.Fingerprint(sh); fp != sh.Fingerprint {
		fail(path, "", fmt.Errorf("%w: index records fingerprint %s, its regions give %s", shardcache.ErrIndexCorrupt, sh.Fingerprint, fp))
	}
	f, err := os.Open(path)
	// src stays a nil interface when the source is absent.
	var src io.ReaderAt
	switch {
	case errors.Is(err, fs.ErrNotExist) && sh.AllInCache():
		// Every byte is in the cache: check it against the content keys.
		f = nil
		if !shardcache.IsPulledRoot(s.Root) { // a pulled one never is: no news
			mu.Lock()
			res.Absent = append(res.Absent, path)
			mu.Unlock()
		}
	case err != nil:
		// Absent or unreadable (permission denied): its tensors only in
		// the source cannot be checked, the shard's problem. The others,
		// in the cache, are checked against their content keys, as for a
		// self-contained cache (a damaged payload is the cache's problem,
		// whatever became of the source).
		if n := aliases(sh); n > 0 {
			err = fmt.Errorf("%w (%d tensors are only in the source; compress --self-contained copies them into the cache; the others were checked against their content keys)", err, n)
		}
		fail(path, "", err)
		f = nil
	default:
		defer f.Close()
		src = shardFile{f}
		if err := shardcache.CheckSource(sh, path); err != nil {
			// Go on: the tensors' checks say which of them changed.
			fail(path, "", err)
		}
	}
	jobs := min(opts.Jobs, len(sh.Tensors)+1)
	next := make(chan int)
	var wg sync.WaitGroup
	var runErr error
	for range jobs {
		wg.Go(func() {
			for i := range next {
				var size uint64
				if i >= 0 {
					size = sh.Tensors[i].Size
				}
				work, release, err := mem.take(ctx, uint64(pieceBytes)+tableBytes(size))
				if err != nil {
					mu.Lock()
					runErr = err
					mu.Unlock()
					continue
				}
				if i < 0 {
					for _, r := range append([]shardcache.Region{sh.Header}, sh.Gaps...) {
						if err := compareRegion(c, src, r, work); err != nil {
							fail(path, "", regionInObject(c, r.Key, fmt.Errorf("bytes [%d, %d): %w", r.Offset, r.Offset+r.Size, err)))
						}
					}
					release()
					continue
				}
				t := &sh.Tensors[i]
				if src == nil && !t.InCache() {
					release() // in the absent source only: the shard's problem
					p.Add(t.Size)
					mu.Lock()
					res.Unchecked++
					mu.Unlock()
					continue
				}
				payload, err := verifyTensor(c, src, t, opts.Decoder, work)
				release()
				if err != nil {
					fail(path, t.Name, inObject(c, t, err))
				}
				p.Add(t.Size)
				mu.Lock()
				res.Tensors++
				res.Bytes += t.Size
				if payload {
					res.Payloads++
					if t.Stored == shardcache.StoredEntropy {
						res.EntropyPayloads++
					}
				}
				mu.Unlock()
			}
		})
	}
	// -1 is the header and the gaps.
	for i := -1; i < len(sh.Tensors) && ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if runErr != nil {
		return runErr
	}
	return ctx.Err()
}

// objectError is a tensor's problem that lies in its cache object.
type objectError struct {
	at  shardcache.Location // the file, and a pack member's range
	err error
}

func (e *objectError) Error() string { return e.err.Error() }
func (e *objectError) Unwrap() error { return e.err }

// inObject marks err, tensor t's problem, as its cache object's where
// the stored bytes are at fault: t's bytes are in the cache and the
// source has not changed.
func inObject(c *shardcache.Cache, t *shardcache.Tensor, err error) error {
	if !t.InCache() || errors.Is(err, shardcache.ErrSourceChanged) {
		return err
	}
	loc, _, lerr := c.Locate(t.Key)
	if lerr != nil {
		return err
	}
	return &objectError{loc, err}
}

// regionInObject marks err, the problem of a region stored whole (a
// shard's header or gap, a checkpoint's index), as the cache object of
// key's where that object is damaged.
func regionInObject(c *shardcache.Cache, key shardcache.Key, err error) error {
	if !errors.Is(err, shardcache.ErrObjectCorrupt) {
		return err
	}
	loc, _, lerr := c.Locate(key)
	if lerr != nil {
		return err
	}
	return &objectError{loc, err}
}

// shardFile reads a source shard for verify: a read that ends at the
// file's end before the bytes asked for (a shard that shrank since it was
// compressed) is ErrSourceChanged, not a short read to blame on a payload.
type shardFile struct{ f *os.File }

func (s shardFile) ReadAt(b []byte, off int64) (int, error) {
	n, err := s.f.ReadAt(b, off)
	if n < len(b) && (err == nil || errors.Is(err, io.EOF)) {
		now := fmt.Sprintf("ends before byte %d", off+int64(len(b)))
		if st, err := s.f.Stat(); err == nil {
			now = fmt.Sprintf("is now %d bytes", st.Size())
		}
		return n, fmt.Errorf("%w: the file %s, short of the %d bytes a read of the tensor needs", shardcache.ErrSourceChanged, now, off+int64(len(b)))
	}
	return n, err
}

// payloadReader opens a tensor's payload and checks that its index
// record decodes to the tensor's size.
func payloadReader(c *shardcache.Cache, t *shardcache.Tensor) (*shardcache.ObjectReader, *shardcache.Object, error) {
	obj, o, err := c.OpenObject(t.Key)
	if err != nil {
		return nil, nil, err
	}
	if o.Kind != t.ObjectKind() {
		obj.Close()
		return nil, nil, fmt.Errorf("payload %s: a %s object, the tensor is stored as %s", t.Key, o.Kind, t.Stored)
	}
	if o.RawSize != t.Size {
		obj.Close()
		return nil, nil, fmt.Errorf("payload %s: decodes to %d bytes, the tensor has %d", t.Key, o.RawSize, t.Size)
	}
	return obj, o, nil
}

// decodeTensor decodes a tensor's payload a piece at a time into
// p.a and passes each piece to fn; it fails when the payload does not
// decode to exactly the tensor's size.
func decodeTensor(c *shardcache.Cache, t *shardcache.Tensor, dec Decoder, p *pieces, fn func(off uint64, b []byte) error) error {
	obj, o, err := payloadReader(c, t)
	if err != nil {
		return err
	}
	defer obj.Close()
	var n uint64
	var fnErr error // what fn met (the source, the output): not the payload's fault
	err = dec.DecodeStream(obj, o.Size, p.a, func(off uint64, b []byte) error {
		if off != n || uint64(len(b)) > t.Size-n {
			return fmt.Errorf("%w: decodes past the tensor's %d bytes", codec.ErrSize, t.Size)
		}
		n += uint64(len(b))
		fnErr = fn(off, b)
		return fnErr
	})
	if fnErr != nil {
		return fnErr
	}
	if err == nil && n != t.Size {
		err = fmt.Errorf("%w: decodes to %d bytes, the tensor has %d", codec.ErrSize, n, t.Size)
	}
	if err != nil {
		return fmt.Errorf("payload %s: %w", t.Key, err)
	}
	return nil
}

// verifyTensor checks a tensor against its source a piece at a time: the
// source bytes against the content key and, for a payload or a raw copy,
// the stored bytes against the source. It reports whether it decoded a
// payload.
func verifyTensor(c *shardcache.Cache, f io.ReaderAt, t *shardcache.Tensor, dec Decoder, p *pieces) (bool, error) {
	if f == nil {
		return verifyByKey(c, t, dec, p)
	}
	changed := fmt.Errorf("%w: source bytes no longer match the compressed tensor (%s)", shardcache.ErrSourceChanged, t.Key)
	switch {
	case t.Payload():
		src := shardcache.NewHasher()
		diff := int64(-1)
		err := decodeTensor(c, t, dec, p, func(off uint64, b []byte) error {
			s := p.b[:len(b)]
			if err := readFull(f, s, t.Offset+off); err != nil {
				return err
			}
			src.Write(s)
			if i := firstDiff(b, s); i >= 0 && diff < 0 {
				diff = int64(off) + int64(i)
			}
			return nil
		})
		switch {
		case err != nil:
			return true, err
		case shardcache.KeyFromSum([32]byte(src.Sum(nil))) != t.Key:
			return true, changed
		case diff >= 0:
			return true, fmt.Errorf("%w: decoded payload differs from the source at byte %d", ErrMismatch, diff)
		}
		return true, nil
	case t.CopyStored:
		obj, o, err := c.OpenObject(t.Key)
		if err != nil {
			return false, err
		}
		defer obj.Close()
		objKey, srcKey, diff, err := compareRanges(obj, f, t.Offset, t.Size, p)
		switch {
		case err != nil:
			return false, err
		case srcKey != t.Key:
			return false, changed
		case objKey != t.Key || diff >= 0:
			return false, fmt.Errorf("%w: raw object differs from the source", ErrMismatch)
		}
		return false, checkRawCRC(obj, o, p)
	default:
		key, err := streamRange(f, t.Offset, t.Size, p.b, nil)
		if err != nil {
			return false, err
		}
		if key != t.Key {
			return false, changed
		}
	}
	return false, nil
}

// verifyByKey checks a tensor whose source is absent: its payload
// decodes, or its raw copy hashes, to its content key.
func verifyByKey(c *shardcache.Cache, t *shardcache.Tensor, dec Decoder, p *pieces) (bool, error) {
	bad := fmt.Errorf("%w: the stored bytes do not match the content key %s", shardcache.ErrObjectCorrupt, t.Key)
	if t.Payload() {
		h := shardcache.NewHasher()
		if err := decodeTensor(c, t, dec, p, func(_ uint64, b []byte) error { h.Write(b); return nil }); err != nil {
			return true, err
		}
		if shardcache.KeyFromSum([32]byte(h.Sum(nil))) != t.Key {
			return true, bad
		}
		return true, nil
	}
	obj, o, err := c.OpenObject(t.Key)
	if err != nil {
		return false, err
	}
	defer obj.Close()
	var crc uint32
	key, err := streamRange(obj, 0, t.Size, p.a, func(_ uint64, b []byte) error {
		crc = codec.UpdateChecksum(crc, b)
		return nil
	})
	switch {
	case err != nil:
		return false, err
	case key != t.Key:
		return false, bad
	case o.Checksum != 0 && crc != o.Checksum:
		return false, rawCRCError(obj.Name(), o.Checksum, crc)
	}
	return false, nil
}

// checkRawCRC checks a raw object that matched its content key against
// the CRC-32C its record gives (none recorded: nothing to check), by
// which loads check it.
func checkRawCRC(obj *shardcache.ObjectReader, o *shardcache.Object, p *pieces) error {
	if o.Checksum == 0 {
		return nil
	}
	var crc uint32
	_, err := streamRange(obj, 0, o.Size, p.a, func(_ uint64, b []byte) error {
		crc = codec.UpdateChecksum(crc, b)
		return nil
	})
	if err == nil && crc != o.Checksum {
		err = rawCRCError(obj.Name(), o.Checksum, crc)
	}
	return err
}

// rawCRCError is a raw object whose bytes are its content key's but not
// the CRC-32C its record gives: the index is wrong about it.
func rawCRCError(name string, recorded, got uint32) error {
	return fmt.Errorf("%s: %w: its bytes match its content key, but the index records a CRC-32C of %08x for them, not %08x", name, shardcache.ErrObjectCorrupt, recorded, got)
}

// aliases counts a shard's tensors whose bytes are only in the source.
func aliases(sh *shardcache.Shard) int {
	n := 0
	for _, t := range sh.Tensors {
		if !t.InCache() {
			n++
		}
	}
	return n
}

// compareRegion checks that a stored raw object (a header or a gap)
// equals the file's bytes; with f nil (the source is absent), that it
// hashes to its key.
func compareRegion(c *shardcache.Cache, f io.ReaderAt, r shardcache.Region, p *pieces) error {
	obj, _, err := c.OpenObject(r.Key)
	if err != nil {
		return err
	}
	defer obj.Close()
	if f == nil {
		key, err := streamRange(obj, 0, r.Size, p.a, nil)
		if err == nil && key != r.Key {
			err = fmt.Errorf("%s: %w: content hash mismatch", obj.Name(), shardcache.ErrObjectCorrupt)
		}
		return err
	}
	objKey, _, diff, err := compareRanges(obj, f, r.Offset, r.Size, p)
	switch {
	case err != nil:
		return err
	case objKey != r.Key:
		return fmt.Errorf("%s: %w: content hash mismatch", obj.Name(), shardcache.ErrObjectCorrupt)
	case diff >= 0:
		return fmt.Errorf("%w: source bytes differ from the stored copy at byte %d", shardcache.ErrSourceChanged, r.Offset+uint64(diff))
	}
	return nil
}

// compareFile checks that a file stored whole (a checkpoint's index)
// equals the stored copy.
// indexChanged is ErrSourceChanged for a checkpoint's index file, worded
// as one: it is not a shard.
type indexChanged struct{ err error }

func (e *indexChanged) Error() string {
	msg := e.err.Error()
	if _, detail, ok := strings.Cut(msg, shardcache.ErrSourceChanged.Error()+": "); ok {
		msg = detail
	}
	return "the checkpoint's index file changed since it was compressed: " + msg
}

func (e *indexChanged) Unwrap() error { return e.err }

func compareFile(c *shardcache.Cache, key shardcache.Key, path string, size uint64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if uint64(st.Size()) != size {
		return fmt.Errorf("%w: %d bytes, compressed from %d", shardcache.ErrSourceChanged, st.Size(), size)
	}
	return compareRegion(c, f, shardcache.Region{Offset: 0, Size: size, Key: key}, newPieces())
}
