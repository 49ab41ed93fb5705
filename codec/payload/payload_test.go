package payload

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/internal/synth"
)

// payloads returns a fixed and an entropy payload of the same BF16
// values (an odd count: a partial last chunk), with the values.
func payloads(t *testing.T, seed uint64) (raw []byte, ps map[Kind][]byte) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	raw = synth.Normal(rng, 3*codec.ChunkValues+77, 0.02)
	fixed, _, err := codec.Encode(raw)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := entropy.FieldIndex("BF16", false)
	if err != nil {
		t.Fatal(err)
	}
	ent, err := entropy.Encode(fi, raw, 2)
	if err != nil {
		t.Fatal(err)
	}
	return raw, map[Kind][]byte{KindFixed: fixed, KindEntropy: ent}
}

// TestCheckAndDecode: both kinds check whole and decode to the values,
// and their heads say the same sizes.
func TestCheckAndDecode(t *testing.T) {
	raw, ps := payloads(t, 1)
	for k, p := range ps {
		h, err := CheckBytes(k, p, Sum(p), uint64(len(raw)))
		if err != nil {
			t.Fatalf("%v: %v", k, err)
		}
		if h.Kind() != k || h.Size() != uint64(len(p)) || h.DecodedSize() != uint64(len(raw)) || h.Checksum() != Sum(p) || h.Tail() > h.Size() {
			t.Errorf("%v: head kind %v, size %d, decoded %d, checksum %#x, tail %d", k, h.Kind(), h.Size(), h.DecodedSize(), h.Checksum(), h.Tail())
		}
		for _, workers := range []int{0, 1, 3} {
			dst := make([]byte, h.DecodedSize())
			if err := h.Decode(dst, p, workers); err != nil || !bytes.Equal(dst, raw) {
				t.Errorf("%v, %d workers: decode differs (%v)", k, workers, err)
			}
		}
		if k == KindFixed {
			sameAsCheckBytes(t, p, h, nil)
		}
		if e, ok := h.(*Entropy); ok && e.MaxRecord == 0 {
			t.Errorf("entropy: the chunk index was not checked (MaxRecord 0)")
		}
	}
}

// TestCheckRejects: a wrong size, checksum, tensor size, tail or kind
// is an error of its kind, for both codecs.
func TestCheckRejects(t *testing.T) {
	raw, ps := payloads(t, 2)
	n := uint64(len(raw))
	for k, p := range ps {
		h, err := Parse(k, p[:min(len(p), HeadBytes)])
		if err != nil {
			t.Fatalf("%v: %v", k, err)
		}
		size, sum := uint64(len(p)), Sum(p)
		tail := p[h.Tail():]
		for _, c := range []struct {
			name string
			err  error
		}{
			{"short", Check(h, size-1, sum, n, tail)},
			{"checksum", Check(h, size, sum^1, n, tail)},
			{"tensor", Check(h, size, sum, n+2, tail)},
			{"odd tensor", Check(h, size, sum, n+1, tail)},
		} {
			if c.err == nil {
				t.Errorf("%v, %s: accepted", k, c.name)
			}
		}
		if !errors.Is(Check(h, size, sum, n+2, tail), codec.ErrSize) {
			t.Errorf("%v: a tensor of another size is not codec.ErrSize", k)
		}
		if !errors.Is(Check(h, size, sum^1, n, tail), codec.ErrChecksum) {
			t.Errorf("%v: a wrong checksum is not codec.ErrChecksum", k)
		}
		if k == KindEntropy {
			bad := bytes.Clone(tail)
			bad[len(bad)-1] ^= 0x40 // the last record's end
			if Check(h, size, sum, n, bad) == nil {
				t.Error("entropy: a corrupt chunk index passed")
			}
			if Check(h, size, sum, n, tail[1:]) == nil {
				t.Error("entropy: a short tail passed")
			}
		}
	}
	if _, err := Parse(9, ps[KindFixed]); !errors.Is(err, ErrKind) {
		t.Errorf("unknown kind: %v", err)
	}
	if _, err := Parse(KindEntropy, ps[KindFixed]); err == nil {
		t.Error("a fixed payload parsed as an entropy one")
	}
}

// TestEveryByteMatters: flipping a bit of any byte of either payload
// (its checksum field included) makes the whole check fail.
func TestEveryByteMatters(t *testing.T) {
	_, ps := payloads(t, 3)
	for k, p := range ps {
		step := max(1, len(p)/4096)
		for i := 0; i < len(p); i += step {
			q := bytes.Clone(p)
			q[i] ^= 1 << (i % 8)
			h, err := CheckBytes(k, q, Sum(q), 0)
			if err == nil {
				t.Fatalf("%v: byte %d of %d flipped, payload accepted", k, i, len(p))
			}
			if k == KindFixed {
				sameAsCheckBytes(t, q, h, err)
			}
		}
	}
}

// sameAsCheckBytes fails t unless CheckFixed says of the fixed payload p
// what CheckBytes said (h, err): the same header, or the same error.
func sameAsCheckBytes(t *testing.T, p []byte, h Head, err error) {
	t.Helper()
	for _, decoded := range []uint64{0, 2 * uint64(len(p))} {
		if decoded != 0 {
			h, err = CheckBytes(KindFixed, p, Sum(p), decoded)
		}
		got, gerr := CheckFixed(p, Sum(p), decoded)
		switch {
		case (err == nil) != (gerr == nil) || err != nil && err.Error() != gerr.Error():
			t.Fatalf("decoded %d: CheckFixed says %v, CheckBytes %v", decoded, gerr, err)
		case err == nil && got != h.(*Fixed).Header:
			t.Fatalf("decoded %d: CheckFixed's header %+v, CheckBytes' %+v", decoded, got, h.(*Fixed).Header)
		}
	}
}

// FuzzCheckBytes: whatever the bytes, parsing and checking never panic,
// and a payload that passes decodes without error.
func FuzzCheckBytes(f *testing.F) {
	raw := synth.Normal(rand.New(rand.NewPCG(4, 1)), 700, 0.02)
	fixed, _, _ := codec.Encode(raw)
	fi, _ := entropy.FieldIndex("BF16", false)
	ent, _ := entropy.Encode(fi, raw, 1)
	f.Add(uint8(KindFixed), fixed)
	f.Add(uint8(KindEntropy), ent)
	f.Add(uint8(3), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, k uint8, p []byte) {
		h, err := CheckBytes(Kind(k), p, Sum(p), 0)
		if Kind(k) == KindFixed {
			sameAsCheckBytes(t, p, h, err)
		}
		if err != nil {
			return
		}
		if h.DecodedSize() > 64<<20 {
			return
		}
		dst := make([]byte, h.DecodedSize())
		if err := h.Decode(dst, p, 1); err != nil {
			t.Fatalf("kind %d: a payload that passed the check does not decode: %v", k, err)
		}
	})
}

// TestParseBounds: a fixed header claiming more values than bytes, or an
// in-place payload larger than its values, is corrupt before anyone
// allocates for it.
func TestParseBounds(t *testing.T) {
	_, ps := payloads(t, 5)
	p := ps[KindFixed]
	h, err := Parse(KindFixed, p)
	if err != nil || !h.InPlace() {
		t.Fatalf("%v, in place %v", err, h != nil && h.InPlace())
	}
	const offValues = 8 // codec's header: u64 values at byte 8
	for _, values := range []uint64{h.Size() + 1, h.Size()/2 - 1} {
		q := bytes.Clone(p)
		binary.LittleEndian.PutUint64(q[offValues:], values)
		if _, err := Parse(KindFixed, q); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("%d values in a %d-byte in-place payload: %v", values, h.Size(), err)
		}
	}
	if Sniff(ps[KindEntropy]) != KindEntropy || Sniff(p) != KindFixed || Sniff(nil) != KindFixed {
		t.Error("Sniff took one kind for another")
	}
}

// TestTail: a payload's tail gathered from pieces of any size, in any
// order, is its bytes from Tail() on, for both kinds.
func TestTail(t *testing.T) {
	_, ps := payloads(t, 6)
	for k, p := range ps {
		h, err := Parse(k, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, piece := range []int{1, 7, 4096, len(p)} {
			tail := NewTail(h)
			var offs []int
			for off := 0; off < len(p); off += piece {
				offs = append(offs, off)
			}
			rand.New(rand.NewPCG(uint64(piece), 2)).Shuffle(len(offs), func(i, j int) { offs[i], offs[j] = offs[j], offs[i] })
			for _, off := range offs {
				tail.Add(uint64(off), p[off:min(off+piece, len(p))])
			}
			if !bytes.Equal(tail.Bytes(), p[h.Tail():]) {
				t.Errorf("%v, pieces of %d bytes: the tail differs", k, piece)
			}
		}
		if err := Check(h, uint64(len(p)), Sum(p), 0, NewTail(h).Bytes()); k == KindEntropy && err == nil {
			t.Error("entropy: an index never gathered (zeros) passed")
		}
	}
}

// TestCheckFrom: both kinds check piece by piece as CheckBytes checks
// them whole, against the recorded checksum too; a flipped byte, a
// payload cut short, a wrong decoded size and a wrong recorded checksum
// fail; a head that claims more bytes than there are fails before
// anything is allocated from it.
func TestCheckFrom(t *testing.T) {
	raw, ps := payloads(t, 3)
	for k, p := range ps {
		buf := make([]byte, HeadBytes+100) // pieces that cut the payload anywhere
		sum := Sum(p)
		if got, err := CheckFrom(bytes.NewReader(p), uint64(len(p)), uint64(len(raw)), sum, buf); err != nil || got != k {
			t.Fatalf("%s: %s, %v", k, got, err)
		}
		if _, err := CheckFrom(bytes.NewReader(p), uint64(len(p)), 0, 0, buf); err != nil {
			t.Fatalf("%s, nothing recorded: %v", k, err)
		}
		bad := bytes.Clone(p)
		bad[len(bad)/2] ^= 4
		for name, c := range map[string]struct {
			p        []byte
			size     uint64
			decoded  uint64
			recorded uint32
		}{
			"flipped":          {bad, uint64(len(p)), 0, 0},
			"cut short":        {p[:len(p)-1], uint64(len(p) - 1), 0, 0},
			"decoded size":     {p, uint64(len(p)), uint64(len(raw)) + 2, 0},
			"recorded":         {p, uint64(len(p)), 0, sum + 1},
			"reader ends":      {p[:len(p)-9], uint64(len(p)), 0, 0},
			"head claims more": {p, uint64(len(p)) - 16, 0, 0},
		} {
			if _, err := CheckFrom(bytes.NewReader(c.p), c.size, c.decoded, c.recorded, buf); err == nil {
				t.Errorf("%s, %s: passes", k, name)
			}
		}
	}
	huge := bytes.Clone(ps[KindEntropy])
	binary.LittleEndian.PutUint64(huge[48:], 1<<46) // the head's size field
	if _, err := CheckFrom(bytes.NewReader(huge), uint64(len(huge)), 0, 0, make([]byte, HeadBytes)); err == nil {
		t.Error("an entropy head claiming 64 TiB passes")
	}
}
