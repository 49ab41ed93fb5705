package loader

// A tensor's stored bytes (a payload, or the raw bytes), read on one rank
// and decoded on another: what a loader spreading one read per node over
// several ranks moves between them (splitzip.distributed).

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/distplan"
	"github.com/splitzip/splitzip/shardcache"
)

// StoredSize returns the bytes ReadStored writes for tensor i: its
// payload's (fixed or entropy), or its raw size.
func (l *Loader) StoredSize(i int) (uint64, error) {
	t, err := l.Tensor(i)
	if err != nil {
		return 0, err
	}
	if k := t.rec.Stored; k == shardcache.StoredFixed || k == shardcache.StoredEntropy {
		o, err := l.c.Lookup(t.Key)
		if err != nil {
			return 0, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		return o.Size, nil
	}
	return t.Size, nil
}

// ReadStored writes tensor i's stored bytes into dst and returns their
// number: a payload checked whole (header, size, checksum), or the raw
// bytes from the source (or the cache's copy).
func (l *Loader) ReadStored(i int, dst []byte) (uint64, error) {
	t, err := l.Tensor(i)
	if err != nil {
		return 0, err
	}
	n, err := l.StoredSize(i)
	if err != nil {
		return 0, err
	}
	if uint64(len(dst)) < n {
		return n, fmt.Errorf("tensor %q: %w: a buffer of %d bytes for %d stored", t.Name, ErrTooSmall, len(dst), n)
	}
	k := t.rec.Stored
	if k != shardcache.StoredFixed && k != shardcache.StoredEntropy {
		return n, l.readSource(t, dst[:n])
	}
	// Read straight into dst, then checked there.
	p := dst[:n]
	name, path, err := l.readObject(t, p)
	if err != nil {
		return n, err
	}
	if err := checkStored(k, p, t.Size); err != nil {
		return n, fileError(t, name, path, err)
	}
	return n, nil
}

// readObject reads tensor t's payload object into p (its size, from
// the index), unchecked, and returns where it is (its file, or its range
// of a pack) and its file, for errors (fileError).
func (l *Loader) readObject(t *Tensor, p []byte) (name, path string, err error) {
	f, _, err := l.c.OpenObject(t.Key)
	if err != nil {
		return "", "", l.objectError(t, err)
	}
	defer f.Close()
	if _, err := io.ReadFull(f, p); err != nil {
		return f.Name(), f.Path(), fileError(t, f.Name(), f.Path(), err)
	}
	return f.Name(), f.Path(), nil
}

// objectError is err of opening or reading tensor t's object (whose
// text names the file already): a shardcache.TensorError with the file,
// for a local cache.
func (l *Loader) objectError(t *Tensor, err error) error {
	if loc, _, lerr := l.c.Locate(t.Key); lerr == nil && !l.c.Remote() {
		return &shardcache.TensorError{Tensor: t.Name, File: loc.Path, Named: true, Err: err}
	}
	return fmt.Errorf("tensor %q: %w", t.Name, err)
}

// fileError is err of tensor t found at at (the file, or a pack member's
// range of it) in the file at path.
func fileError(t *Tensor, at, path string, err error) error {
	return &shardcache.TensorError{Tensor: t.Name, File: path, At: at, Err: err}
}

// checkStored checks a whole payload of kind (shardcache.Stored*) that
// decodes to size bytes.
func checkStored(kind string, p []byte, size uint64) error {
	if kind == shardcache.StoredEntropy {
		if h, err := entropy.ParsePayloadHeader(p); err == nil && h.Version == 1 {
			// Version 1 (no chunk records, which entropy.Check needs):
			// size and checksum here, its tables when it is decoded.
			switch {
			case uint64(len(p)) != h.Size:
				return fmt.Errorf("%w: %d bytes, header says %d", entropy.ErrPayload, len(p), h.Size)
			case codec.Checksum(p) != h.Checksum:
				return &codec.ChecksumError{Payload: "entropy payload", Computed: codec.Checksum(p), Stored: h.Checksum}
			case h.ValueBytes() != size:
				return fmt.Errorf("%w: decodes to %d bytes, the tensor has %d", codec.ErrSize, h.ValueBytes(), size)
			}
			return nil
		}
		h, err := entropy.Check(p)
		if err == nil && h.ValueBytes() != size {
			err = fmt.Errorf("%w: decodes to %d bytes, the tensor has %d", codec.ErrSize, h.ValueBytes(), size)
		}
		return err
	}
	h, err := codec.ParseHeader(p)
	if err != nil {
		return err
	}
	return codec.CheckPayload(&h, uint64(len(p)), codec.Checksum(p), size/2)
}

// DecodeHost decodes src, tensor i's stored bytes as ReadStored gives
// them (read here or on another rank), into dst (at least its size),
// checking them as ReadStored does.
func (l *Loader) DecodeHost(i int, src, dst []byte) error {
	t, err := l.Tensor(i)
	if err != nil {
		return err
	}
	if uint64(len(dst)) < t.Size {
		return fmt.Errorf("tensor %q: %w: a destination of %d bytes for %d", t.Name, ErrTooSmall, len(dst), t.Size)
	}
	dst = dst[:t.Size]
	switch t.rec.Stored {
	case shardcache.StoredFixed:
		err = codec.Decode(dst, src)
	case shardcache.StoredEntropy:
		err = entropy.Decode(dst, src, 0)
	default:
		if uint64(len(src)) != t.Size {
			err = fmt.Errorf("%w: %d raw bytes, the tensor has %d", codec.ErrSize, len(src), t.Size)
		} else {
			copy(dst, src)
		}
	}
	if err != nil {
		return fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	return nil
}

// Plan returns, as JSON, the plan of loading this checkpoint onto ranks
// ranks under placement rules (distplan.ParseRules).
func (l *Loader) Plan(ranks int, rules string) ([]byte, error) {
	rs, err := distplan.ParseRules(rules)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	p, err := distplan.New(l.c, l.src, ranks, rs)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return json.Marshal(p)
}
