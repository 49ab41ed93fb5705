package entropy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/internal/synth"
)

// TestChecksumErrorNamesEntropy: every way of reading an entropy payload
// whose stored checksum is wrong fails with an error that matches
// codec.ErrChecksum, names the entropy codec with both checksums, and
// does not name the fixed codec's SplitZip payloads.
func TestChecksumErrorNamesEntropy(t *testing.T) {
	raw := synth.Normal(rand.New(rand.NewPCG(31, 7)), 3*codec.ChunkValues+11, 0.02)
	p, err := Encode(0, raw, 0)
	if err != nil {
		t.Fatal(err)
	}
	q := bytes.Clone(p)
	stored := binary.LittleEndian.Uint32(q[offCRC:]) ^ 0x5a5a
	binary.LittleEndian.PutUint32(q[offCRC:], stored)
	part, err := Part(p, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	part = bytes.Clone(part)
	partStored := binary.LittleEndian.Uint32(part[48:]) ^ 1
	binary.LittleEndian.PutUint32(part[48:], partStored)
	for _, tc := range []struct {
		name   string
		what   string // the ChecksumError's Payload
		stored uint32
		run    func() error
	}{
		{"Decode", "entropy payload", stored, func() error { return Decode(make([]byte, len(raw)), q, 2) }},
		{"Check", "entropy payload", stored, func() error { _, err := Check(q); return err }},
		{"DecodeStream", "entropy payload", stored, func() error {
			return DecodeStream(bytes.NewReader(q), uint64(len(q)), func(uint64, []byte) error { return nil })
		}},
		{"Reader.Check", "entropy payload", stored, func() error {
			d, err := NewReader(bytes.NewReader(q), uint64(len(q)))
			if err != nil {
				return err
			}
			h := d.Header()
			n := h.Chunks()
			crc, k, err := d.DecodeChunks(0, n, make([]byte, len(raw)))
			if err != nil {
				return err
			}
			return d.Check([]uint32{crc}, []uint64{k})
		}},
		{"DecodeInPlace", "entropy payload", stored, func() error {
			if len(q) > len(raw) {
				t.Skip("payload larger than its values")
			}
			buf := make([]byte, len(raw))
			copy(buf, q)
			return DecodeInPlace(buf, uint64(len(q)))
		}},
		{"DecodePart", "entropy part", partStored, func() error {
			_, err := DecodePart(make([]byte, codec.ChunkValues*2), part)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run()
			var ce *codec.ChecksumError
			if !errors.Is(err, codec.ErrChecksum) || !errors.As(err, &ce) {
				t.Fatalf("got %v, want a checksum mismatch", err)
			}
			msg := err.Error()
			if ce.Payload != tc.what || ce.Stored != tc.stored || !strings.HasPrefix(msg, tc.what+" checksum mismatch: computed ") || strings.Contains(msg, "SplitZip") {
				t.Errorf("message %q, stored %08x: want it to name the %s and its stored checksum %08x", msg, ce.Stored, tc.what, tc.stored)
			}
		})
	}
}
