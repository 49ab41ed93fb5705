package pipeline

// Entropy payloads at compress time (--codec entropy or auto): which
// field of a dtype is coded, the gate, and the second pass.

import (
	"fmt"
	"hash/crc32"
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

// entropyEstimate is the bytes an entropy payload of field fi with symbol
// counts freq takes, but for the lanes' lengths: the coded symbols, the
// other bits, the header, code lengths and chunk index, and 6 bytes of
// each chunk's own header.
func entropyEstimate(fi int, freq []uint64) (uint64, error) {
	f := entropy.Fields[fi]
	var n uint64
	for _, c := range freq {
		n += c
	}
	lengths, err := entropy.Lengths(freq, entropy.MaxLen)
	if err != nil {
		return 0, err
	}
	code, err := entropy.NewCode(lengths, entropy.MaxLen)
	if err != nil {
		return 0, err
	}
	chunks := (n + codec.ChunkValues - 1) / codec.ChunkValues
	bits := code.Bits(freq) + n*uint64(f.Other())
	return (bits+7)/8 + 64 + 128 + 8*(chunks+1) + 6*chunks, nil
}

// entropyPayload writes the entropy payload of a float tensor in the
// field of fields that codes smallest (freqs are their symbol counts from
// the first pass) and records it in rec, or reports why it did not pass
// the gate. progress says whether its second pass counts the tensor in
// the progress (it does not when a fixed payload's pass already did).
func (tc *tensorCompressor) entropyPayload(m *mapping, t *safetensors.Tensor, rec *shardcache.Tensor, fields []int, freqs [][]uint64, crc1 uint32, progress bool) (bool, string, error) {
	best, bestEst := -1, uint64(0)
	for k, fi := range fields {
		est, err := entropyEstimate(fi, freqs[k])
		if err != nil {
			return false, "", err
		}
		if best < 0 || est < bestEst {
			best, bestEst = k, est
		}
	}
	fi, freq := fields[best], freqs[best]
	n := t.Size() / uint64(entropy.Fields[fi].Size)
	if n == 0 || float64(bestEst) > (1-tc.opts.MinSaving)*float64(t.Size()) {
		if progress {
			tc.opts.Progress.Add(t.Size())
		}
		return false, fmt.Sprintf("entropy payload of about %d bytes saves %.1f%%, below %.1f%%",
			bestEst, 100*(1-float64(bestEst)/float64(max(t.Size(), 1))), 100*tc.opts.MinSaving), nil
	}
	obj, err := tc.w.NewObject()
	if err != nil {
		return false, "", err
	}
	defer obj.Abort()
	enc, err := entropy.NewEncoder(obj.File, fi, n, freq)
	if err != nil {
		return false, "", err
	}
	var crc2 uint32
	err = m.segments(t.Begin, t.End, true, func(seg []byte) error {
		crc2 = crc32.Update(crc2, crcTable, seg)
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
	meta := &shardcache.Object{Kind: shardcache.KindEntropy, Size: size, RawSize: t.Size(), Values: n, Checksum: h.Checksum,
		Chunks: h.Chunks(), Field: f.Name(), Entropy: entropy.EntropyBits(freq) / float64(n), InPlace: h.InPlace}
	if err := obj.Commit(rec.Key, meta); err != nil {
		return false, "", err
	}
	rec.Stored, rec.CopyStored = shardcache.StoredEntropy, true
	rec.Coverage, rec.Entropy, rec.Reason = 0, 0, ""
	return true, "", nil
}
