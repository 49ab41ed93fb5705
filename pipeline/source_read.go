package pipeline

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/splitzip/splitzip/checkpoint"
	"github.com/splitzip/splitzip/shardcache"
)

// source is a shard file being compressed. Its tensors are read with
// positioned reads into buffers a job owns, not through a memory map: a
// file that another process truncates while it is read then makes a read
// come up short, an error, where a mapped page would fault in whichever
// goroutine touched it (the hasher starts its own for large inputs) and
// kill the process.
type source struct {
	f    *os.File
	size uint64
}

// openSource checks that the opened shard file f is still the one whose
// header s holds (same size and modification time) and returns it as a
// source.
func openSource(f *os.File, s *checkpoint.Shard) (*source, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err // names the file
	}
	if uint64(st.Size()) != s.Size || !st.ModTime().Equal(s.ModTime) {
		return nil, fmt.Errorf("%s: %w: now %d bytes, modified %s; %d bytes, modified %s, when its header was read",
			s.Path, shardcache.ErrSourceChanged, st.Size(), stamp(st.ModTime()), s.Size, stamp(s.ModTime))
	}
	return &source{f: f, size: s.Size}, nil
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000000Z") }

// segmentPool holds the segment buffers of jobs between tensors; the
// budget's compressCost counts the one a job holds.
var segmentPool = sync.Pool{New: func() any { b := make([]byte, segmentBytes); return &b }}

// reader returns a reader of one tensor for one job; close gives its
// buffer back.
func (s *source) reader() *sourceReader {
	return &sourceReader{src: s, buf: segmentPool.Get().(*[]byte)}
}

// sourceReader reads bytes of a source a segment at a time into its own
// buffer. A range that fits in one segment is read once and served from
// the buffer to every later pass over it.
type sourceReader struct {
	src       *source
	buf       *[]byte
	held      bool // buf holds [heldBegin, heldEnd)
	heldBegin uint64
	heldEnd   uint64
}

// close gives the reader's buffer back to the pool.
func (r *sourceReader) close() {
	if r.buf != nil {
		segmentPool.Put(r.buf)
		r.buf, r.held = nil, false
	}
}

// segments calls fn for successive pieces of at most segmentBytes of
// bytes [begin, end) of the source. fn must not keep or modify a piece.
// A reader keeps a range that fits in one segment for the next pass over
// it, and reads a larger one again on every pass.
func (r *sourceReader) segments(begin, end uint64, fn func(seg []byte) error) error {
	buf := *r.buf
	if r.held && begin == r.heldBegin && end == r.heldEnd {
		return fn(buf[:end-begin])
	}
	r.held = false
	for pos := begin; pos < end; {
		n := min(end-pos, segmentBytes)
		if err := r.src.readAt(buf[:n], pos, end); err != nil {
			return err
		}
		if pos == begin && n == end-begin {
			r.held, r.heldBegin, r.heldEnd = true, begin, end
		}
		if err := fn(buf[:n]); err != nil {
			return err
		}
		pos += n
	}
	return nil
}

// readAt fills b with the bytes of the source at off, part of a range
// that runs to end. A file that ends too soon has changed since its
// header was read: that is ErrSourceChanged, never a short piece.
func (s *source) readAt(b []byte, off, end uint64) error {
	n, err := s.f.ReadAt(b, int64(off))
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		now := fmt.Sprintf("ends before byte %d", off+uint64(n)+1)
		if st, err := s.f.Stat(); err == nil {
			now = fmt.Sprintf("is now %d bytes", st.Size())
		}
		return fmt.Errorf("%w: the file %s, but the tensor runs to byte %d (it was %d bytes when its header was read; was it rewritten while being read?)",
			shardcache.ErrSourceChanged, now, end, s.size)
	}
	return fmt.Errorf("reading bytes %d to %d: %w", off, off+uint64(len(b)), err)
}
