package loader

// Parts of a tensor for tensor-parallel ranks: a rank whose share of a
// tensor is a contiguous byte range (a shard along the first dimension)
// needs only the payload chunks that cover it. The reader rank cuts each
// rank's part from the stored bytes it read (PartOf) and sends it; the
// rank rebuilds exactly its bytes (DecodePart).

import (
	"fmt"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/shardcache"
)

// partRange checks the byte range [lo, hi) of tensor t: inside it, and
// on value boundaries for a payload.
func partRange(t *Tensor, lo, hi uint64) error {
	if lo > hi || hi > t.Size {
		return fmt.Errorf("tensor %q: %w: bytes [%d, %d) of %d", t.Name, ErrInvalid, lo, hi, t.Size)
	}
	if t.rec.Stored == shardcache.StoredSplitZip && (lo%2 != 0 || hi%2 != 0) {
		return fmt.Errorf("tensor %q: %w: bytes [%d, %d) split a BF16 value", t.Name, ErrInvalid, lo, hi)
	}
	return nil
}

// PartOf returns the part of tensor i's stored bytes (as ReadStored gives
// them, checked) that DecodePart turns into the tensor's bytes [lo, hi):
// for a fixed-rate payload, the chunks covering them (codec.Part); for a
// raw tensor, those bytes. An entropy payload has no parts yet
// (ErrInvalid): send it whole.
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
		return nil, fmt.Errorf("tensor %q: %w: an entropy payload has no parts", t.Name, ErrInvalid)
	case shardcache.StoredSplitZip:
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
		return fmt.Errorf("tensor %q: %w: %d bytes for %d", t.Name, ErrTooSmall, len(dst), hi-lo)
	}
	dst = dst[:hi-lo]
	switch t.rec.Stored {
	case shardcache.StoredEntropy:
		return fmt.Errorf("tensor %q: %w: an entropy payload has no parts", t.Name, ErrInvalid)
	case shardcache.StoredSplitZip:
		pi, err := codec.ParsePart(part)
		switch {
		case err != nil:
		case 2*pi.Header.Values != t.Size:
			err = fmt.Errorf("%w: a part of a tensor of %d values, this one has %d", codec.ErrSize, pi.Header.Values, t.Size/2)
		case lo < hi && (pi.Values[0] > lo/2 || pi.Values[1] < hi/2):
			err = fmt.Errorf("%w: a part of values [%d, %d) for [%d, %d)", codec.ErrSize, pi.Values[0], pi.Values[1], lo/2, hi/2)
		}
		if err == nil && lo < hi {
			vals := make([]byte, 2*(pi.Values[1]-pi.Values[0]))
			if _, err = codec.DecodePart(vals, part); err == nil {
				copy(dst, vals[lo-2*pi.Values[0]:])
			}
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
