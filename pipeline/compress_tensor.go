package pipeline

// One tensor's compression: its bytes read once from the source, hashed
// and summed, encoded by the codec chosen for it (compress_fixed.go,
// compress_entropy.go) or stored raw.

import (
	"fmt"
	"hash"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/costmodel"
	"github.com/splitzip/splitzip/safetensors"
	"github.com/splitzip/splitzip/shardcache"
)

// tensorCompressor holds one job's buffers, reused from tensor to tensor.
type tensorCompressor struct {
	w    *shardcache.Writer
	opts *CompressOptions
	sha  hash.Hash // the content key's hasher
}

func newTensorCompressor(w *shardcache.Writer, opts *CompressOptions) *tensorCompressor {
	return &tensorCompressor{w: w, opts: opts, sha: shardcache.NewHasher()}
}

// compressCost is what one compress job holds besides its tables: the
// segment buffer its source reader reads into (kept between the passes
// over a tensor that fits in it), the encoder's stage and output buffers,
// and a small object's bytes, held in memory until it is committed
// (shardcache.BufferedObjectBytes).
const compressCost = 4*segmentBytes + shardcache.BufferedObjectBytes

// reuse records t as the object o stored by an earlier tensor or
// checkpoint: a tensor has one form in a cache, so a payload an earlier
// run stored in another codec than this run's is kept, and counted in
// *kept, as is a raw copy an earlier run stored.
func (tc *tensorCompressor) reuse(t *safetensors.Tensor, rec *shardcache.Tensor, o *shardcache.Object, kept *bool) {
	tc.opts.Progress.Add(t.Size())
	tc.adopt(rec, o, kept)
	if rec.Payload() && !tc.stores(t, o.Kind) && !tc.thisCodecsBF16Form(t, o) && tc.w.Earlier(rec.Key) {
		*kept = true
	}
}

// thisCodecsBF16Form reports whether o, a payload of t's bytes, is the fixed
// payload this run's codec would give a BF16 tensor of them: a tensor of
// another dtype takes it as this codec's form of its bytes, not as
// another codec's kept from before (review 70b).
func (tc *tensorCompressor) thisCodecsBF16Form(t *safetensors.Tensor, o *shardcache.Object) bool {
	if o.Kind != shardcache.KindFixed || t.DType == "BF16" {
		return false
	}
	bf := *t
	bf.DType = "BF16"
	return tc.stores(&bf, o.Kind)
}

// adopt records rec as the object o of its key (reuse, settle).
func (tc *tensorCompressor) adopt(rec *shardcache.Tensor, o *shardcache.Object, kept *bool) {
	rec.Stored, rec.CopyStored, rec.Reason = shardcache.StoredAs(o.Kind), true, ""
	switch {
	case rec.Payload():
	case tc.w.Earlier(rec.Key):
		rec.Reason = "stored raw before"
		*kept = true // an earlier run's copy (Totals.KeptCopies)
	default:
		// This run's: a gap or another tensor of the same bytes.
		rec.Reason = "the same bytes as another region stored raw"
	}
}

// compress records one tensor: with the fixed codec, BF16 tensors that
// pass the gate become fixed-codec payloads; with entropy, float tensors of
// every dtype entropy payloads; with auto, BF16 tensors fixed-codec payloads
// (or entropy ones when those fail the gate) and the other float dtypes
// entropy payloads. Everything else stays raw. It reads the tensor from m
// a segment at a time, dropping each segment's pages once read.
//
// With the fixed codec, a float tensor of another dtype is counted too, so
// that *auto is what --codec auto would store of it (its size when that
// saves nothing); *auto is left alone otherwise. *kept is set when an
// earlier run stored the tensor as a payload of another codec, which it
// keeps.
func (tc *tensorCompressor) compress(r *sourceReader, t *safetensors.Tensor, rec *shardcache.Tensor, auto *uint64, kept *bool) error {
	if err := tc.compressOne(r, t, rec, auto, kept); err != nil {
		return err
	}
	tc.settle(rec, kept)
	return nil
}

// settle gives rec the form of the object the cache holds for its key
// where it names another: a tensor has one form in a cache, that of the
// first object stored for its bytes. Tensors of two dtypes with the same
// bytes (a zero BF16 bias and a zero BOOL mask of one size) would each
// be stored in its own form, a payload and a raw copy of one key, and
// the second is dropped (shardcache's ObjectFile.Commit), from another
// job at the same time or from this one before; its record must then
// name the first's form.
func (tc *tensorCompressor) settle(rec *shardcache.Tensor, kept *bool) {
	kind := rec.ObjectKind()
	if kind == "" {
		return // read from the source: no object
	}
	if o, ok := tc.w.Recorded(rec.Key); ok && o.Kind != kind {
		tc.adopt(rec, o, kept)
	}
}

// compressOne is compress less settle.
func (tc *tensorCompressor) compressOne(r *sourceReader, t *safetensors.Tensor, rec *shardcache.Tensor, auto *uint64, kept *bool) error {
	*rec = shardcache.Tensor{Name: t.Name, DType: t.DType, Shape: t.Shape, Offset: t.Begin, Size: t.Size(), Stored: shardcache.StoredRaw}
	codecName := tc.opts.Codec
	fixed := t.DType == "BF16" && t.Size()%2 == 0 && codecName != CodecEntropy
	var fields []int
	hintOnly := false // fields are counted for the hint, not coded
	switch {
	case codecName == CodecEntropy || codecName == CodecAuto || codecName == CodecCost:
		fields = entropyFields(t.DType, t.Size())
	case !fixed:
		fields = entropyFields(t.DType, t.Size())
		hintOnly = len(fields) > 0
	}
	// Pass 1: content key, the exponent histogram of each candidate
	// coding, and a CRC to detect changes between the passes.
	sha := tc.sha
	sha.Reset()
	var hist codec.Histogram
	counts := make([]*entropy.Counts, len(fields))
	for k, fi := range fields {
		var err error
		if counts[k], err = entropy.NewCounts(fi); err != nil {
			return err
		}
		defer counts[k].Release()
	}
	var crc1 uint32
	err := r.segments(t.Begin, t.End, func(seg []byte) error {
		sha.Write(seg)
		if fixed {
			hist.Add(seg)
		}
		for _, c := range counts {
			if err := c.Add(seg); err != nil {
				return err
			}
		}
		if fixed || (len(fields) > 0 && !hintOnly) {
			crc1 = codec.UpdateChecksum(crc1, seg)
		}
		return nil
	})
	if err != nil {
		return err
	}
	rec.Key = shardcache.KeyFromSum([32]byte(sha.Sum(nil)))
	if hintOnly {
		// A payload an earlier run stored (--codec entropy or auto) is
		// kept, as below, rather than aliased raw.
		if o, ok := tc.w.Has(rec.Key); ok && (o.Kind == shardcache.KindFixed || o.Kind == shardcache.KindEntropy) {
			tc.reuse(t, rec, o, kept)
			*auto = o.Size // what auto stores of it: this payload
			return nil
		}
	}
	if !fixed && (len(fields) == 0 || hintOnly) {
		rec.Reason = "dtype " + t.DType
		if hintOnly {
			est, err := tc.entropyEstimate(t, counts)
			if err != nil {
				return err
			}
			*auto = est
			if est < t.Size() {
				rec.Reason += " (--codec entropy or auto codes it)"
			}
		}
		tc.opts.Progress.Add(t.Size())
		return tc.storeRaw(r, t, rec, kept)
	}
	if o, ok := tc.w.Has(rec.Key); ok {
		tc.reuse(t, rec, o, kept)
		return nil
	}
	if codecName == CodecCost {
		return tc.compressByCost(r, t, rec, &hist, counts, crc1, fixed, kept)
	}
	progress := true // no second pass has counted the tensor yet
	if fixed {
		ok, read, reason, err := tc.fixedPayload(r, t, rec, &hist, crc1)
		switch {
		case err != nil || ok:
			return err
		case len(fields) == 0:
			rec.Reason = reason
			if !read {
				tc.opts.Progress.Add(t.Size())
			}
			return tc.storeRaw(r, t, rec, kept)
		}
		// auto: the entropy payload may pass where the fixed one did not.
		progress = !read
		rec.Reason = reason
	}
	ok, reason, err := tc.entropyPayload(r, t, rec, counts, crc1, progress)
	if err != nil || ok {
		return err
	}
	if rec.Reason != "" {
		reason = "fixed: " + rec.Reason + "; entropy: " + reason
	}
	rec.Reason = reason
	if !fixed && t.DType == "BF16" {
		bf16Stats(rec, counts)
	}
	return tc.storeRaw(r, t, rec, kept)
}

// bf16Stats records, for a BF16 tensor left raw that the fixed codec did
// not measure (--codec entropy), the coverage and exponent entropy that
// codec would have found, from the first pass's counts of the BF16
// exponent field: so inspect explains it, and bounds it, as it does
// under any codec.
func bf16Stats(rec *shardcache.Tensor, counts []*entropy.Counts) {
	for _, c := range counts {
		if f := entropy.Fields[c.Field()]; f.DType != "BF16" || f.Bits != 8 || c.Values() == 0 {
			continue
		}
		var hist codec.Histogram
		copy(hist[:], c.Freq())
		cb := codec.NewCodebook(&hist)
		rec.Coverage, rec.Entropy = cb.Coverage(&hist), hist.Entropy()
		return
	}
}

// stores reports whether this run's codec may store t as a payload of
// kind: for cost, whether the model would store it so rather than raw (it
// weighs that kind alone: an earlier run's payload is kept without the
// first pass that estimates the others).
func (tc *tensorCompressor) stores(t *safetensors.Tensor, kind string) bool {
	if tc.opts.Codec == CodecCost {
		fixed, entropy := kind == shardcache.KindFixed, kind == shardcache.KindEntropy
		return tc.opts.Cost.Choose(t.Size(), fixed, entropy).Kind != costmodel.Raw
	}
	return codecStores(tc.opts.Codec, t.DType, kind)
}

// codecStores reports whether codecName, other than cost, may store a
// tensor of dtype as a payload of kind.
func codecStores(codecName, dtype, kind string) bool {
	switch codecName {
	case CodecFixed:
		return kind == shardcache.KindFixed && dtype == "BF16"
	case CodecAuto:
		// BF16 fixed, or entropy where its fixed payload fails the gate.
		return kind == shardcache.KindEntropy || kind == shardcache.KindFixed && dtype == "BF16"
	}
	return kind == shardcache.KindEntropy
}

// storeRaw copies a raw tensor into the cache when the cache is to be
// self-contained; otherwise the record is an alias of the source slice,
// or, where an earlier run (--self-contained) stored a copy of the same
// bytes, of that copy too (stored again from the source where it is
// found damaged): a run without --self-contained does not make a
// self-contained checkpoint need its source again, nor let gc delete the
// copy a user may count on (Totals.KeptCopies; *kept is set).
func (tc *tensorCompressor) storeRaw(r *sourceReader, t *safetensors.Tensor, rec *shardcache.Tensor, kept *bool) error {
	if !tc.opts.SelfContained && tc.w.EarlierKind(rec.Key) != shardcache.KindRaw {
		return nil
	}
	if !tc.opts.SelfContained {
		*kept = true // an earlier run's copy (stored again if found damaged)
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
	h := shardcache.NewHasher()
	err = r.segments(t.Begin, t.End, func(seg []byte) error {
		h.Write(seg)
		_, err := obj.Write(seg)
		return err
	})
	if err != nil {
		return err
	}
	if shardcache.KeyFromSum([32]byte(h.Sum(nil))) != rec.Key {
		return fmt.Errorf("%w: the source changed while it was being compressed", ErrMismatch)
	}
	size := t.Size()
	return obj.Commit(rec.Key, &shardcache.Object{Kind: shardcache.KindRaw, Size: size, RawSize: size})
}
