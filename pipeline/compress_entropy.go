package pipeline

// Entropy payloads at compress time (--codec entropy or auto): which
// field of a dtype is coded, the gate, and the second pass.

import (
	"fmt"
	"io"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/safetensors"
	"github.com/splitzip/splitzip/shardcache"
)

// entropyFields returns the fields (indices into entropy.Fields) an
// entropy payload of a tensor of dtype and size bytes may code: the
// exponent, and for FP8 also the whole byte; none for other dtypes or a
// size that is not whole values.
func entropyFields(dtype string, size uint64) []int {
	var out []int
	for i, f := range entropy.Fields {
		if f.DType == dtype && size%uint64(f.Size) == 0 {
			out = append(out, i)
		}
	}
	return out
}

// entropyEstimate returns about what an entropy payload would store of a
// tensor from its first pass's counts: the smallest estimate, or the
// tensor's size when that would not pass the gate.
func (tc *tensorCompressor) entropyEstimate(t *safetensors.Tensor, counts []*entropy.Counts) (uint64, error) {
	k, best, err := smallestEstimate(counts)
	if err != nil || k < 0 || float64(best) > (1-tc.opts.MinSaving)*float64(t.Size()) {
		return t.Size(), err
	}
	return min(best, t.Size()), nil
}

// smallestEstimate returns which of the counts of a tensor's candidate
// fields codes smallest and its estimated payload, gate or no gate, or
// -1 where none holds values.
func smallestEstimate(counts []*entropy.Counts) (int, uint64, error) {
	best, bestEst := -1, uint64(0)
	for k, c := range counts {
		est, err := c.Estimate()
		if err != nil {
			return -1, 0, err
		}
		if c.Values() > 0 && (best < 0 || est < bestEst) {
			best, bestEst = k, est
		}
	}
	return best, bestEst, nil
}

// entropyPayload writes the entropy payload of a float tensor in the
// field that codes smallest (counts are each candidate field's counts
// from the first pass) and records it in rec, or reports why it did not pass
// the gate. progress says whether its second pass counts the tensor in
// the progress (it does not when a fixed payload's pass already did).
func (tc *tensorCompressor) entropyPayload(r *sourceReader, t *safetensors.Tensor, rec *shardcache.Tensor, counts []*entropy.Counts, crc1 uint32, progress bool) (bool, string, error) {
	best, bestEst, err := smallestEstimate(counts)
	if err != nil {
		return false, "", err
	}
	if best < 0 || float64(bestEst) > (1-tc.opts.MinSaving)*float64(t.Size()) {
		if progress {
			tc.opts.Progress.Add(t.Size())
		}
		if best < 0 {
			return false, "no values to code", nil
		}
		return false, fmt.Sprintf("entropy payload of about %d bytes saves %.1f%%, below %.1f%%",
			bestEst, 100*(1-float64(bestEst)/float64(max(t.Size(), 1))), 100*tc.opts.MinSaving), nil
	}
	cs := counts[best]
	fi, n := cs.Field(), cs.Values()
	obj, err := tc.w.NewObject()
	if err != nil {
		return false, "", err
	}
	defer obj.Abort()
	enc, err := entropy.NewEncoder(obj, cs)
	if err != nil {
		return false, "", err
	}
	var crc2 uint32
	err = r.segments(t.Begin, t.End, func(seg []byte) error {
		crc2 = codec.UpdateChecksum(crc2, seg)
		if progress {
			tc.opts.Progress.Add(uint64(len(seg)))
		}
		return enc.Write(seg)
	})
	if err != nil {
		return false, "", err
	}
	if crc2 != crc1 {
		return false, "", fmt.Errorf("%w: the source changed while it was being compressed", ErrMismatch)
	}
	size, err := enc.Close()
	if err != nil {
		return false, "", err
	}
	if saving := 1 - float64(size)/float64(t.Size()); saving < tc.opts.MinSaving {
		return false, fmt.Sprintf("entropy payload saves %.2f%%, below %.1f%%", 100*saving, 100*tc.opts.MinSaving), nil
	}
	var hb [64]byte
	if _, err := obj.ReadAt(hb[:], 0); err != nil && err != io.EOF {
		return false, "", err
	}
	h, err := entropy.ParsePayloadHeader(hb[:])
	if err != nil {
		return false, "", err
	}
	f := entropy.Fields[fi]
	meta := &shardcache.Object{Kind: shardcache.KindEntropy, Size: size, RawSize: t.Size(), Checksum: h.Checksum,
		ObjectStats: shardcache.ObjectStats{Values: n, Chunks: h.Chunks(), Field: f.Name(),
			Entropy: entropy.EntropyBits(cs.Freq()) / float64(n), InPlace: h.InPlace}}
	if err := obj.Commit(rec.Key, meta); err != nil {
		return false, "", err
	}
	rec.Stored, rec.CopyStored = shardcache.StoredEntropy, true
	rec.Coverage, rec.Entropy, rec.Reason = 0, 0, ""
	return true, "", nil
}
