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
type slab struct {
	eng engine.Engine

	mu     sync.Mutex
	blocks [][]byte
	own    map[*byte]bool // buffers with their own allocation
	cur    []byte         // what is left of the newest shared block
	bytes  uint64
}

func newSlab(eng engine.Engine) *slab { return &slab{eng: eng, own: map[*byte]bool{}} }

// alloc returns n bytes of pinned memory (len n, 16-byte aligned start).
func (s *slab) alloc(n uint64) ([]byte, error) {
	if n > slabBlock/4 {
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if uint64(len(s.cur)) < n {
		b, err := s.eng.Pinned(slabBlock)
		if err != nil {
			return nil, err
		}
		s.blocks = append(s.blocks, b)
		s.bytes += slabBlock
		s.cur = b
	}
	out := s.cur[:n:n]
	s.cur = s.cur[min(align16(n), uint64(len(s.cur))):]
	return out, nil
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
	s.blocks, s.cur, s.bytes = nil, nil, 0
	clear(s.own)
}
