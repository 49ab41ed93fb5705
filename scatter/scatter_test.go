package scatter

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/splitzip/splitzip/codec"
)

func TestPutRejects(t *testing.T) {
	h := codec.Header{Size: 200, Values: 100, GroupChunks: 64, ChunkValues: codec.ChunkValues}
	ok := Item{Name: "ok", Dst: 4096, Src: 128, Stored: 10, Size: 10}
	for _, c := range []struct {
		name   string
		it     Item
		staged uint64
	}{
		{"unaligned source", Item{Name: "a", Dst: 1, Src: 136, Stored: 4, Size: 4}, 256},
		{"source inside the table", Item{Name: "a", Dst: 1, Src: 64, Stored: 4, Size: 4}, 256},
		{"past the staged bytes", Item{Name: "a", Dst: 1, Src: 240, Stored: 17, Size: 17}, 256},
		{"source offset past the end", Item{Name: "a", Dst: 1, Src: 1 << 40, Stored: 0, Size: 0}, 256},
		{"raw size mismatch", Item{Name: "a", Dst: 1, Src: 144, Stored: 4, Size: 6}, 256},
		{"null destination", Item{Name: "a", Src: 144, Stored: 4, Size: 4}, 256},
		{"payload size mismatch", Item{Name: "a", Dst: 4096, Src: 144, Stored: 100, Size: 200, Header: &h}, 512},
		{"payload values mismatch", Item{Name: "a", Dst: 4096, Src: 144, Stored: 200, Size: 100, Header: &h}, 512},
		{"unaligned payload destination", Item{Name: "a", Dst: 4097, Src: 144, Stored: 200, Size: 200, Header: &h}, 512},
		{"staged not padded", ok, 250},
	} {
		items := []Item{ok, c.it}
		table := make([]byte, TableBytes(2))
		for i := range table {
			table[i] = 0xEE
		}
		err := Put(table, items, c.staged)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, err)
		}
		if table[0] != 0xEE {
			t.Errorf("%s: the table was written though an item is invalid", c.name)
		}
	}
	good := []Item{ok, {Name: "p", Dst: 8192, Src: 144, Stored: 200, Size: 200, Header: &h}}
	if err := Put(make([]byte, 128), good, 352); err != nil {
		t.Errorf("valid items: %v", err)
	}
}

// TestUnits: the table numbers the kernel's units across items: a
// payload's chunks, a raw item's 32 KiB pieces, nothing for empty ones.
func TestUnits(t *testing.T) {
	h := codec.Header{Size: 200, Values: 3*codec.ChunkValues + 1, GroupChunks: 64, ChunkValues: codec.ChunkValues}
	empty := codec.Header{Size: 64, ChunkValues: codec.ChunkValues}
	items := []Item{
		{Name: "raw", Dst: 4096, Src: 256, Stored: 70000, Size: 70000},
		{Name: "payload", Dst: 8192, Src: 70272, Stored: 200, Size: 2 * h.Values, Header: &h},
		{Name: "empty", Dst: 8192, Src: 70480, Stored: 64, Size: 0, Header: &empty},
		{Name: "one byte", Dst: 1, Src: 70544, Stored: 1, Size: 1},
	}
	table := make([]byte, TableBytes(len(items)))
	if err := Put(table, items, 70560); err != nil {
		t.Fatal(err)
	}
	want := [][2]uint32{{0, 3}, {3, 4}, {7, 0}, {7, 1}}
	for i, w := range want {
		e := table[i*EntryBytes:]
		if got := [2]uint32{binary.LittleEndian.Uint32(e[56:]), binary.LittleEndian.Uint32(e[60:])}; got != w {
			t.Errorf("%s: first and units %v, want %v", items[i].Name, got, w)
		}
	}
	if n := Units(items); n != 8 {
		t.Errorf("%d units, want 8", n)
	}
}

// FuzzPut checks that whatever items it is given, the table
// check never panics and accepts only items inside the staged bytes.
func FuzzPut(f *testing.F) {
	f.Add(uint64(128), uint64(10), uint64(10), uint64(4096), uint64(256), false)
	f.Add(uint64(128), ^uint64(0)-3, uint64(10), uint64(4096), uint64(256), false)
	f.Add(uint64(144), uint64(200), uint64(200), uint64(4096), uint64(512), true)
	f.Fuzz(func(t *testing.T, src, stored, size, dst, staged uint64, payload bool) {
		it := Item{Name: "t", Dst: dst, Src: src, Stored: stored, Size: size}
		if payload {
			it.Header = &codec.Header{Size: stored, Values: size / 2, GroupChunks: 64, ChunkValues: codec.ChunkValues}
		}
		items := []Item{it}
		if err := Put(make([]byte, TableBytes(1)), items, staged); err != nil {
			return
		}
		if src < TableBytes(1) || src+stored < src || src+stored > staged || src+(stored+15)&^15 > staged {
			t.Fatalf("accepted an item outside the staged bytes: %+v, staged %d", it, staged)
		}
	})
}
