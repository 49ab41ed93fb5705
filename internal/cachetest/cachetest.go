// Package cachetest damages cache objects for tests, wherever they are
// stored (in a file of their own or in a pack), and collects a cache's
// garbage.
package cachetest

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/shardcache"
)

// Flip XORs byte at of the object with key (at < 0 counts from the
// object's end) with mask, and returns a function that restores it.
func Flip(t testing.TB, c *shardcache.Cache, key shardcache.Key, at int64, mask byte) (restore func()) {
	t.Helper()
	loc, o, err := c.Locate(key)
	if err != nil {
		t.Fatal(err)
	}
	if at < 0 {
		at += int64(o.Size)
	}
	if at < 0 || at >= int64(o.Size) {
		t.Fatalf("byte %d of a %d-byte object", at, o.Size)
	}
	f, err := os.OpenFile(loc.Path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	off := int64(loc.Offset) + at
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	orig := b[0]
	b[0] ^= mask
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	return func() { writeAt(t, loc.Path, []byte{orig}, off) }
}

// writeAt writes b at off of the file at path.
func writeAt(t testing.TB, path string, b []byte, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// Remove deletes the file that holds the object with key: its own, or its
// whole pack.
func Remove(t testing.TB, c *shardcache.Cache, key shardcache.Key) {
	t.Helper()
	loc, _, err := c.Locate(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(loc.Path); err != nil {
		t.Fatal(err)
	}
}

// Forge flips bytes of the payload object with key by mask at byte at
// (from its end when negative) and writes the payload's header a
// checksum of its new bytes, so that the payload checks as whole by
// itself: only the checksum its cache's index records tells it apart.
// restore puts the object back.
func Forge(t testing.TB, c *shardcache.Cache, key shardcache.Key, at int64, mask byte) (restore func()) {
	t.Helper()
	loc, o, err := c.Locate(key)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(loc.Path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := make([]byte, o.Size)
	if _, err := f.ReadAt(p, int64(loc.Offset)); err != nil {
		t.Fatal(err)
	}
	orig := bytes.Clone(p)
	if at < 0 {
		at += int64(o.Size)
	}
	if at < codec.ChecksumAt+4 || at >= int64(o.Size) {
		t.Fatalf("byte %d of a %d-byte payload: not past its header's checksum", at, o.Size)
	}
	p[at] ^= mask
	binary.LittleEndian.PutUint32(p[codec.ChecksumAt:], codec.Checksum(p))
	if _, err := f.WriteAt(p, int64(loc.Offset)); err != nil {
		t.Fatal(err)
	}
	return func() { writeAt(t, loc.Path, orig, int64(loc.Offset)) }
}

// GC collects the garbage of the cache in dir (a writer of its own, no
// options) and returns what it removed.
func GC(t testing.TB, dir string) shardcache.GCResult {
	t.Helper()
	w, err := shardcache.Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	res, err := w.GC(context.Background(), shardcache.GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}
