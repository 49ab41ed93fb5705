package pipeline

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/splitzip/splitzip/checkpoint"
	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/shardcache"
)

// DefaultMinSaving is the coverage gate: a BF16 tensor whose payload would
// not be at least this fraction smaller than its raw bytes stays raw.
const DefaultMinSaving = 0.03

// ErrOutputInSource reports an output path equal to or inside the source.
var ErrOutputInSource = errors.New("output is inside the source checkpoint")

// CompressOptions configures Compress.
type CompressOptions struct {
	Output        string  // cache directory
	Jobs          int     // tensors compressed at once; 0 means GOMAXPROCS
	MinSaving     float64 // coverage gate, a fraction in [0, 1)
	SelfContained bool    // also copy raw tensors into the cache
	Progress      Progress
}

// Totals sums a checkpoint's tensors.
type Totals struct {
	Tensors           int    `json:"tensors"`
	CompressedTensors int    `json:"compressed_tensors"`
	RawBytes          uint64 `json:"raw_bytes"`    // all tensor bytes of the source
	StoredBytes       uint64 `json:"stored_bytes"` // payloads plus tensors left raw
	BF16Tensors       int    `json:"bf16_tensors"`
	BF16RawBytes      uint64 `json:"bf16_raw_bytes"`
	BF16StoredBytes   uint64 `json:"bf16_stored_bytes"`
	NewObjectBytes    uint64 `json:"new_object_bytes,omitempty"` // written by this run
}

// CompressResult reports a Compress run.
type CompressResult struct {
	Source   string        `json:"source"`
	Output   string        `json:"output"`
	Shards   int           `json:"shards"`
	Totals   Totals        `json:"totals"`
	Duration time.Duration `json:"duration_ns"`
}

func (o *CompressOptions) validate() error {
	if o.Output == "" {
		return errors.New("no output directory")
	}
	if o.Jobs < 0 {
		return fmt.Errorf("jobs must be at least 1, got %d", o.Jobs)
	}
	if o.Jobs == 0 {
		o.Jobs = runtime.GOMAXPROCS(0)
	}
	if o.MinSaving < 0 || o.MinSaving >= 1 {
		return fmt.Errorf("min-saving must be in [0, 1), got %g", o.MinSaving)
	}
	o.Progress = orNop(o.Progress)
	return nil
}

// Compress compresses the checkpoint at src into the cache opts.Output.
// Nothing becomes visible in the cache unless the whole run succeeds.
func Compress(ctx context.Context, src string, opts CompressOptions) (*CompressResult, error) {
	start := time.Now()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	ck, err := checkpoint.Open(src)
	if err != nil {
		return nil, err
	}
	if checkpoint.Contains(ck.Root, opts.Output) {
		return nil, fmt.Errorf("%s: %w %s", opts.Output, ErrOutputInSource, ck.Root)
	}
	w, err := shardcache.Create(opts.Output)
	if err != nil {
		return nil, err
	}
	defer w.Close()

	res := &CompressResult{Source: ck.Root, Output: opts.Output, Shards: len(ck.Shards)}
	src1 := shardcache.Source{Root: ck.Root, Created: time.Now().UTC(), MinSaving: opts.MinSaving}
	if ck.Index != nil {
		key, err := w.PutBytes(ck.Index.Raw)
		if err != nil {
			return nil, err
		}
		src1.Index = &shardcache.File{Name: ck.IndexName, Size: uint64(len(ck.Index.Raw)), Key: key}
	}
	var total uint64
	for _, s := range ck.Shards {
		for _, t := range s.Header.Tensors {
			total += t.Size()
		}
	}
	opts.Progress.Start("compress", total)
	defer opts.Progress.Finish()
	for _, s := range ck.Shards {
		sh, err := compressShard(ctx, w, s, &opts, &res.Totals)
		if err != nil {
			return nil, err
		}
		src1.Shards = append(src1.Shards, *sh)
	}
	w.SetSource(src1)
	if err := w.Commit(); err != nil {
		return nil, err
	}
	res.Duration = time.Since(start)
	return res, nil
}

// compressShard compresses one shard's tensors with opts.Jobs workers and
// returns its record.
func compressShard(ctx context.Context, w *shardcache.Writer, s *checkpoint.Shard, opts *CompressOptions, tot *Totals) (*shardcache.Shard, error) {
	f, err := os.Open(s.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	head := s.Header
	hkey, err := w.PutBytes(head.Header)
	if err != nil {
		return nil, err
	}
	sh := &shardcache.Shard{Name: s.Name, Size: s.Size, ModTime: s.ModTime,
		Header: shardcache.Region{Offset: 0, Size: uint64(len(head.Header)), Key: hkey}}
	// Bytes not covered by the header or a tensor are kept as gaps.
	pos := head.DataStart
	addGap := func(end uint64) error {
		if end <= pos {
			return nil
		}
		b, err := readRange(f, pos, end-pos)
		if err != nil {
			return &TensorError{File: s.Path, Err: err}
		}
		key, err := w.PutBytes(b)
		if err != nil {
			return err
		}
		sh.Gaps = append(sh.Gaps, shardcache.Region{Offset: pos, Size: end - pos, Key: key})
		return nil
	}
	for _, t := range head.Tensors {
		if err := addGap(t.Begin); err != nil {
			return nil, err
		}
		pos = max(pos, t.End)
	}
	if err := addGap(s.Size); err != nil {
		return nil, err
	}

	sh.Tensors = make([]shardcache.Tensor, len(head.Tensors))
	errs := make([]error, len(head.Tensors))
	next := make(chan int)
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range opts.Jobs {
		wg.Go(func() {
			tc := newTensorCompressor(w, f, opts)
			for i := range next {
				t := &head.Tensors[i]
				rec, err := tc.compress(t)
				if err != nil {
					errs[i] = &TensorError{File: s.Path, Tensor: t.Name, Err: err}
					cancel()
					continue
				}
				sh.Tensors[i] = *rec
			}
		})
	}
feed:
	for i := range head.Tensors {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The file must not have changed while we read it.
	if err := shardcache.CheckStat(sh, s.Path); err != nil {
		return nil, err
	}
	sh.Fingerprint = shardcache.Fingerprint(sh)
	for _, t := range sh.Tensors {
		tot.Tensors++
		tot.RawBytes += t.Size
		stored := t.Size
		if t.Stored == shardcache.StoredSplitZip {
			tot.CompressedTensors++
			o, _ := w.Has(t.Key)
			stored = o.Size
		}
		tot.StoredBytes += stored
		if t.DType == "BF16" {
			tot.BF16Tensors++
			tot.BF16RawBytes += t.Size
			tot.BF16StoredBytes += stored
		}
	}
	return sh, nil
}

// tensorCompressor holds one job's buffers.
type tensorCompressor struct {
	w    *shardcache.Writer
	f    *os.File
	opts *CompressOptions
	buf  []byte
}

func newTensorCompressor(w *shardcache.Writer, f *os.File, opts *CompressOptions) *tensorCompressor {
	return &tensorCompressor{w: w, f: f, opts: opts, buf: make([]byte, segmentBytes)}
}

// compress records one tensor: BF16 tensors that pass the gate become
// SplitZip payloads, everything else stays raw.
func (tc *tensorCompressor) compress(t *safetensorsTensor) (*shardcache.Tensor, error) {
	rec := &shardcache.Tensor{Name: t.Name, DType: t.DType, Shape: t.Shape, Offset: t.Begin, Size: t.Size(), Stored: shardcache.StoredRaw}
	// Pass 1: content key, exponent histogram and a CRC to detect changes
	// between the passes.
	sha := sha256.New()
	var hist codec.Histogram
	var crc1 uint32
	bf16 := t.DType == "BF16" && t.Size()%2 == 0
	err := forSegments(tc.f, t.Begin, t.Size(), tc.buf, func(seg []byte) error {
		sha.Write(seg)
		if bf16 {
			hist.Add(seg)
			crc1 = crc32.Update(crc1, crcTable, seg)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	rec.Key = shardcache.KeyFromSum([32]byte(sha.Sum(nil)))
	if !bf16 {
		rec.Reason = "dtype " + t.DType
		tc.opts.Progress.Add(t.Size())
		return rec, tc.storeRaw(t, rec)
	}
	if o, ok := tc.w.Has(rec.Key); ok {
		// Stored by an earlier tensor or checkpoint.
		tc.opts.Progress.Add(t.Size())
		if o.Kind == shardcache.KindSplitZip {
			rec.Stored = shardcache.StoredSplitZip
		} else {
			rec.Reason = "stored raw before"
			rec.CopyStored = true
		}
		return rec, nil
	}
	n := t.Size() / 2
	cb := codec.NewCodebook(&hist)
	escapes := hist.Total() - uint64(cb.Coverage(&hist)*float64(hist.Total())+0.5)
	// A coded value costs 1.5 bytes, an escape 3 more: skip the second
	// pass when even that bound cannot pass the gate.
	if est := 1.5*float64(n) + 3*float64(escapes); n == 0 || est > (1-tc.opts.MinSaving)*float64(t.Size()) {
		rec.Reason = fmt.Sprintf("exponent coverage %.2f%%: saving below %.1f%%", 100*cb.Coverage(&hist), 100*tc.opts.MinSaving)
		tc.opts.Progress.Add(t.Size())
		return rec, tc.storeRaw(t, rec)
	}
	obj, err := tc.w.NewObject()
	if err != nil {
		return nil, err
	}
	defer obj.Abort()
	enc, err := codec.NewEncoder(obj.File, n, cb, codec.WithWorkers(1))
	if err != nil {
		return nil, err
	}
	var crc2 uint32
	err = forSegments(tc.f, t.Begin, t.Size(), tc.buf, func(seg []byte) error {
		crc2 = crc32.Update(crc2, crcTable, seg)
		tc.opts.Progress.Add(uint64(len(seg)))
		return enc.Write(seg)
	})
	if err != nil {
		return nil, err
	}
	if crc2 != crc1 {
		return nil, fmt.Errorf("%w: the source changed while it was being compressed", ErrMismatch)
	}
	h, err := enc.Close()
	if err != nil {
		return nil, err
	}
	st := enc.Stats()
	saving := 1 - float64(st.Size)/float64(t.Size())
	switch {
	case !st.InPlace:
		rec.Reason = "not decodable in place: " + st.NotInPlace.Error()
		return rec, tc.storeRaw(t, rec)
	case saving < tc.opts.MinSaving:
		rec.Reason = fmt.Sprintf("saving %.2f%% below %.1f%%", 100*saving, 100*tc.opts.MinSaving)
		return rec, tc.storeRaw(t, rec)
	}
	meta := &shardcache.Object{Kind: shardcache.KindSplitZip, Size: st.Size, RawSize: t.Size(), Values: n,
		Escapes: st.Escapes, RawChunks: st.RawChunks, Chunks: st.Chunks, Checksum: h.Checksum,
		Coverage: cb.Coverage(&hist), Entropy: hist.Entropy(), InPlace: true,
		EscapeRate: float64(st.Escapes) / float64(max(n, 1))}
	for _, e := range h.Codebook {
		meta.Codebook = append(meta.Codebook, int(e))
	}
	if err := obj.Commit(rec.Key, meta); err != nil {
		return nil, err
	}
	rec.Stored = shardcache.StoredSplitZip
	rec.CopyStored = true
	return rec, nil
}

// storeRaw copies a raw tensor into the cache when the cache is to be
// self-contained; otherwise the record is an alias of the source slice.
func (tc *tensorCompressor) storeRaw(t *safetensorsTensor, rec *shardcache.Tensor) error {
	if !tc.opts.SelfContained {
		return nil
	}
	rec.CopyStored = true
	if _, ok := tc.w.Has(rec.Key); ok {
		return nil
	}
	obj, err := tc.w.NewObject()
	if err != nil {
		return err
	}
	defer obj.Abort()
	sha := sha256.New()
	err = forSegments(tc.f, t.Begin, t.Size(), tc.buf, func(seg []byte) error {
		sha.Write(seg)
		_, err := obj.Write(seg)
		return err
	})
	if err != nil {
		return err
	}
	if shardcache.KeyFromSum([32]byte(sha.Sum(nil))) != rec.Key {
		return fmt.Errorf("%w: the source changed while it was being compressed", ErrMismatch)
	}
	return obj.Commit(rec.Key, &shardcache.Object{Kind: shardcache.KindRaw, Size: t.Size(), RawSize: t.Size()})
}
