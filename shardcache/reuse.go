package shardcache

// Objects an earlier run stored are checked before a writer reuses them:
// a cache verify found damaged is mended by compressing (or pulling)
// again, which writes the damaged objects anew instead of counting them
// as stored.

import (
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"strings"
)

// Mend is an object an earlier run stored that a later run found
// missing, cut short or damaged, and stored again: what compress and
// pull report of Mended.
type Mend struct {
	Key   Key    `json:"key"`
	Error string `json:"error"` // what was wrong with it
}

// Mends lists m (as Mended returns it) by key.
func Mends(m map[Key]error) []Mend {
	ms := make([]Mend, 0, len(m))
	for k, err := range m {
		ms = append(ms, Mend{Key: k, Error: err.Error()})
	}
	slices.SortFunc(ms, func(a, b Mend) int { return strings.Compare(string(a.Key), string(b.Key)) })
	return ms
}

// PayloadCheck checks the stored bytes of a payload object o (a fixed
// or entropy one): r reads exactly its o.Size bytes. Wrong bytes are an
// error matching ErrObjectCorrupt; any other error is one of reading
// them. Package shardcache knows no payload layout, so a writer checks
// payloads only through the PayloadCheck its user sets (SetPayloadCheck);
// raw objects it checks against their content keys itself.
type PayloadCheck func(o *Object, r io.ReaderAt) error

// SetPayloadCheck sets the check Has applies to payloads an earlier run
// stored before it reports them stored.
func (w *Writer) SetPayloadCheck(fn PayloadCheck) {
	w.mu.Lock()
	w.check = fn
	w.mu.Unlock()
}

// Mended returns the objects of earlier runs that Has found missing, cut
// short or damaged (ErrObjectCorrupt), and what was wrong with each, that
// this writer has stored again: Has reported them not stored, so a caller
// that stores them (as compress does) replaces them. One stored again in
// another form is not (ObjectFile.Commit keeps the form the index's
// records name), and not reported: it stays damaged, for verify to say.
func (w *Writer) Mended() map[Key]error {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := make(map[Key]error, len(w.damaged))
	for k, err := range w.damaged {
		if w.replaced[k] {
			m[k] = err
		}
	}
	return m
}

// checkEarlier checks the object o of key that an earlier run stored:
// its file (or its pack) of the size the index records, a raw object's
// bytes against key, a payload's with the PayloadCheck. Its error names
// the file and matches ErrObjectCorrupt.
func (w *Writer) checkEarlier(key Key, o *Object) error {
	w.mu.Lock()
	file, want, check := key, o.Size, w.check
	if o.Pack != "" {
		file = o.Pack
		if p := w.ix.Objects[o.Pack]; p != nil {
			want = p.Size
		}
	}
	w.mu.Unlock()
	p, err := objectPath(w.dir, file)
	if err != nil {
		return err
	}
	f, err := openSized(p, key, want)
	if err != nil {
		return err
	}
	defer f.Close()
	name := p
	if o.Pack != "" {
		name = fmt.Sprintf("%s[%d:+%d]", p, o.Offset, o.Size)
	}
	return checkContent(name, key, o, io.NewSectionReader(f, int64(o.Offset), int64(o.Size)), check)
}

// checkContent checks the bytes of the object o of key that r reads, the
// object name names for errors: a raw object's against key, a payload's
// with check (nil: not checked). Its error matches ErrObjectCorrupt where
// the bytes are wrong.
func checkContent(name string, key Key, o *Object, r io.ReaderAt, check PayloadCheck) error {
	switch {
	case o.Kind == KindRaw:
		h, crc := NewHasher(), crc32.New(castagnoli)
		if _, err := io.Copy(io.MultiWriter(h, crc), io.NewSectionReader(r, 0, int64(o.Size))); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if KeyFromSum([32]byte(h.Sum(nil))) != key {
			return fmt.Errorf("%s: %w: its bytes do not hash to its content key %s", name, ErrObjectCorrupt, key)
		}
		// Its record too: loads check a raw copy by the CRC-32C it gives.
		if o.Checksum != 0 && crc.Sum32() != o.Checksum {
			return fmt.Errorf("%s: %w: its bytes are its content key's, but the index records a CRC-32C of %08x for them, not %08x", name, ErrObjectCorrupt, o.Checksum, crc.Sum32())
		}
	case check != nil:
		if err := check(o, r); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}
