package payload

import (
	"errors"
	"fmt"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
)

// Kind names a payload's codec.
type Kind uint8

// Payload kinds.
const (
	KindFixed   Kind = iota + 1 // package codec
	KindEntropy                 // package codec/entropy
)

// String names the kind as the cache's index does.
func (k Kind) String() string {
	switch k {
	case KindFixed:
		return "fixed"
	case KindEntropy:
		return "entropy"
	}
	return fmt.Sprintf("kind %d", uint8(k))
}

// ErrKind reports a payload kind this build does not know.
var ErrKind = errors.New("unknown payload kind")

// HeadBytes bounds the bytes of a payload's start that Parse reads: a
// reader that has the first min(size, HeadBytes) bytes has its head.
const HeadBytes = max(codec.HeaderSize, entropy.MaxHead)

// Head is a payload's parsed header, checked against itself (Parse) and,
// after Check, against the payload's bytes.
type Head interface {
	// Kind is the payload's codec.
	Kind() Kind
	// Size is the payload's bytes.
	Size() uint64
	// DecodedSize is the bytes of the values it decodes to.
	DecodedSize() uint64
	// Checksum is the CRC-32C its header records (codec.Checksum of the
	// payload, as codec.PieceSums folds it from pieces).
	Checksum() uint32
	// InPlace reports a payload that decodes where it lies: a device
	// decodes it in the range it was copied into, which holds
	// DecodedSize bytes.
	InPlace() bool
	// Tail is the offset of the payload's last bytes that Check needs
	// besides the checksum (the entropy payload's chunk index); Size when
	// it needs none.
	Tail() uint64
	// Decode decodes the whole payload p (the one this head is of) into
	// dst, DecodedSize bytes, on the host with up to workers goroutines
	// (0: one per core), checking every chunk it decodes.
	Decode(dst, p []byte, workers int) error

	checkTail(tail []byte) error
}

// Fixed is the head of a fixed-codec payload.
type Fixed struct{ codec.Header }

// Entropy is the head of a version 2 or 3 entropy payload (version 1
// payloads have no chunk records: Parse returns entropy.ErrNoRecords for
// them, and they decode on the host only, through package codec/entropy).
type Entropy struct{ *entropy.Head }

// Clone returns a copy of h that shares nothing with it (nil for nil):
// what an engine keeps of a submission whose caller may reuse its head.
func Clone(h Head) Head {
	switch h := h.(type) {
	case *Fixed:
		if h == nil {
			return nil
		}
		c := *h
		return &c
	case *Entropy:
		if h == nil || h.Head == nil {
			return nil
		}
		e := *h.Head
		return &Entropy{&e}
	}
	return h
}

var (
	_ Head = (*Fixed)(nil)
	_ Head = (*Entropy)(nil)
)

// Kind is KindFixed.
func (*Fixed) Kind() Kind { return KindFixed }

// Size is the payload's bytes.
func (h *Fixed) Size() uint64 { return h.Header.Size }

// DecodedSize is two bytes a value.
func (h *Fixed) DecodedSize() uint64 { return 2 * h.Values }

// Checksum is the header's.
func (h *Fixed) Checksum() uint32 { return h.Header.Checksum }

// InPlace is the header's flag.
func (h *Fixed) InPlace() bool { return h.Header.InPlace }

// Tail is Size: the checksum covers what a fixed payload's check needs.
func (h *Fixed) Tail() uint64 { return h.Header.Size }

// Decode decodes p on the host (codec.Decode).
func (h *Fixed) Decode(dst, p []byte, workers int) error {
	if workers > 0 {
		return codec.Decode(dst, p, codec.WithWorkers(workers))
	}
	return codec.Decode(dst, p)
}

func (*Fixed) checkTail([]byte) error { return nil }

// Kind is KindEntropy.
func (*Entropy) Kind() Kind { return KindEntropy }

// Size is the payload's bytes.
func (h *Entropy) Size() uint64 { return h.Head.Size }

// DecodedSize is the bytes of its field's values.
func (h *Entropy) DecodedSize() uint64 { return h.ValueBytes() }

// Checksum is the header's.
func (h *Entropy) Checksum() uint32 { return h.Head.Checksum }

// InPlace is the header's flag.
func (h *Entropy) InPlace() bool { return h.Head.InPlace }

// Tail is where the chunk index starts.
func (h *Entropy) Tail() uint64 { return h.Index }

// Decode decodes p on the host (entropy.Decode).
func (h *Entropy) Decode(dst, p []byte, workers int) error { return entropy.Decode(dst, p, workers) }

// checkTail checks the chunk index and sets MaxRecord and MaxSymbols.
func (h *Entropy) checkTail(tail []byte) error { return h.CheckIndex(tail) }
