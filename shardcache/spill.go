package shardcache

// The spill: where objects bound for packs wait for Writer.Commit.

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/splitzip/splitzip/atomicfile"
)

// spill holds the pending objects written in memory, from their Commit
// to the writer's, which copies them into packs: one write and one read
// an object, where a temporary file of its own costs a creation, a close,
// an open and a removal. Its bytes go into files in tmp/ of at most
// spillBytes each (unless one object is larger), so that no pending file
// outgrows a pack (a limit on file sizes, RLIMIT_FSIZE or a filesystem's,
// that packs meet is met by them too), and each file goes once its
// objects are all packed. Guarded by the writer's lock.
type spill struct {
	files []spillFile
	w     *os.File // the last of files, being appended to; nil once full or gone
	size  int64    // its bytes
	r     *os.File // the file read last, files[rseg]
	rseg  int
}

// spillFile is one file of a spill: its name ("" once removed) and how
// many of its objects are not packed yet.
type spillFile struct {
	name string
	left int
}

// spillBytes is the most bytes of a spill file: a pack's.
const spillBytes = packTarget

// put appends b to the spill, in a new file in dir's tmp/ where the last
// is full or there is none, and returns where it lies. A new file whose
// first write fails is removed again.
func (s *spill) put(dir string, b []byte) (seg int, off int64, err error) {
	if s.w != nil && s.size > 0 && s.size+int64(len(b)) > spillBytes {
		s.w.Close()
		s.w = nil
	}
	if s.w == nil {
		f, err := atomicfile.CreateTemp(filepath.Join(dir, "tmp"), "pending")
		if err != nil {
			return 0, 0, err
		}
		s.files = append(s.files, spillFile{name: f.Name()})
		s.w, s.size = f, 0
	}
	seg = len(s.files) - 1
	if _, err := s.w.WriteAt(b, s.size); err != nil {
		if s.files[seg].left == 0 {
			s.w.Close()
			os.Remove(s.files[seg].name)
			s.files[seg].name, s.w = "", nil
		}
		return 0, 0, err
	}
	off = s.size
	s.size += int64(len(b))
	s.files[seg].left++
	return seg, off, nil
}

// read reads len(b) bytes at off of spill file seg, the pending object
// k's.
func (s *spill) read(k Key, b []byte, seg int, off int64) error {
	if seg < 0 || seg >= len(s.files) || s.files[seg].name == "" {
		return fmt.Errorf("shardcache: pending object %s: its spill file %d is gone", k, seg)
	}
	if s.r == nil || s.rseg != seg {
		if s.r != nil {
			s.r.Close()
			s.r = nil
		}
		f, err := os.Open(s.files[seg].name)
		if err != nil {
			return fmt.Errorf("shardcache: pending object %s: %w", k, err)
		}
		s.r, s.rseg = f, seg
	}
	if _, err := s.r.ReadAt(b, off); err != nil {
		return fmt.Errorf("shardcache: pending object %s: %w", k, err)
	}
	return nil
}

// packed counts one object of spill file seg as packed, and removes the
// file once none of its objects is left.
func (s *spill) packed(seg int) {
	f := &s.files[seg]
	if f.left--; f.left > 0 || f.name == "" {
		return
	}
	if s.r != nil && s.rseg == seg {
		s.r.Close()
		s.r = nil
	}
	if s.w != nil && seg == len(s.files)-1 {
		s.w.Close()
		s.w = nil
	}
	os.Remove(f.name)
	f.name = ""
}

// drop closes and removes the spill's files: nothing pending is in them.
func (s *spill) drop() {
	for _, f := range []*os.File{s.w, s.r} {
		if f != nil {
			f.Close()
		}
	}
	for _, f := range s.files {
		if f.name != "" {
			os.Remove(f.name)
		}
	}
	*s = spill{}
}

// addPending records a pending object (w.mu held).
func (w *Writer) addPending(key Key, p pendingObject) {
	w.pending[key] = p
	w.pendingOrder = append(w.pendingOrder, key)
}
