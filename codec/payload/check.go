package payload

import (
	"errors"
	"fmt"
	"io"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
)

// Sniff returns the kind of the payload whose first bytes are head: an
// entropy payload by its magic, else a fixed one (whose header Parse then
// checks).
func Sniff(head []byte) Kind {
	if len(head) >= len(entropy.PayloadMagic) && string(head[:len(entropy.PayloadMagic)]) == entropy.PayloadMagic {
		return KindEntropy
	}
	return KindFixed
}

// Parse parses and checks the head of a payload of kind k from its first
// bytes (min(its size, HeadBytes) bytes, or more): the header's fields,
// an entropy payload's code lengths and pair table, and the bounds every
// reader relies on before it allocates: a fixed payload stores at least
// a byte a value, and a payload flagged in place is no larger than the
// values it decodes to (the in-place invariant).
func Parse(k Kind, head []byte) (Head, error) {
	switch k {
	case KindFixed:
		h, err := parseFixed(head)
		if err != nil {
			return nil, err
		}
		return &Fixed{h}, nil
	case KindEntropy:
		h, err := entropy.ParseHead(head)
		switch {
		case err != nil:
			return nil, err
		case h.InPlace && h.Values > 0 && h.Size > h.ValueBytes():
			return nil, fmt.Errorf("%w: an in-place payload of %d bytes is larger than its %d values", entropy.ErrPayload, h.Size, h.ValueBytes())
		}
		return &Entropy{h}, nil
	}
	return nil, fmt.Errorf("%w: %d", ErrKind, uint8(k))
}

// Check checks h against the payload it was parsed from: size bytes read
// (whole or in pieces) whose checksum, folded in order, is sum, decoding
// to a tensor of decoded bytes (0: not checked); tail is the payload's
// bytes from h.Tail() to its end (nil when h.Tail() is its size). Errors
// say what was found and what was wanted, and match codec.ErrCorrupt,
// codec.ErrChecksum, codec.ErrSize or entropy.ErrPayload.
func Check(h Head, size uint64, sum uint32, decoded uint64, tail []byte) error {
	switch h := h.(type) {
	case *Fixed:
		return checkFixed(&h.Header, size, sum, decoded)
	case *Entropy:
		switch {
		case h.Head.Size != size:
			return fmt.Errorf("%w: %d bytes, header says %d", entropy.ErrPayload, size, h.Head.Size)
		case sum != h.Head.Checksum:
			return &codec.ChecksumError{Payload: "entropy payload", Computed: sum, Stored: h.Head.Checksum}
		case decoded != 0 && h.ValueBytes() != decoded:
			return fmt.Errorf("%w: entropy payload decodes to %d bytes, the tensor has %d", codec.ErrSize, h.ValueBytes(), decoded)
		}
	}
	if uint64(len(tail)) != size-min(h.Tail(), size) {
		return fmt.Errorf("%w: %d bytes of the payload's tail for a check that needs %d", codec.ErrSize, len(tail), size-min(h.Tail(), size))
	}
	return h.checkTail(tail)
}

// CheckBytes parses and checks a whole payload p of kind k whose
// checksum, computed as it was read, is sum (Parse, then Check), decoding
// to decoded bytes (0: not checked).
func CheckBytes(k Kind, p []byte, sum uint32, decoded uint64) (Head, error) {
	h, err := Parse(k, p)
	if err != nil {
		return nil, err
	}
	n := uint64(len(p))
	if err := Check(h, n, sum, decoded, p[min(h.Tail(), n):]); err != nil {
		return nil, err
	}
	return h, nil
}

// Sum returns the checksum of a whole payload, as its header records it.
func Sum(p []byte) uint32 { return codec.Checksum(p) }

// Tail gathers the bytes of a payload that Check needs besides its
// checksum (from h.Tail() to its end: an entropy payload's chunk index)
// from the pieces of a payload read in parallel, as they pass.
type Tail struct {
	at  uint64
	buf []byte
}

// NewTail returns the gatherer of h's tail.
func NewTail(h Head) *Tail {
	at := min(h.Tail(), h.Size())
	return &Tail{at: at, buf: make([]byte, h.Size()-at)}
}

// Add takes what of q, the payload's bytes at offset off, lies in the
// tail. Goroutines may add pieces at once: they write apart.
func (t *Tail) Add(off uint64, q []byte) {
	if end := off + uint64(len(q)); end > t.at && off < t.at+uint64(len(t.buf)) {
		lo := max(off, t.at)
		copy(t.buf[lo-t.at:], q[lo-off:])
	}
}

// Bytes returns the tail gathered, Check's last argument.
func (t *Tail) Bytes() []byte { return t.buf }

// CheckFixed is CheckBytes for a fixed payload, returning its header as
// a value: the staging path checks small payloads by the hundred and
// keeps their headers in one array, not one allocation each.
func CheckFixed(p []byte, sum uint32, decoded uint64) (codec.Header, error) {
	h, err := parseFixed(p)
	if err != nil {
		return codec.Header{}, err
	}
	return h, checkFixed(&h, uint64(len(p)), sum, decoded)
}

// parseFixed parses a fixed payload's header and checks what it says of
// itself.
func parseFixed(head []byte) (codec.Header, error) {
	h, err := codec.ParseHeader(head)
	switch {
	case err != nil:
		return h, err
	case h.Values > h.Size:
		return h, fmt.Errorf("%w: %d values in a %d-byte payload", codec.ErrCorrupt, h.Values, h.Size)
	case h.InPlace && h.Values > 0 && h.Size > 2*h.Values:
		return h, fmt.Errorf("%w: an in-place payload of %d bytes is larger than its %d decoded bytes", codec.ErrCorrupt, h.Size, 2*h.Values)
	}
	return h, nil
}

// checkFixed is Check for a fixed payload's header (its tail is empty).
func checkFixed(h *codec.Header, size uint64, sum uint32, decoded uint64) error {
	var values uint64
	if decoded != 0 {
		if decoded%2 != 0 {
			return fmt.Errorf("%w: payload decodes to BF16 values, the tensor has %d bytes", codec.ErrSize, decoded)
		}
		values = decoded / 2
	}
	return codec.CheckPayload(h, size, sum, values)
}

// CheckFrom checks the payload of size bytes that r reads, a piece of
// len(buf) bytes at a time (buf at least HeadBytes long), without
// holding it whole: its head parsed (Parse, of the kind Sniff finds),
// its checksum and tail checked (Check) against decoded bytes (0: not
// checked), and its checksum against recorded, the one the cache's index
// records (codec.CheckRecorded). A version 1 entropy payload, which has
// no head Parse takes, is checked by its header's size and checksum (not
// against decoded). It returns the payload's kind.
func CheckFrom(r io.ReaderAt, size, decoded uint64, recorded uint32, buf []byte) (Kind, error) {
	if len(buf) < HeadBytes {
		return 0, fmt.Errorf("payload.CheckFrom: a buffer of %d bytes, short of HeadBytes", len(buf))
	}
	head := buf[:min(size, HeadBytes)]
	if err := readFullAt(r, head, 0); err != nil {
		return 0, err
	}
	k := Sniff(head)
	h, err := Parse(k, head)
	var v1 entropy.PayloadHeader // a version 1 entropy payload's header
	if errors.Is(err, entropy.ErrNoRecords) {
		v1, err = entropy.ParsePayloadHeader(head)
	}
	if err != nil {
		return k, err
	}
	var tail *Tail
	if h != nil {
		// The size first: a damaged head may claim any size, and its
		// tail is allocated from it.
		if h.Size() != size {
			return k, Check(h, size, 0, 0, nil)
		}
		tail = NewTail(h)
	}
	var sum uint32
	for off := uint64(0); off < size; off += uint64(len(buf)) {
		b := buf[:min(uint64(len(buf)), size-off)]
		if err := readFullAt(r, b, off); err != nil {
			return k, err
		}
		sum = codec.UpdatePieceChecksum(sum, b, off)
		if tail != nil {
			tail.Add(off, b)
		}
	}
	stored := v1.Checksum
	if h == nil {
		switch {
		case v1.Size != size:
			return k, fmt.Errorf("%w: %d bytes, header says %d", entropy.ErrPayload, size, v1.Size)
		case sum != v1.Checksum:
			return k, &codec.ChecksumError{Payload: "entropy payload", Computed: sum, Stored: v1.Checksum}
		}
	} else {
		if err := Check(h, size, sum, decoded, tail.Bytes()); err != nil {
			return k, err
		}
		stored = h.Checksum()
	}
	return k, codec.CheckRecorded(stored, recorded)
}

// readFullAt reads len(b) bytes of r at off; a file that ends before them
// is io.ErrUnexpectedEOF.
func readFullAt(r io.ReaderAt, b []byte, off uint64) error {
	n, err := r.ReadAt(b, int64(off))
	if n == len(b) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}
