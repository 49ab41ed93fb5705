package transport

import (
	"sync"

	"github.com/splitzip/splitzip/engine"
)

// slabBlock is the size of one pinned block of a slab.
const slabBlock = 64 << 20

// slab hands out pinned memory for resident buffers. Buffers of up to a
// quarter block are cut from shared 64 MiB blocks, so that thousands of
// small tensors cost a few registrations rather than one each (pinning
// costs about a tenth of a millisecond per call); larger ones get their
// own allocation. Memory is returned all at once by free, except that a
// buffer with its own allocation can be released early.
//
// Told how many bytes of shared-block buffers to expect (expect), the slab
// sizes its blocks (up to 1 GiB each) so that they hold those and no more;
// the rest of a block too short for the next buffer is kept for later,
// shorter ones. A resident load then pins its payload bytes plus 16-byte
// alignment, and at most one buffer more per GiB.
type slab struct {
	eng engine.Engine

	mu     sync.Mutex
	blocks [][]byte
	own    map[*byte]bool // buffers with their own allocation
	cur    []byte         // what is left of the newest shared block
	holes  [][]byte       // what was left of earlier blocks
	bytes  uint64
	want   uint64 // shared-block bytes still expected; 0: unknown
}

// maxHintedBlock is the largest block a slab that was told what to expect
// pins at once.
const maxHintedBlock = 1 << 30

// minHole is the shortest remainder of a block kept for later buffers.
const minHole = 4 << 10

// expect tells the slab how many bytes the buffers it will cut from shared
// blocks take, each rounded up to 16 (see slabBytes).
func (s *slab) expect(n uint64) {
	s.mu.Lock()
	s.want = n
	s.mu.Unlock()
}

// slabBytes is what a buffer of n bytes takes of shared blocks: n rounded
// up to 16, or 0 for a buffer with its own allocation.
func slabBytes(n uint64) uint64 {
	if n == 0 || n > slabBlock/4 {
		return 0
	}
	return align16(n)
}

func newSlab(eng engine.Engine) *slab { return &slab{eng: eng, own: map[*byte]bool{}} }

// alloc returns n bytes of pinned memory (len n, 16-byte aligned start).
func (s *slab) alloc(n uint64) ([]byte, error) {
	if n > slabBlock/4 {
		return s.alone(n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a := align16(n)
	rem := s.want // expected bytes, this buffer's included
	s.want -= min(s.want, a)
	if uint64(len(s.cur)) < n {
		for i, h := range s.holes {
			if uint64(len(h)) >= n {
				s.holes[i] = h[min(a, uint64(len(h))):]
				if len(s.holes[i]) < minHole {
					s.holes = append(s.holes[:i], s.holes[i+1:]...)
				}
				return h[:n:n], nil
			}
		}
		size := uint64(slabBlock)
		if rem > 0 {
			// What is still expected, in blocks of up to 1 GiB (a
			// block's unused end is at most one buffer), and of at
			// least 256 KiB, so a hint too small does not cost a
			// registration per buffer.
			size = min(maxHintedBlock, max(rem, a, 256<<10))
		}
		b, err := s.eng.Pinned(size)
		if err != nil {
			return nil, err
		}
		if uint64(len(s.cur)) >= minHole {
			s.holes = append(s.holes, s.cur)
		}
		s.blocks = append(s.blocks, b)
		s.bytes += size
		s.cur = b
	}
	out := s.cur[:n:n]
	s.cur = s.cur[min(a, uint64(len(s.cur))):]
	return out, nil
}

// alone returns n bytes of pinned memory in an allocation of their own
// (n > 0), freed with the slab or by release.
func (s *slab) alone(n uint64) ([]byte, error) {
	b, err := s.eng.Pinned(n)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.blocks = append(s.blocks, b)
	s.own[&b[:1][0]] = true
	s.bytes += n
	return b[:n:n], nil
}

// release frees a buffer that has its own allocation; for one cut from a
// shared block it does nothing (the block is freed with the slab).
func (s *slab) release(b []byte) {
	if cap(b) == 0 {
		return
	}
	p := &b[:1][0]
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.own[p] {
		return
	}
	delete(s.own, p)
	for i, blk := range s.blocks {
		if &blk[:1][0] == p {
			s.blocks = append(s.blocks[:i], s.blocks[i+1:]...)
			s.bytes -= uint64(len(blk))
			s.eng.FreePinned(blk)
			return
		}
	}
}

// pinnedBytes returns the pinned memory the slab holds.
func (s *slab) pinnedBytes() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// free returns every block.
func (s *slab) free() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.blocks {
		s.eng.FreePinned(b)
	}
	s.blocks, s.cur, s.holes, s.bytes, s.want = nil, nil, nil, 0, 0
	clear(s.own)
}
