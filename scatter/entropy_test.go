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

// TestPutEntropy: descriptors hold what the kernel reads, at the offsets
// the format gives, with the chunk index copied; invalid payloads are
// refused with nothing written.
func TestPutEntropy(t *testing.T) {
	p, h := entropyPayload(t, 3*16384+5)
	const tableEnd, src = 64, 80
	at := uint64(src+len(p)+15) &^ 15
	buf := make([]byte, at+EntropyBytes(2))
	copy(buf[src:], p)
	ents := []Entropy{{Name: "a", Dst: 1 << 20, Src: src, Head: h}, {Name: "b", Dst: 2 << 20, Src: src, Head: h}}
	if err := PutEntropy(buf, at, tableEnd, ents); err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	for i, e := range ents {
		d := buf[at+uint64(i)*EntropyEntryBytes:]
		for _, f := range []struct {
			name      string
			got, want uint64
		}{
			{"dst", le.Uint64(d[0:]), e.Dst}, {"src", le.Uint64(d[8:]), src}, {"values", le.Uint64(d[16:]), h.Values},
			{"chunks", le.Uint64(d[24:]), 4}, {"records", le.Uint64(d[32:]), h.Others}, {"record bytes", le.Uint64(d[40:]), h.Index - h.Others},
			{"field", uint64(le.Uint32(d[48:])), 0}, {"pairs", uint64(le.Uint32(d[52:])), uint64(btoi(h.Pairs))}, {"longest symbols", uint64(le.Uint32(d[56:])), h.MaxSymbols},
		} {
			if f.got != f.want {
				t.Errorf("%s: %s %d, want %d", e.Name, f.name, f.got, f.want)
			}
		}
		for s := range 256 {
			if d[64+s] != h.Lengths[s] || le.Uint16(d[320+2*s:]) != h.PairFields[s]*uint16(btoi(h.Pairs)) {
				t.Fatalf("%s: symbol %d's length or pair", e.Name, s)
			}
		}
		for c := range 5 {
			if got, want := le.Uint64(d[entropyIndexAt+8*c:]), le.Uint64(p[h.Index+uint64(8*c):]); got != want {
				t.Errorf("%s: index entry %d %d, want %d", e.Name, c, got, want)
			}
		}
	}

	unchecked := *h
	unchecked.MaxRecord = 0
	v1 := *h
	v1.Version = 1
	many := *h
	many.Values = (EntropyMaxChunks + 1) * 16384
	for _, c := range []struct {
		name     string
		at, tEnd uint64
		e        Entropy
	}{
		{"descriptors unaligned", at + 8, tableEnd, ents[0]},
		{"no room for the descriptors", at + 16, tableEnd, ents[0]},
		{"descriptors inside the table", 32, tableEnd, Entropy{Name: "a", Dst: 1 << 20, Src: 0, Head: h}},
		{"payload unaligned", at, tableEnd, Entropy{Name: "a", Dst: 1 << 20, Src: src + 8, Head: h}},
		{"payload over the descriptors", at, tableEnd, Entropy{Name: "a", Dst: 1 << 20, Src: at - 16, Head: h}},
		{"payload in the table", at, src + 16, ents[0]},
		{"no head", at, tableEnd, Entropy{Name: "a", Dst: 1 << 20, Src: src}},
		{"index unchecked", at, tableEnd, Entropy{Name: "a", Dst: 1 << 20, Src: src, Head: &unchecked}},
		{"version 1", at, tableEnd, Entropy{Name: "a", Dst: 1 << 20, Src: src, Head: &v1}},
		{"too many chunks", at, tableEnd, Entropy{Name: "a", Dst: 1 << 20, Src: src, Head: &many}},
		{"destination unaligned", at, tableEnd, Entropy{Name: "a", Dst: 1<<20 + 4, Src: src, Head: h}},
		{"null destination", at, tableEnd, Entropy{Name: "a", Src: src, Head: h}},
	} {
		b := make([]byte, len(buf))
		copy(b, buf[:at])
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

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
