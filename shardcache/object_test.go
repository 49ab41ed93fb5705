package shardcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/splitzip/splitzip/internal/fsizelimit"
)

// tmpFiles lists the files in the cache's tmp/.
func tmpFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "tmp"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestObjectInMemory: an object small enough for a pack is written in
// memory, whatever the mix of Write, WriteAt, Seek and Truncate, and
// reads back as written; one that grows past the memory limit (in any of
// those ways) moves into a temporary file with the bytes so far; either
// way the committed object holds exactly the bytes written, packed or in
// a file of its own, and exactly those an object in a file from the start
// holds after the same calls (empty writes past the end extend neither).
func TestObjectInMemory(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	const limit = 64 << 10
	// A step makes its call and the same change to want.
	type step func(o *ObjectFile, want *[]byte) error
	put := func(want *[]byte, off int, b []byte) {
		if len(b) == 0 {
			return
		}
		if end := off + len(b); end > len(*want) {
			*want = append(*want, make([]byte, end-len(*want))...)
		}
		copy((*want)[off:], b)
	}
	writeAt := func(off int, n int) step {
		return func(o *ObjectFile, want *[]byte) error {
			b := random(n)
			put(want, off, b)
			_, err := o.WriteAt(b, int64(off))
			return err
		}
	}
	write := func(n int) step {
		return func(o *ObjectFile, want *[]byte) error {
			pos, err := o.Seek(0, io.SeekCurrent)
			if err != nil {
				return err
			}
			b := random(n)
			put(want, int(pos), b)
			_, err = o.Write(b)
			return err
		}
	}
	seek := func(off int) step {
		return func(o *ObjectFile, _ *[]byte) error { _, err := o.Seek(int64(off), io.SeekStart); return err }
	}
	truncate := func(n int) step {
		return func(o *ObjectFile, want *[]byte) error {
			if n < len(*want) {
				*want = (*want)[:n]
			} else {
				*want = append(*want, make([]byte, n-len(*want))...)
			}
			return o.Truncate(int64(n))
		}
	}
	for _, c := range []struct {
		name  string
		steps []step
		inMem bool // still in memory at Commit
	}{
		{"writes", []step{write(100), write(4000), write(1)}, true},
		{"write to the limit", []step{write(limit - 1), write(1)}, true},
		{"write past the limit", []step{write(limit - 10), write(20), write(5)}, false},
		{"holes and overwrites", []step{writeAt(5000, 10), writeAt(0, 7), writeAt(4990, 30), seek(3), write(2)}, true},
		{"write at past the limit", []step{write(10), writeAt(limit, 1), writeAt(2, 3)}, false},
		{"truncate", []step{write(3000), truncate(1000), truncate(2000), write(10)}, true},
		{"truncate past the limit", []step{write(10), truncate(limit + 1), writeAt(limit-2, 2)}, false},
		{"seek past the end", []step{write(10), seek(100), write(5)}, true},
		{"seek past the limit", []step{write(10), seek(limit), write(5)}, false},
		{"empty writes past the end", []step{write(10), writeAt(200, 0), seek(50), write(0)}, true},
		{"empty", nil, true},
	} {
		for _, inFile := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/file=%v", c.name, inFile), func(t *testing.T) {
				w, dir := newWriter(t)
				defer w.Close()
				w.SetPackMax(limit)
				// A buffer full of other bytes, back in the pool: holes
				// must read as zeros all the same.
				dirty, err := w.NewObject()
				if err != nil {
					t.Fatal(err)
				}
				dirty.Write(bytes.Repeat([]byte{0xff}, limit))
				dirty.Abort()
				if inFile {
					w.SetPackMax(0)
				}
				o, err := w.NewObject()
				if err != nil {
					t.Fatal(err)
				}
				w.SetPackMax(limit)
				var want []byte
				for i, s := range c.steps {
					if err := s(o, &want); err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
				}
				if got := o.name() == ""; got != (c.inMem && !inFile) {
					t.Errorf("in memory %v", got)
				}
				got := make([]byte, len(want)+1)
				if n, err := o.ReadAt(got, 0); n != len(want) || err != io.EOF || !bytes.Equal(got[:n], want) {
					t.Errorf("read back %d bytes, %v: not the %d written", n, err, len(want))
				}
				if o.name() == "" && len(tmpFiles(t, dir)) != 0 {
					t.Errorf("an object in memory made files in tmp/: %v", tmpFiles(t, dir))
				}
				key := KeyOf(want)
				if err := o.Commit(key, &Object{Kind: KindRaw, Size: uint64(len(want)), RawSize: uint64(len(want))}); err != nil {
					t.Fatal(err)
				}
				o.Abort() // after Commit: nothing
				if _, err := o.Write([]byte{1}); !errors.Is(err, os.ErrClosed) {
					t.Errorf("Write after Commit: %v, want os.ErrClosed", err)
				}
				pc := commitAndOpen(t, w, dir)
				if b, _, err := pc.ReadObject(key); err != nil || !bytes.Equal(b, want) {
					t.Errorf("committed object: %v, or not the bytes written", err)
				}
				if _, o, _ := pc.Locate(key); (o.Pack == "") != (len(want) > limit) {
					t.Errorf("object of %d bytes in pack %q (pack limit %d)", len(want), o.Pack, limit)
				}
			})
		}
	}
}

// TestObjectMisuse: offsets past what an int64 holds, an unknown whence,
// negative offsets and sizes are errors, never a panic, and leave the
// object as it was.
func TestObjectMisuse(t *testing.T) {
	w, _ := newWriter(t)
	defer w.Close()
	o, err := w.NewObject()
	if err != nil {
		t.Fatal(err)
	}
	defer o.Abort()
	o.Write([]byte("abc"))
	if _, err := o.Seek(1, 7); err == nil {
		t.Error("Seek with whence 7: no error")
	}
	if _, err := o.Seek(-10, io.SeekCurrent); err == nil {
		t.Error("Seek before the start: no error")
	}
	if _, err := o.WriteAt([]byte{1}, -1); err == nil {
		t.Error("WriteAt -1: no error")
	}
	if err := o.Truncate(-1); err == nil {
		t.Error("Truncate to -1: no error")
	}
	if _, err := o.WriteAt([]byte{1}, math.MaxInt64); err == nil {
		t.Error("WriteAt the largest offset: no error")
	}
	b := make([]byte, 4)
	if n, err := o.ReadAt(b, 0); n != 3 || err != io.EOF || string(b[:3]) != "abc" {
		t.Errorf("after the errors: %q, %v", b[:n], err)
	}
}

// TestPendingSpill: many small objects committed from memory leave one
// spill file in tmp/ until the writer's Commit packs them, and nothing
// after it or after a Close without Commit; an aborted object leaves
// nothing either.
func TestPendingSpill(t *testing.T) {
	w, dir := newWriter(t)
	var data [][]byte
	for i := range 300 {
		b := bytes.Repeat([]byte{byte(i), byte(i >> 8)}, 1+i*7)
		o, err := w.NewObject()
		if err != nil {
			t.Fatal(err)
		}
		o.Write(b)
		if err := o.Commit(KeyOf(b), &Object{Kind: KindRaw, Size: uint64(len(b)), RawSize: uint64(len(b))}); err != nil {
			t.Fatal(err)
		}
		data = append(data, b)
	}
	o, err := w.NewObject()
	if err != nil {
		t.Fatal(err)
	}
	o.Write([]byte("aborted"))
	o.Abort()
	if names := tmpFiles(t, dir); len(names) != 1 {
		t.Errorf("tmp/ holds %v, want one spill file", names)
	}
	c := commitAndOpen(t, w, dir)
	if names := tmpFiles(t, dir); len(names) != 0 {
		t.Errorf("tmp/ holds %v after Commit", names)
	}
	for i, b := range data {
		if got, _, err := c.ReadObject(KeyOf(b)); err != nil || !bytes.Equal(got, b) {
			t.Errorf("object %d: %v, or not its bytes", i, err)
		}
	}
	if st := c.Index().Packs(); st.Members != len(data) {
		t.Errorf("%d members packed, want %d", st.Members, len(data))
	}

	// A writer closed without Commit: its spill file goes with it.
	w, err = Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	o, err = w.NewObject()
	if err != nil {
		t.Fatal(err)
	}
	o.Write([]byte("never committed"))
	if err := o.Commit(KeyOf([]byte("never committed")), &Object{Kind: KindRaw, Size: 15, RawSize: 15}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if names := tmpFiles(t, dir); len(names) != 0 {
		t.Errorf("tmp/ holds %v after Close", names)
	}
}

// TestSpillFiles: the spill keeps its files to a pack's size, so a limit
// on file sizes a little over a pack (RLIMIT_FSIZE here) does not fail a
// run whose pending objects add up to several times it, and after Commit
// every object reads back and tmp/ is empty.
func TestSpillFiles(t *testing.T) {
	w, dir := newWriter(t)
	defer w.Close()
	rng := rand.New(rand.NewPCG(7, 8))
	var data [][]byte
	for range 120 { // 120 x 200 KiB: 23 MiB pending, about 3 spill files
		b := make([]byte, 200<<10)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		data = append(data, b)
	}
	var errs []error
	var most int64
	if !fsizelimit.Run(t, spillBytes+1<<20, func() {
		for _, b := range data {
			if _, err := w.PutBytes(b); err != nil {
				errs = append(errs, err)
				return
			}
		}
		for _, name := range tmpFiles(t, dir) {
			if st, err := os.Stat(filepath.Join(dir, "tmp", name)); err == nil {
				most = max(most, st.Size())
			}
		}
		if err := w.Commit(); err != nil {
			errs = append(errs, err)
		}
	}) {
		return // the child process ran it and checked what follows
	}
	if len(errs) > 0 {
		t.Fatalf("under a limit of a pack and 1 MiB: %v", errs)
	}
	if most > spillBytes {
		t.Errorf("a file in tmp/ of %d bytes, more than a pack's %d", most, spillBytes)
	}
	if names := tmpFiles(t, dir); len(names) != 0 {
		t.Errorf("tmp/ holds %v after Commit", names)
	}
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i, b := range data {
		if got, _, err := c.ReadObject(KeyOf(b)); err != nil || !bytes.Equal(got, b) {
			t.Errorf("object %d: %v, or not its bytes", i, err)
		}
	}
}

// TestPackPendingPartway: a Commit stopped partway through its packs
// leaves pending only the objects not yet packed, with their bytes, and
// has let go of the spill files whose objects are all packed; the next
// Commit packs the rest, and every object reads back.
func TestPackPendingPartway(t *testing.T) {
	w, dir := newWriter(t)
	rng := rand.New(rand.NewPCG(9, 9))
	var data [][]byte
	for range 120 { // 200 KiB each: 3 spill files, 3-4 packs
		b := make([]byte, 200<<10)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		data = append(data, b)
		if _, err := w.PutBytes(b); err != nil {
			t.Fatal(err)
		}
	}
	before := len(tmpFiles(t, dir))
	stop := &stopAfter{Context: context.Background()}
	stop.n.Store(90)
	if err := w.commit(stop); !errors.Is(err, context.Canceled) {
		t.Fatalf("commit stopped after 90 objects: %v", err)
	}
	if n := len(w.pending); n == 0 || n >= len(data) {
		t.Errorf("%d of %d objects pending after a Commit stopped partway", n, len(data))
	}
	if after := len(tmpFiles(t, dir)); after >= before {
		t.Errorf("tmp/ holds %d files after packs were written, %d before", after, before)
	}
	c := commitAndOpen(t, w, dir)
	for i, b := range data {
		if got, _, err := c.ReadObject(KeyOf(b)); err != nil || !bytes.Equal(got, b) {
			t.Fatalf("object %d: %v, or not its bytes", i, err)
		}
	}
	if names := tmpFiles(t, dir); len(names) != 0 {
		t.Errorf("tmp/ holds %v after Commit", names)
	}
}
