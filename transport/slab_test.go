package transport

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/splitzip/splitzip/engine/hostengine"
)

// TestSlabHoldsWhatItIsTold: told the bytes to expect, the slab pins
// them and at most a small last block more; untold, it cuts 64 MiB blocks
// and fills what is left of one with later, shorter buffers.
func TestSlabHoldsWhatItIsTold(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	sizes := make([]uint64, 3000)
	var want uint64
	for i := range sizes {
		sizes[i] = 1 + uint64(rng.IntN(256<<10))
		if i%100 == 0 {
			sizes[i] = 5 << 20 // a few large ones
		}
		want += slabBytes(sizes[i])
	}
	eng := hostengine.New(1)
	defer eng.Close()
	s := newSlab(eng)
	s.expect(want)
	seen := map[*byte]bool{}
	for _, n := range sizes {
		b, err := s.alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if uint64(len(b)) != n || uintptrOf(b)%16 != 0 || seen[&b[0]] {
			t.Fatalf("buffer of %d bytes: len %d, reused or misaligned", n, len(b))
		}
		seen[&b[0]] = true
	}
	if got := s.pinnedBytes(); got > want+256<<10 {
		t.Errorf("told %d bytes, pinned %d", want, got)
	}
	s.free()
	if eng.PinnedBytes() != 0 {
		t.Errorf("%d pinned bytes after free", eng.PinnedBytes())
	}

	// Untold: 64 MiB blocks. Five 15 MiB buffers fill one block to 60 MiB
	// and start a second; three of 16 MiB leave 1 MiB of it; a 4 MiB
	// buffer then goes into the 4 MiB the first block had left.
	s = newSlab(eng)
	for _, n := range []uint64{15 << 20, 15 << 20, 15 << 20, 15 << 20, 15 << 20, 16 << 20, 16 << 20, 16 << 20} {
		if _, err := s.alloc(n); err != nil {
			t.Fatal(err)
		}
	}
	before := s.pinnedBytes()
	if _, err := s.alloc(4 << 20); err != nil {
		t.Fatal(err)
	}
	if before != 2*slabBlock || s.pinnedBytes() != before {
		t.Errorf("pinned %d then %d bytes, want two blocks and the rest of the first used", before, s.pinnedBytes())
	}
	s.free()
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }
