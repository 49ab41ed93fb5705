package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/shardcache"
)

// Decoder decodes a SplitZip payload into dst (2 bytes per value).
// The reference is codec.Decode; the GPU decoder implements it too.
type Decoder interface {
	Decode(dst, payload []byte) error
	Name() string
}

// CPUDecoder is the pure-Go reference decoder.
type CPUDecoder struct{}

// Decode decodes with codec.Decode.
func (CPUDecoder) Decode(dst, payload []byte) error { return codec.Decode(dst, payload) }

// Name returns "cpu".
func (CPUDecoder) Name() string { return "cpu" }

// VerifyOptions configures Verify.
type VerifyOptions struct {
	Jobs     int
	Decoder  Decoder // nil means CPUDecoder
	Progress Progress
}

// Problem is one failed check.
type Problem struct {
	File   string `json:"file"`
	Tensor string `json:"tensor,omitempty"`
	Error  string `json:"error"`
}

// VerifyResult reports a Verify run.
type VerifyResult struct {
	Cache    string        `json:"cache"`
	Decoder  string        `json:"decoder"`
	Tensors  int           `json:"tensors"`
	Payloads int           `json:"payloads"` // SplitZip payloads decoded and compared
	Bytes    uint64        `json:"bytes"`    // source bytes compared
	Problems []Problem     `json:"problems"`
	Duration time.Duration `json:"duration_ns"`
}

// OK reports whether every check passed.
func (r *VerifyResult) OK() bool { return len(r.Problems) == 0 }

// Verify checks that every tensor in the cache round-trips bit for bit
// against its source, that every object is intact, and that the sources
// have not changed. Failed checks are returned as Problems; the error is
// for failures to run at all.
func Verify(ctx context.Context, dir string, opts VerifyOptions) (*VerifyResult, error) {
	start := time.Now()
	c, err := openCache(dir, &opts.Decoder)
	if err != nil {
		return nil, err
	}
	if opts.Jobs <= 0 {
		opts.Jobs = runtime.GOMAXPROCS(0)
	}
	p := orNop(opts.Progress)
	res := &VerifyResult{Cache: dir, Decoder: opts.Decoder.Name(), Problems: []Problem{}}
	var mu sync.Mutex
	fail := func(file, tensor string, err error) {
		mu.Lock()
		res.Problems = append(res.Problems, Problem{File: file, Tensor: tensor, Error: err.Error()})
		mu.Unlock()
	}
	var total uint64
	for _, s := range c.Index().Sources {
		for _, sh := range s.Shards {
			for _, t := range sh.Tensors {
				total += t.Size
			}
		}
	}
	p.Start("verify", total)
	defer p.Finish()
	for si := range c.Index().Sources {
		s := &c.Index().Sources[si]
		if s.Index != nil {
			path := filepath.Join(s.Root, s.Index.Name)
			if err := compareObject(c, s.Index.Key, path, 0, s.Index.Size); err != nil {
				fail(path, "", err)
			}
		}
		for hi := range s.Shards {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			verifyShard(c, s, &s.Shards[hi], opts, p, res, fail)
		}
	}
	res.Duration = time.Since(start)
	return res, nil
}

func verifyShard(c *shardcache.Cache, s *shardcache.Source, sh *shardcache.Shard, opts VerifyOptions, p Progress, res *VerifyResult, fail func(string, string, error)) {
	path := filepath.Join(s.Root, sh.Name)
	if fp := shardcache.Fingerprint(sh); fp != sh.Fingerprint {
		fail(path, "", fmt.Errorf("%w: index records fingerprint %s, its regions give %s", shardcache.ErrIndexCorrupt, sh.Fingerprint, fp))
	}
	if err := shardcache.CheckStat(sh, path); err != nil {
		fail(path, "", err)
	}
	f, err := os.Open(path)
	if err != nil {
		fail(path, "", err)
		return
	}
	defer f.Close()
	for _, r := range append([]shardcache.Region{sh.Header}, sh.Gaps...) {
		if err := compareRegion(c, f, r.Key, r.Offset, r.Size); err != nil {
			fail(path, "", fmt.Errorf("bytes [%d, %d): %w", r.Offset, r.Offset+r.Size, err))
		}
	}
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range opts.Jobs {
		wg.Go(func() {
			for i := range next {
				t := &sh.Tensors[i]
				payload, err := verifyTensor(c, f, t, opts.Decoder)
				if err != nil {
					fail(path, t.Name, err)
				}
				p.Add(t.Size)
				mu.Lock()
				res.Tensors++
				res.Bytes += t.Size
				if payload {
					res.Payloads++
				}
				mu.Unlock()
			}
		})
	}
	for i := range sh.Tensors {
		next <- i
	}
	close(next)
	wg.Wait()
}

// streamBytes is the tensor size above which the CPU paths decode a
// payload a segment at a time instead of whole (a variable for tests).
var streamBytes uint64 = 64 << 20

func isCPU(d Decoder) bool { _, ok := d.(CPUDecoder); return ok }

// openCache opens a cache for verify or decompress and defaults the
// decoder to the CPU reference.
func openCache(dir string, dec *Decoder) (*shardcache.Cache, error) {
	if *dec == nil {
		*dec = CPUDecoder{}
	}
	return shardcache.Open(dir)
}

// verifyStreaming compares a large payload with its source a segment at a
// time, in bounded memory.
func verifyStreaming(c *shardcache.Cache, f *os.File, t *shardcache.Tensor) error {
	r, closeObj, err := payloadReader(c, t)
	if err != nil {
		return err
	}
	defer closeObj()
	hash := shardcache.NewHasher()
	mismatch := int64(-1)
	var out []byte
	err = decodeSegments(r, func(first uint64, seg []byte) error {
		src, err := readRange(f, t.Offset+2*first*codec.ChunkValues, uint64(len(seg)))
		if err != nil {
			return err
		}
		hash.Write(src)
		if i := firstDiff(seg, src); i >= 0 && mismatch < 0 {
			mismatch = int64(2*first*codec.ChunkValues) + int64(i)
		}
		return nil
	}, &out)
	if err != nil {
		return fmt.Errorf("payload %s: %w", t.Key, err)
	}
	if shardcache.KeyFromSum([32]byte(hash.Sum(nil))) != t.Key {
		return fmt.Errorf("%w: source bytes no longer match the compressed tensor (%s)", shardcache.ErrSourceChanged, t.Key)
	}
	if mismatch >= 0 {
		return fmt.Errorf("%w: decoded payload differs from the source at byte %d", ErrMismatch, mismatch)
	}
	return nil
}

// payloadReader opens a tensor's payload for decoding by chunk ranges and
// checks that it decodes to the tensor's size.
func payloadReader(c *shardcache.Cache, t *shardcache.Tensor) (*codec.Reader, func(), error) {
	obj, o, err := c.OpenObject(t.Key)
	if err != nil {
		return nil, nil, err
	}
	r, err := codec.NewReader(obj, o.Size)
	if err == nil {
		if h := r.Header(); 2*h.Values != t.Size {
			err = fmt.Errorf("decodes to %d bytes, the tensor has %d", 2*h.Values, t.Size)
		}
	}
	if err != nil {
		obj.Close()
		return nil, nil, fmt.Errorf("payload %s: %w", t.Key, err)
	}
	return r, func() { obj.Close() }, nil
}

// segmentChunks is how many chunks decodeSegments decodes at a time
// (64 MiB of output; a variable for tests).
var segmentChunks uint64 = 2048

// decodeSegments decodes a payload in segments and passes each, with the
// index of its first chunk, to fn; buf is reused between calls.
func decodeSegments(r *codec.Reader, fn func(first uint64, seg []byte) error, buf *[]byte) error {
	h := r.Header()
	N := h.Chunks()
	for first := uint64(0); first < N; first += segmentChunks {
		k := min(segmentChunks, N-first)
		n := 2 * (min((first+k)*codec.ChunkValues, h.Values) - first*codec.ChunkValues)
		if uint64(cap(*buf)) < n {
			*buf = make([]byte, n)
		}
		seg := (*buf)[:n]
		if err := r.DecodeChunks(seg, first, k); err != nil {
			return err
		}
		if err := fn(first, seg); err != nil {
			return err
		}
	}
	return nil
}

// verifyTensor reads the source bytes, checks them against the content key
// and, for a payload, decodes it and compares.
func verifyTensor(c *shardcache.Cache, f *os.File, t *shardcache.Tensor, dec Decoder) (bool, error) {
	src, err := readRange(f, t.Offset, t.Size)
	if err != nil {
		return false, err
	}
	if shardcache.KeyOf(src) != t.Key {
		return false, fmt.Errorf("%w: source bytes no longer match the compressed tensor (%s)", shardcache.ErrSourceChanged, t.Key)
	}
	switch {
	case t.Stored == shardcache.StoredSplitZip && t.Size > streamBytes && isCPU(dec):
		return true, verifyStreaming(c, f, t)
	case t.Stored == shardcache.StoredSplitZip:
		payload, _, err := c.ReadObject(t.Key)
		if err != nil {
			return false, err
		}
		out := make([]byte, t.Size)
		if err := dec.Decode(out, payload); err != nil {
			return true, fmt.Errorf("payload %s: %w", t.Key, err)
		}
		if i := firstDiff(out, src); i >= 0 {
			return true, fmt.Errorf("%w: decoded payload differs from the source at byte %d", ErrMismatch, i)
		}
		return true, nil
	case t.CopyStored:
		b, _, err := c.ReadObject(t.Key)
		if err != nil {
			return false, err
		}
		if !bytes.Equal(b, src) {
			return false, fmt.Errorf("%w: raw object differs from the source", ErrMismatch)
		}
	}
	return false, nil
}

// compareRegion checks that a stored raw object equals the file's bytes.
func compareRegion(c *shardcache.Cache, f *os.File, key shardcache.Key, off, size uint64) error {
	b, _, err := c.ReadObject(key)
	if err != nil {
		return err
	}
	src, err := readRange(f, off, size)
	if err != nil {
		return err
	}
	if !bytes.Equal(b, src) {
		return fmt.Errorf("%w: source bytes differ from the stored copy", shardcache.ErrSourceChanged)
	}
	return nil
}

func compareObject(c *shardcache.Cache, key shardcache.Key, path string, off, size uint64) error {
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
	return compareRegion(c, f, key, off, size)
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
