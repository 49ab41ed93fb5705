package shardcache

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// objectFilesFixture writes a cache of one pack (the header and four
// small tensors) and one object of its own file, and returns it, the
// source's tensors and their bytes.
func objectFilesFixture(t *testing.T) (*Cache, []Tensor, [][]byte) {
	t.Helper()
	w, dir := newWriter(t)
	src, data := packedSource(t, w, "/a", 1, 5, 100, 17, DefaultPackMax+1, 3)
	w.SetSource(src)
	c := commitAndOpen(t, w, dir)
	if st := c.Index().Packs(); st.Packs != 1 {
		t.Fatalf("packs: %+v, want 1", st)
	}
	return c, src.Shards[0].Tensors, data
}

// openFiles counts this process's open descriptors, or skips the test
// where /proc/self/fd is not there.
//
// Files an earlier test dropped unclosed are closed first (their
// finalizers run after a collection): otherwise one closed between two
// counts (the collector running meanwhile) looks like a descriptor the
// code under test let go, a failure about one run in sixty.
func openFiles(t *testing.T) int {
	t.Helper()
	count := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd")
		}
		return len(ents)
	}
	n := count()
	for range 10 {
		runtime.GC()
		time.Sleep(time.Millisecond) // the finalizers' goroutine
		m := count()
		if m == n {
			break
		}
		n = m
	}
	return n
}

// TestObjectFilesRead: every object reads back through Open and ReadAt,
// whole and in parts, from its pack or its own file; a read past an
// object's end stops there with io.EOF; the pack stays open (one
// descriptor) until Close, and the own file does not.
func TestObjectFilesRead(t *testing.T) {
	c, tensors, data := objectFilesFixture(t)
	fds := openFiles(t)
	objs := NewObjectFiles(c)
	for i, tn := range tensors {
		loc, o, err := c.Locate(tn.Key)
		if err != nil {
			t.Fatal(err)
		}
		if (loc.Pack != "") != (o.Pack != "") || loc.Pack != o.Pack || loc.Packed != (o.Pack != "") {
			t.Errorf("tensor %d: location %+v of an object in pack %q", i, loc, o.Pack)
		}
		f, err := objs.Open(loc)
		if err != nil {
			t.Fatal(err)
		}
		if f.Name() != loc.Name() || f.Location() != loc {
			t.Errorf("tensor %d: named %q at %+v, want %q", i, f.Name(), f.Location(), loc.Name())
		}
		got := make([]byte, len(data[i])+7)
		n, err := f.ReadAt(got, 0)
		if n != len(data[i]) || err != io.EOF || !bytes.Equal(got[:n], data[i]) {
			t.Errorf("tensor %d: a read past its end: %d bytes, %v; want %d and io.EOF", i, n, err, len(data[i]))
		}
		if n, err := f.ReadAt(got[:1], int64(len(data[i]))); n != 0 || err != io.EOF {
			t.Errorf("tensor %d: a read at its end: %d bytes, %v", i, n, err)
		}
		if _, err := f.ReadAt(got[:1], -1); err == nil {
			t.Errorf("tensor %d: a read at offset -1 succeeded", i)
		}
		half := len(data[i]) / 2
		if n, err := f.ReadAt(got[:len(data[i])-half], int64(half)); err != nil || !bytes.Equal(got[:n], data[i][half:]) {
			t.Errorf("tensor %d: its second half: %d bytes, %v", i, n, err)
		}
		if err := f.Close(); err != nil {
			t.Errorf("tensor %d: close: %v", i, err)
		}
		if err := f.Close(); err != nil {
			t.Errorf("tensor %d: a second close: %v", i, err)
		}
		clear(got)
		if err := objs.ReadAt(loc, got[:len(data[i])], 0); err != nil || !bytes.Equal(got[:len(data[i])], data[i]) {
			t.Errorf("tensor %d: ReadAt: %v", i, err)
		}
	}
	if n := openFiles(t); n != fds+1 {
		t.Errorf("%d descriptors open after the reads, %d before: want the pack's alone", n, fds)
	}
	if err := objs.Close(); err != nil {
		t.Fatal(err)
	}
	if n := openFiles(t); n != fds {
		t.Errorf("%d descriptors open after Close, %d before", n, fds)
	}
	// Reads after Close open the pack again.
	loc, _, _ := c.Locate(tensors[0].Key)
	got := make([]byte, len(data[0]))
	if err := objs.ReadAt(loc, got, 0); err != nil || !bytes.Equal(got, data[0]) {
		t.Errorf("a read after Close: %v", err)
	}
	objs.Close()
}

// TestObjectFilesPackRange: a range of a pack that several members share
// (a Location of one member, widened) reads with one call.
func TestObjectFilesPackRange(t *testing.T) {
	c, tensors, data := objectFilesFixture(t)
	objs := NewObjectFiles(c)
	defer objs.Close()
	first, _, _ := c.Locate(tensors[0].Key)
	last, _, _ := c.Locate(tensors[2].Key)
	rng := first
	rng.Size = last.Offset + last.Size - first.Offset
	buf := make([]byte, rng.Size)
	if err := objs.ReadAt(rng, buf, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		loc, _, _ := c.Locate(tensors[i].Key)
		if b := buf[loc.Offset-first.Offset:][:loc.Size]; !bytes.Equal(b, data[i]) {
			t.Errorf("member %d differs in the range", i)
		}
	}
}

// TestObjectFilesCorrupt: a pack cut short or grown fails its first open
// with ErrObjectCorrupt naming it and both sizes, and is not kept (once
// repaired it opens); a pack cut short after it was opened, and an
// object's own file cut short, fail their reads with ErrObjectCorrupt
// naming the object's bytes.
func TestObjectFilesCorrupt(t *testing.T) {
	c, tensors, _ := objectFilesFixture(t)
	packed, _, _ := c.Locate(tensors[0].Key)
	own, _, _ := c.Locate(tensors[3].Key)
	if packed.Pack == "" || own.Pack != "" {
		t.Fatalf("fixture: %+v, %+v", packed, own)
	}
	orig, err := os.ReadFile(packed.Path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c2 := range []struct {
		what string
		b    []byte
	}{
		{"cut short", orig[:len(orig)-1]},
		{"grown", append(append([]byte{}, orig...), 0)},
	} {
		if err := os.WriteFile(packed.Path, c2.b, 0o644); err != nil {
			t.Fatal(err)
		}
		objs := NewObjectFiles(c)
		_, err := objs.Open(packed)
		want := fmt.Sprintf("%d bytes, index says %d", len(c2.b), len(orig))
		if !errors.Is(err, ErrObjectCorrupt) || !strings.Contains(err.Error(), packed.Path) || !strings.Contains(err.Error(), want) {
			t.Errorf("a pack %s: %v; want ErrObjectCorrupt naming %s and %q", c2.what, err, packed.Path, want)
		}
		err = objs.ReadAt(packed, make([]byte, packed.Size), 0)
		if !errors.Is(err, ErrObjectCorrupt) {
			t.Errorf("a pack %s, ReadAt: %v", c2.what, err)
		}
		if err := os.WriteFile(packed.Path, orig, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := objs.ReadAt(packed, make([]byte, packed.Size), 0); err != nil {
			t.Errorf("a pack %s, then repaired: %v", c2.what, err)
		}
		objs.Close()
	}

	// Cut short once open: the kept file reads short.
	objs := NewObjectFiles(c)
	defer objs.Close()
	last, _, _ := c.Locate(tensors[4].Key)
	if err := objs.ReadAt(last, make([]byte, last.Size), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(last.Path, int64(last.Offset+1)); err != nil {
		t.Fatal(err)
	}
	err = objs.ReadAt(last, make([]byte, last.Size), 0)
	if !errors.Is(err, ErrObjectCorrupt) || !strings.Contains(err.Error(), last.Name()) || !strings.Contains(err.Error(), fmt.Sprintf("ends at byte 1, the index says %d bytes", last.Size)) {
		t.Errorf("a pack cut short while open: %v", err)
	}
	if err := os.WriteFile(packed.Path, orig, 0o644); err != nil {
		t.Fatal(err)
	}

	// An object's own file is stat'ed when opened: cut short, or grown
	// (bytes appended), it is damaged, named, though the bytes read are
	// right.
	ob, err := os.ReadFile(own.Path)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{ob[:10], append(slices.Clone(ob), "junk"...)} {
		if err := os.WriteFile(own.Path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("%d bytes, index says %d", len(b), own.Size)
		if _, err := objs.Open(own); !errors.Is(err, ErrObjectCorrupt) || !strings.Contains(err.Error(), own.Path) || !strings.Contains(err.Error(), want) {
			t.Errorf("an object's own file of %d bytes: %v", len(b), err)
		}
		if err := objs.ReadAt(own, make([]byte, own.Size), 0); !errors.Is(err, ErrObjectCorrupt) || !strings.Contains(err.Error(), own.Path) {
			t.Errorf("an object's own file of %d bytes, ReadAt: %v", len(b), err)
		}
	}
	os.Remove(own.Path)
	if _, err := objs.Open(own); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), own.Path) {
		t.Errorf("an object's own file gone: %v", err)
	}
}

// TestObjectFilesConcurrent: many goroutines reading members of one pack
// (and the object of its own file) share one open pack and read the
// right bytes (run with -race).
func TestObjectFilesConcurrent(t *testing.T) {
	c, tensors, data := objectFilesFixture(t)
	fds := openFiles(t)
	objs := NewObjectFiles(c)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for r := range 50 {
				i := (g + r) % len(tensors)
				loc, _, err := c.Locate(tensors[i].Key)
				if err != nil {
					t.Error(err)
					return
				}
				f, err := objs.Open(loc)
				if err != nil {
					t.Error(err)
					return
				}
				got := make([]byte, loc.Size)
				if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, data[i]) {
					t.Errorf("tensor %d: %v", i, err)
				}
				f.Close()
			}
		})
	}
	wg.Wait()
	if n := openFiles(t); n != fds+1 {
		t.Errorf("%d descriptors open after the reads, %d before: want the pack's alone", n, fds)
	}
	objs.Close()
}

// TestLocateHit: a resolved hit locates its object where Locate does,
// packed or not, without the index; one not resolved falls back to it,
// and one whose key is not in the index is reported by LocateHit.
func TestLocateHit(t *testing.T) {
	c, tensors, _ := objectFilesFixture(t)
	for i, tn := range tensors {
		want, wo, err := c.Locate(tn.Key)
		if err != nil {
			t.Fatal(err)
		}
		hit, err := c.LookupName(tn.Name, "")
		if err != nil {
			t.Fatal(err)
		}
		plain := hit
		c.Resolve(&hit)
		for _, h := range []SliceHit{hit, plain} {
			got, o, err := c.LocateHit(h)
			if err != nil || got != want || o != wo {
				t.Errorf("tensor %d (resolved %v): %+v, %v, want %+v", i, h.at != nil, got, err, want)
			}
		}
	}
	gone := SliceHit{Tensor: &Tensor{Key: "00"}}
	c.Resolve(&gone)
	if _, _, err := c.LocateHit(gone); !errors.Is(err, ErrNotFound) {
		t.Errorf("a key not in the index: %v", err)
	}
}
