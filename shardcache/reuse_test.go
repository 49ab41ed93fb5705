package shardcache

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"testing"
)

// TestHasPayloadCheck: a payload an earlier run stored goes through the
// writer's PayloadCheck once; wrong bytes (ErrObjectCorrupt) make it not
// stored and listed by Mended; an error reading them makes it not stored
// and Commit fail with that error, committing nothing, and Mended stays
// empty.
func TestHasPayloadCheck(t *testing.T) {
	w, dir := newWriter(t)
	w.SetPackMax(0)
	o, err := w.NewObject()
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte{7}, 4096)
	o.Write(data)
	key := KeyOf(data)
	if err := o.Commit(key, &Object{Kind: KindFixed, Size: 4096, RawSize: 8192}); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	for _, c := range []struct {
		name    string
		err     error
		corrupt bool
	}{
		{"whole", nil, false},
		{"wrong bytes", fmt.Errorf("%w: checksum", ErrObjectCorrupt), true},
		{"unreadable", errors.New("input/output error"), false},
	} {
		w, err := Create(dir)
		if err != nil {
			t.Fatal(err)
		}
		calls := 0
		w.SetPayloadCheck(func(o *Object, r io.ReaderAt) error {
			calls++
			if o.Size != 4096 {
				t.Errorf("%s: checked %d bytes", c.name, o.Size)
			}
			return c.err
		})
		_, ok := w.Has(key)
		w.Has(key)
		m := w.damaged // what Has found (Mended lists those stored again)
		cerr := w.Commit()
		w.Close()
		switch {
		case calls != 1 && c.err == nil:
			t.Errorf("%s: %d checks of one object, want 1", c.name, calls)
		case ok != (c.err == nil):
			t.Errorf("%s: Has says stored %v", c.name, ok)
		case (len(m) == 1) != c.corrupt:
			t.Errorf("%s: Mended %v", c.name, m)
		case c.err != nil && !c.corrupt && (cerr == nil || !strings.Contains(cerr.Error(), "input/output error")):
			t.Errorf("%s: Commit %v, want the read's error", c.name, cerr)
		case (c.err == nil || c.corrupt) && cerr != nil:
			t.Errorf("%s: Commit %v", c.name, cerr)
		}
	}
}

// TestRawObjectCRC: a raw object's recorded CRC-32C is its bytes', by
// whichever path they were written (Write, WriteString, io.Copy's
// ReadFrom); where the writes were not in order (WriteAt, Seek,
// Truncate) none is recorded.
func TestRawObjectCRC(t *testing.T) {
	data := bytes.Repeat([]byte("crc of a raw object "), 300)
	for _, c := range []struct {
		name    string
		write   func(o *ObjectFile)
		ordered bool
	}{
		{"Write", func(o *ObjectFile) { o.Write(data[:100]); o.Write(data[100:]) }, true},
		{"WriteString", func(o *ObjectFile) { io.WriteString(o, string(data)) }, true},
		{"io.Copy", func(o *ObjectFile) { io.Copy(o, bytes.NewReader(data)) }, true},
		{"WriteAt", func(o *ObjectFile) { o.WriteAt(data[100:], 100); o.WriteAt(data[:100], 0) }, false},
		{"Seek", func(o *ObjectFile) {
			o.Write(bytes.Repeat([]byte{1}, len(data)))
			o.Seek(0, io.SeekStart)
			o.Write(data)
		}, false},
		{"Truncate", func(o *ObjectFile) { o.Write(data); o.Write(data[:7]); o.Truncate(int64(len(data))) }, false},
	} {
		for _, packMax := range []uint64{0, DefaultPackMax} { // in a file, in memory
			w, _ := newWriter(t)
			w.SetPackMax(packMax)
			o, err := w.NewObject()
			if err != nil {
				t.Fatal(err)
			}
			c.write(o)
			key := KeyOf(data)
			meta := &Object{Kind: KindRaw, Size: uint64(len(data)), RawSize: uint64(len(data))}
			if err := o.Commit(key, meta); err != nil {
				t.Fatalf("%s, pack max %d: %v", c.name, packMax, err)
			}
			want := uint32(0)
			if c.ordered {
				want = crc32.Checksum(data, castagnoli)
			}
			if meta.Checksum != want {
				t.Errorf("%s, pack max %d: recorded CRC-32C %08x, want %08x", c.name, packMax, meta.Checksum, want)
			}
			w.Close()
		}
	}
}
