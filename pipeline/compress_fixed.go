package pipeline

// fixed-codec payloads at compress time (--codec fixed or auto): the gate
// and the second pass.

import (
	"fmt"
	"strings"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/safetensors"
	"github.com/splitzip/splitzip/shardcache"
)

// fixedEstimate bounds the fixed-codec payload of n BF16 values with
// histogram hist and codebook cb: a coded value costs 1.5 bytes, an
// escape 3 more, and the header, group table and a chunk entry come on
// top.
func fixedEstimate(hist *codec.Histogram, cb codec.Codebook, n uint64) float64 {
	escapes := hist.Total() - uint64(cb.Coverage(hist)*float64(hist.Total())+0.5)
	return 1.5*float64(n) + 3*float64(escapes) + codec.HeaderSize + 16 + codec.EntrySize
}

// fixedPayload writes a BF16 tensor's fixed-codec payload and records it in
// rec, or reports why it did not pass the gate, and whether it read the
// tensor a second time (counting it in the progress).
func (tc *tensorCompressor) fixedPayload(r *sourceReader, t *safetensors.Tensor, rec *shardcache.Tensor, hist *codec.Histogram, crc1 uint32) (ok, read bool, reason string, err error) {
	n := t.Size() / 2
	cb := codec.NewCodebook(hist)
	rec.Coverage, rec.Entropy = cb.Coverage(hist), hist.Entropy()
	est := fixedEstimate(hist, cb, n)
	if n == 0 {
		return false, false, "no values to code", nil
	}
	if est > (1-tc.opts.MinSaving)*float64(t.Size()) {
		return false, false, fmt.Sprintf("saving at most %.1f%%, below %.1f%% (exponent coverage %.2f%%)",
			100*(1-est/float64(max(t.Size(), 1))), 100*tc.opts.MinSaving, 100*cb.Coverage(hist)), nil
	}
	obj, err := tc.w.NewObject()
	if err != nil {
		return false, false, "", err
	}
	defer obj.Abort()
	enc, err := codec.NewEncoder(obj, n, cb, codec.WithWorkers(1))
	if err != nil {
		return false, false, "", err
	}
	var crc2 uint32
	err = r.segments(t.Begin, t.End, func(seg []byte) error {
		crc2 = codec.UpdateChecksum(crc2, seg)
		tc.opts.Progress.Add(uint64(len(seg)))
		return enc.Write(seg)
	})
	if err != nil {
		return false, true, "", err
	}
	if crc2 != crc1 {
		return false, true, "", fmt.Errorf("%w: the source changed while it was being compressed", ErrMismatch)
	}
	h, err := enc.Close()
	if err != nil {
		return false, true, "", err
	}
	st := enc.Stats()
	saving := 1 - float64(st.Size)/float64(t.Size())
	switch {
	case saving < tc.opts.MinSaving:
		return false, true, fmt.Sprintf("saving %.2f%%, below %.1f%%", 100*saving, 100*tc.opts.MinSaving), nil
	case !st.InPlace:
		return false, true, "not decodable in place (" + strings.TrimPrefix(st.NotInPlace.Error(), codec.ErrNotInPlace.Error()+": ") + ")", nil
	}
	meta := &shardcache.Object{Kind: shardcache.KindFixed, Size: st.Size, RawSize: t.Size(), Checksum: h.Checksum,
		ObjectStats: shardcache.ObjectStats{Values: n, Escapes: st.Escapes, RawChunks: st.RawChunks, Chunks: st.Chunks,
			Coverage: cb.Coverage(hist), Entropy: hist.Entropy(), InPlace: true,
			EscapeRate: float64(st.Escapes) / float64(max(n, 1))}}
	for _, e := range h.Codebook {
		meta.Codebook = append(meta.Codebook, int(e))
	}
	if err := obj.Commit(rec.Key, meta); err != nil {
		return false, true, "", err
	}
	rec.Stored = shardcache.StoredFixed
	rec.CopyStored = true
	rec.Coverage, rec.Entropy = 0, 0 // the payload's object has them
	return true, true, "", nil
}
