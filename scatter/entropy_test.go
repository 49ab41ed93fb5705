package scatter

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/internal/synth"
)

// entropyPayload returns a checked entropy payload of n BF16 values.
func entropyPayload(t *testing.T, n int) ([]byte, *entropy.Head) {
	t.Helper()
	p, err := entropy.Encode(0, synth.Normal(rand.New(rand.NewPCG(1, uint64(n))), n, 0.02), 0)
	if err != nil {
		t.Fatal(err)
	}
	h, err := entropy.Check(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, h
}

// The layout of twoDescriptors' buffer: its table ends at tableEnd, its
// one payload starts at src.
const tableEnd, src = 64, 80

// twoDescriptors writes a payload of n values at src of a buffer and, after
// it, two descriptors of it (tensors a and b), returning the buffer, the
// descriptors' offset, the payloads and the payload's head.
func twoDescriptors(t *testing.T, n int) ([]byte, uint64, []Entropy, *entropy.Head) {
	t.Helper()
	p, h := entropyPayload(t, n)
	at := uint64(src+len(p)+15) &^ 15
	buf := make([]byte, at+EntropyBytes(2))
	copy(buf[src:], p)
	ents := []Entropy{{Name: "a", Dst: 1 << 20, Src: src, Size: h.ValueBytes(), Head: h}, {Name: "b", Dst: 2 << 20, Src: src, Size: h.ValueBytes(), Head: h}}
	if err := PutEntropy(buf, at, tableEnd, ents); err != nil {
		t.Fatal(err)
	}
	return buf, at, ents, h
}

// TestPutEntropy: descriptors hold what the kernel reads, at the offsets
// the format gives, with the chunk index copied; invalid payloads are
// refused with nothing written.
func TestPutEntropy(t *testing.T) {
	buf, at, ents, h := twoDescriptors(t, 3*16384+5)
	le := binary.LittleEndian
	pairs := uint64(0)
	if h.Pairs {
		pairs = 1
	}
	for i, e := range ents {
		d := buf[at+uint64(i)*EntropyEntryBytes:]
		for _, f := range []struct {
			name      string
			got, want uint64
		}{
			{"dst", le.Uint64(d[0:]), e.Dst}, {"src", le.Uint64(d[8:]), src}, {"values", le.Uint64(d[16:]), h.Values},
			{"chunks", le.Uint64(d[24:]), 4}, {"records", le.Uint64(d[32:]), h.Others}, {"record bytes", le.Uint64(d[40:]), h.Index - h.Others},
			{"field", uint64(le.Uint32(d[48:])), 0}, {"pairs", uint64(le.Uint32(d[52:])), pairs}, {"longest symbols", uint64(le.Uint32(d[56:])), h.MaxSymbols},
			{"first unit", uint64(le.Uint32(d[60:])), uint64(i)}, // a unit each: 4 chunks
		} {
			if f.got != f.want {
				t.Errorf("%s: %s %d, want %d", e.Name, f.name, f.got, f.want)
			}
		}
		for s := range 256 {
			if d[64+s] != h.Lengths[s] || le.Uint16(d[320+2*s:]) != h.PairFields[s]*uint16(pairs) {
				t.Fatalf("%s: symbol %d's length or pair", e.Name, s)
			}
		}
	}

	unchecked := *h
	unchecked.MaxRecord = 0
	v1 := *h
	v1.Version = 1
	field := *h
	field.Field = len(entropy.Fields)
	index := *h
	index.Index--
	n := h.ValueBytes()
	ok := func(src uint64, hh *entropy.Head) Entropy {
		return Entropy{Name: "a", Dst: 1 << 20, Src: src, Size: n, Head: hh}
	}
	for _, c := range []struct {
		name     string
		at, tEnd uint64
		e        Entropy
	}{
		{"descriptors unaligned", at + 8, tableEnd, ents[0]},
		{"no room for the descriptors", at + 16, tableEnd, ents[0]},
		{"descriptors past the buffer", at + 1<<20, tableEnd, ents[0]},
		{"descriptors inside the table", 32, tableEnd, ok(0, h)},
		{"payload unaligned", at + 16, tableEnd, ok(src+8, h)},
		{"payload over the descriptors", at, tableEnd, ok(at-16, h)},
		{"payload in the table", at, src + 16, ents[0]},
		{"no head", at, tableEnd, ok(src, nil)},
		{"index unchecked", at, tableEnd, ok(src, &unchecked)},
		{"version 1", at, tableEnd, ok(src, &v1)},
		{"no such field", at, tableEnd, ok(src, &field)},
		{"index not where the records end", at, tableEnd, ok(src, &index)},
		{"values not the tensor's", at, tableEnd, Entropy{Name: "a", Dst: 1 << 20, Src: src, Size: n - 2, Head: h}},
		{"destination unaligned", at, tableEnd, Entropy{Name: "a", Dst: 1<<20 + 4, Src: src, Size: n, Head: h}},
		{"null destination", at, tableEnd, Entropy{Name: "a", Src: src, Size: n, Head: h}},
	} {
		// Room for the descriptors at at + 16 too, so that each case
		// fails for its own reason.
		b := make([]byte, at+16+EntropyBytes(2))
		copy(b, buf[:at])
		if c.name == "no room for the descriptors" {
			b = b[:at+EntropyBytes(2)]
		}
		if err := PutEntropy(b, c.at, c.tEnd, []Entropy{ents[1], c.e}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, err)
		}
		for _, x := range b[at:] {
			if x != 0 {
				t.Fatalf("%s: a descriptor was written though a payload is invalid", c.name)
			}
		}
	}
}

// TestEntropyUnits: a payload's units of work are its chunks in runs of
// EntropyUnitChunks, numbered across the payloads in order.
func TestEntropyUnits(t *testing.T) {
	var ents []Entropy
	var ps [][]byte
	at := uint64(64)
	for _, chunks := range []int{1, 8, 9, 17, 16} {
		p, h := entropyPayload(t, (chunks-1)*16384+77)
		if h.Chunks() != uint64(chunks) {
			t.Fatalf("%d chunks, want %d", h.Chunks(), chunks)
		}
		ents = append(ents, Entropy{Name: "p", Dst: 1 << 30, Src: at, Size: h.ValueBytes(), Head: h})
		ps = append(ps, p)
		at = (at + uint64(len(p)) + 15) &^ 15
	}
	buf := make([]byte, at+EntropyBytes(len(ents)))
	for i, p := range ps {
		copy(buf[ents[i].Src:], p)
	}
	if err := PutEntropy(buf, at, 64, ents); err != nil {
		t.Fatal(err)
	}
	want := []uint32{0, 1, 2, 4, 7}
	for i, w := range want {
		if got := binary.LittleEndian.Uint32(buf[at+uint64(i)*EntropyEntryBytes+60:]); got != w {
			t.Errorf("payload %d: first unit %d, want %d", i, got, w)
		}
	}
	if u := EntropyUnits(ents); u != 9 {
		t.Errorf("%d units, want 9", u)
	}
}

// TestReadEntropy: descriptors PutEntropy wrote read back as written;
// changed ones that the batch kernel would decode nothing of are refused
// (the kernel's checks, in Go).
func TestReadEntropy(t *testing.T) {
	buf, at, ents, h := twoDescriptors(t, 20*16384+3) // 21 chunks: 3 units
	units := EntropyUnits(ents)
	ds, err := ReadEntropy(buf, at, 2, units)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range ds {
		if d.Dst != ents[i].Dst || d.Src != src || d.Values != h.Values || d.Chunks != 21 || d.FirstUnit != uint32(3*i) ||
			d.End() != src+h.Size || d.Lengths != h.Lengths || d.Pairs != h.Pairs {
			t.Errorf("descriptor %d: %+v", i, d)
		}
	}
	le := binary.LittleEndian
	for _, c := range []struct {
		what  string
		apply func(b []byte)
		units uint64
	}{
		{"payload moved to the descriptors", func(b []byte) { le.PutUint64(b[at+8:], at) }, units},
		{"payload not 16-byte aligned", func(b []byte) { le.PutUint64(b[at+8:], src+8) }, units},
		{"records past the descriptors", func(b []byte) { le.PutUint64(b[at+32:], at) }, units},
		{"chunks short of the values", func(b []byte) { le.PutUint64(b[at+24:], 20) }, units},
		{"unknown field", func(b []byte) { le.PutUint32(b[at+48:], 7) }, units},
		{"second payload's first unit moved", func(b []byte) { le.PutUint32(b[at+EntropyEntryBytes+60:], 4) }, units},
		{"the batch's units short", func(b []byte) {}, units - 1},
	} {
		bad := append([]byte(nil), buf...)
		c.apply(bad)
		if _, err := ReadEntropy(bad, at, 2, c.units); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", c.what, err)
		}
	}
	if _, err := ReadEntropy(buf, at, 3, units); !errors.Is(err, ErrInvalid) {
		t.Errorf("a third descriptor past the buffer: %v", err)
	}
}
