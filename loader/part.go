package loader

// Parts of a tensor for tensor-parallel ranks: a rank whose share of a
// tensor is a contiguous byte range (a shard along the first dimension)
// needs only the payload chunks that cover it. The reader rank cuts each
// rank's part from the stored bytes it read (PartOf) and sends it; the
// rank rebuilds exactly its bytes (DecodePart).

import (
	"errors"
	"fmt"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/shardcache"
)

// partRange checks the byte range [lo, hi) of tensor t: inside it, and
// on value boundaries for a payload.
func partRange(t *Tensor, lo, hi uint64) error {
	if lo > hi || hi > t.Size {
		return fmt.Errorf("tensor %q: %w: bytes [%d, %d) of %d", t.Name, ErrInvalid, lo, hi, t.Size)
	}
	if t.rec.Stored == shardcache.StoredRaw {
		return nil
	}
	size := uint64(2)
	if fi, err := entropy.FieldIndex(t.DType, false); err == nil && t.rec.Stored == shardcache.StoredEntropy {
		size = uint64(entropy.Fields[fi].Size)
	}
	if lo%size != 0 || hi%size != 0 {
		return fmt.Errorf("tensor %q: %w: bytes [%d, %d) split a %s value", t.Name, ErrInvalid, lo, hi, t.DType)
	}
	return nil
}

// PartOf returns the part of tensor i's stored bytes (as ReadStored gives
// them, checked) that DecodePart turns into the tensor's bytes [lo, hi):
// for a fixed-rate payload, the chunks covering them (codec.Part); for a
// raw tensor, those bytes; for an entropy payload, its chunks covering
// them (entropy.Part), or the whole payload for one of version 1, which
// has no chunk records.
func (l *Loader) PartOf(i int, stored []byte, lo, hi uint64) ([]byte, error) {
	t, err := l.Tensor(i)
	if err != nil {
		return nil, err
	}
	if err := partRange(t, lo, hi); err != nil {
		return nil, err
	}
	switch t.rec.Stored {
	case shardcache.StoredEntropy:
		h, err := entropy.ParsePayloadHeader(stored)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		size := uint64(entropy.Fields[h.Field].Size)
		first, k := entropy.ChunksCovering(h.ChunkValues, lo/size, hi/size)
		p, err := entropy.Part(stored, first, k)
		if errors.Is(err, entropy.ErrNoRecords) {
			// Version 1 keeps no records per chunk: the part is the
			// payload, decoded whole by DecodePart.
			return append([]byte(nil), stored...), nil
		}
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		return p, nil
	case shardcache.StoredFixed:
		first, k := codec.ChunksCovering(lo/2, hi/2)
		p, err := codec.Part(stored, first, k)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		return p, nil
	}
	if uint64(len(stored)) != t.Size {
		return nil, fmt.Errorf("tensor %q: %w: %d raw bytes, the tensor has %d", t.Name, codec.ErrSize, len(stored), t.Size)
	}
	return append([]byte(nil), stored[lo:hi]...), nil
}

// DecodePart writes tensor i's bytes [lo, hi) into dst (at least hi-lo
// bytes) from part, as PartOf cut it on another rank, checking it: the
// part's checksum and chunks, and that it is of this tensor and covers
// the range.
func (l *Loader) DecodePart(i int, part []byte, lo, hi uint64, dst []byte) error {
	t, err := l.Tensor(i)
	if err != nil {
		return err
	}
	if err := partRange(t, lo, hi); err != nil {
		return err
	}
	if uint64(len(dst)) < hi-lo {
		return fmt.Errorf("tensor %q: %w: a destination of %d bytes for a part of %d", t.Name, ErrTooSmall, len(dst), hi-lo)
	}
	dst = dst[:hi-lo]
	switch t.rec.Stored {
	case shardcache.StoredEntropy:
		if len(part) >= 4 && string(part[:4]) == entropy.PayloadMagic {
			whole := make([]byte, t.Size)
			if err := checkStored(t.rec.Stored, part, t.Size); err != nil {
				return fmt.Errorf("tensor %q: %w", t.Name, err)
			}
			if err := entropy.Decode(whole, part, 0); err != nil {
				return fmt.Errorf("tensor %q: %w", t.Name, err)
			}
			copy(dst, whole[lo:hi])
			return nil
		}
		pi, err := entropy.ParsePart(part)
		if err == nil {
			err = decodePart(dst, part, lo, hi, pi.Values, uint64(entropy.Fields[pi.Header.Field].Size), pi.Header.ValueBytes(), t.Size,
				func(v []byte) error { _, err := entropy.DecodePart(v, part); return err })
		}
		if err != nil {
			return fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		return nil
	case shardcache.StoredFixed:
		pi, err := codec.ParsePart(part)
		if err == nil {
			err = decodePart(dst, part, lo, hi, pi.Values, 2, 2*pi.Header.Values, t.Size,
				func(v []byte) error { _, err := codec.DecodePart(v, part); return err })
		}
		if err != nil {
			return fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		return nil
	}
	if uint64(len(part)) != hi-lo {
		return fmt.Errorf("tensor %q: %w: a raw part of %d bytes for [%d, %d)", t.Name, codec.ErrSize, len(part), lo, hi)
	}
	copy(dst, part)
	return nil
}

// decodePart checks that a part of values [vals[0], vals[1]) (size bytes
// each) of a tensor of whole bytes covers the bytes [lo, hi) of a tensor
// of tensorBytes, decodes it with fn and copies those bytes into dst.
func decodePart(dst, part []byte, lo, hi uint64, vals [2]uint64, size, whole, tensorBytes uint64, fn func([]byte) error) error {
	switch {
	case whole != tensorBytes:
		return fmt.Errorf("%w: a part of a tensor of %d bytes, this one has %d", codec.ErrSize, whole, tensorBytes)
	case lo == hi:
		return nil
	case vals[0]*size > lo || vals[1]*size < hi:
		return fmt.Errorf("%w: a part of bytes [%d, %d) for [%d, %d)", codec.ErrSize, vals[0]*size, vals[1]*size, lo, hi)
	}
	v := make([]byte, (vals[1]-vals[0])*size)
	if err := fn(v); err != nil {
		return err
	}
	copy(dst, v[lo-vals[0]*size:])
	return nil
}
