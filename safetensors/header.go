package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"strings"
	"unicode/utf8"
)

// MaxHeaderSize bounds the JSON header at 100,000,000 bytes, the
// reference implementation's limit.
const MaxHeaderSize = 100_000_000

// ErrFormat reports a file that is not a valid safetensors file.
var ErrFormat = errors.New("invalid safetensors file")

// FormatError locates a problem in a safetensors file. It matches ErrFormat.
type FormatError struct {
	File   string
	Tensor string // empty for the file as a whole
	Reason string
}

func (e *FormatError) Error() string {
	if e.Tensor != "" {
		return fmt.Sprintf("%s: tensor %q: %s", e.File, e.Tensor, e.Reason)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Reason)
}

// Is makes FormatError match ErrFormat.
func (e *FormatError) Is(target error) bool { return target == ErrFormat }

// Tensor is one entry of the header.
type Tensor struct {
	Name  string
	DType string
	Shape []uint64
	Begin uint64 // absolute offset of the first byte in the file
	End   uint64 // absolute offset just past the last byte
}

// Size returns the tensor's size in bytes.
func (t *Tensor) Size() uint64 { return t.End - t.Begin }

// Elements returns the product of the shape.
func (t *Tensor) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// File is the parsed header of a safetensors file.
type File struct {
	Name      string            // for errors
	Size      uint64            // file size
	Header    []byte            // the 8-byte length and the JSON header, as stored
	Metadata  map[string]string // __metadata__
	Tensors   []Tensor          // ordered by (Begin, End), then name
	DataStart uint64            // offset of the data section
	// Deviations lists what this file has that the reference
	// implementation refuses but splitzip keeps, byte for byte: holes
	// between tensors, bytes after the last tensor, dtypes it does not
	// know (docs/FORMAT.md, "Source files").
	Deviations []string
}

// dtypeBits holds the bits per element of every dtype of the reference
// implementation.
var dtypeBits = map[string]uint64{
	"F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
	"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
	"I16": 16, "U16": 16, "F16": 16, "BF16": 16,
	"I32": 32, "U32": 32, "F32": 32,
	"I64": 64, "U64": 64, "F64": 64, "C64": 64,
}

// DTypeBits returns the bits per element of the reference dtypes, and
// false for others.
func DTypeBits(dtype string) (uint64, bool) {
	b, ok := dtypeBits[dtype]
	return b, ok
}

// TensorBytes returns the bytes a tensor of a reference dtype and shape
// occupies. It reports an error for a shape whose element or bit count
// overflows 64 bits (checked in shape order, as the reference does) and
// for a bit count that is not a multiple of 8; ok is false for dtypes
// the reference does not know.
func TensorBytes(dtype string, shape []uint64) (n uint64, ok bool, err error) {
	b, ok := DTypeBits(dtype)
	if !ok {
		return 0, false, nil
	}
	elems := uint64(1)
	for _, d := range shape {
		hi, lo := bits.Mul64(elems, d)
		if hi != 0 {
			return 0, true, fmt.Errorf("shape %v overflows", shape)
		}
		elems = lo
	}
	hi, nbits := bits.Mul64(elems, b)
	if hi != 0 {
		return 0, true, fmt.Errorf("shape %v of %s overflows", shape, dtype)
	}
	if nbits%8 != 0 {
		return 0, true, fmt.Errorf("shape %v of %s is %d bits, not a whole number of bytes", shape, dtype, nbits)
	}
	return nbits / 8, true, nil
}

// Read parses and validates the header of a safetensors file of size
// bytes by the reference implementation's rules. name is used in errors.
func Read(r io.ReaderAt, size int64, name string) (*File, error) {
	bad := func(tensor, format string, args ...any) error {
		return &FormatError{File: name, Tensor: tensor, Reason: fmt.Sprintf(format, args...)}
	}
	if size < 8 {
		return nil, bad("", "not a safetensors file: %d bytes, too short for the 8-byte header length", size)
	}
	var lb [9]byte
	n, err := r.ReadAt(lb[:min(size, 9)], 0)
	if n < min(int(size), 9) {
		return nil, fmt.Errorf("%s: reading header length: %w", name, err)
	}
	hlen := binary.LittleEndian.Uint64(lb[:8])
	// A file of another kind (a text, a pickle) gives a length that
	// makes no sense: say what it is, then why.
	what := ""
	if size == 8 || lb[8] != '{' {
		what = "not a safetensors file (no JSON header after its first 8 bytes): "
	}
	if hlen > MaxHeaderSize {
		return nil, bad("", "%sheader length %d exceeds the limit of %d", what, hlen, MaxHeaderSize)
	}
	if 8+hlen > uint64(size) {
		return nil, bad("", "%sheader length %d runs past the end of the %d-byte file", what, hlen, size)
	}
	head := make([]byte, 8+hlen)
	if _, err := r.ReadAt(head, 0); err != nil {
		return nil, fmt.Errorf("%s: reading header: %w", name, err)
	}
	f := &File{Name: name, Size: uint64(size), Header: head, DataStart: 8 + hlen}
	if len(bytes.Trim(head[8:], " \t\n\r")) == 0 { // JSON's whitespace
		return nil, bad("", "the header is empty (its 8-byte length is %d and it holds no JSON object)", hlen)
	}
	if !utf8.Valid(head[8:]) {
		// A length too large takes tensor bytes for header text.
		return nil, bad("", "header is not valid UTF-8 (is its 8-byte length, %d, right? the header's JSON should end there)", hlen)
	}
	if off, esc, ok := loneSurrogate(head[8:]); !ok {
		return nil, bad("", "header has %s at byte %d, half of a UTF-16 surrogate pair without the other half (a string the reference implementation refuses)", esc, 8+off)
	}
	dataLen := uint64(size) - f.DataStart
	// check validates a tensor whose Begin and End are still relative to
	// the data section, and makes them absolute.
	check := func(t *Tensor) error {
		b, end := t.Begin, t.End
		if b > end {
			return bad(t.Name, "data_offsets [%d, %d] are reversed", b, end)
		}
		if end > dataLen {
			return bad(t.Name, "data_offsets [%d, %d] (from the data section's start, file byte %d) run past the end of the file (%d data bytes)", b, end, f.DataStart, dataLen)
		}
		t.Begin, t.End = f.DataStart+b, f.DataStart+end
		n, known, err := TensorBytes(t.DType, t.Shape)
		switch {
		case err != nil:
			return bad(t.Name, "%v", err)
		case !known:
			f.Deviations = append(f.Deviations, fmt.Sprintf("tensor %q: dtype %q is not a safetensors dtype; kept as raw bytes", t.Name, t.DType))
		case n != t.Size():
			return bad(t.Name, "shape %v of %s needs %d bytes, data_offsets give %d", t.Shape, t.DType, n, t.Size())
		}
		return nil
	}
	if ts, meta, ok := scanHeader(head[8:]); ok {
		f.Metadata, f.Tensors = meta, ts
		for i := range f.Tensors {
			if err := check(&f.Tensors[i]); err != nil {
				return nil, err
			}
		}
	} else {
		fields, err := objectFields(head[8:], false)
		if dup, ok := errors.AsType[duplicateKey](err); ok && string(dup) != "__metadata__" {
			return nil, bad(string(dup), "the header names this tensor twice")
		}
		if err != nil {
			return nil, bad("", "header is not a JSON object: %v", err)
		}
		for _, kv := range fields {
			if kv.key == "__metadata__" {
				if f.Metadata, err = parseMetadata(kv.value); err != nil {
					return nil, bad("", "__metadata__ %v", err)
				}
				continue
			}
			e, err := parseEntry(kv.value)
			if err != nil {
				return nil, bad(kv.key, "bad entry: %v", err)
			}
			t := Tensor{Name: kv.key, DType: e.dtype, Shape: e.shape, Begin: e.offsets[0], End: e.offsets[1]}
			if err := check(&t); err != nil {
				return nil, err
			}
			f.Tensors = append(f.Tensors, t)
		}
	}
	if !slices.IsSortedFunc(f.Tensors, compareTensors) {
		slices.SortFunc(f.Tensors, compareTensors)
	}
	pos := f.DataStart
	for i := range f.Tensors {
		t := &f.Tensors[i]
		switch {
		case t.Begin < pos:
			o := f.Tensors[i-1]
			return nil, bad(t.Name, "data_offsets [%d, %d] overlap tensor %q's [%d, %d] (file bytes [%d, %d) and [%d, %d))",
				t.Begin-f.DataStart, t.End-f.DataStart, o.Name, o.Begin-f.DataStart, o.End-f.DataStart, t.Begin, t.End, o.Begin, o.End)
		case t.Begin > pos:
			f.Deviations = append(f.Deviations, fmt.Sprintf("data bytes [%d, %d) before tensor %q (file bytes [%d, %d)) belong to no tensor; kept",
				pos-f.DataStart, t.Begin-f.DataStart, t.Name, pos, t.Begin))
		}
		pos = t.End
	}
	if pos < f.Size {
		f.Deviations = append(f.Deviations, fmt.Sprintf("%d bytes after the last tensor; kept", f.Size-pos))
	}
	return f, nil
}

// compareTensors orders tensors by (Begin, End), then name.
func compareTensors(a, b Tensor) int {
	if c := cmp.Compare(a.Begin, b.Begin); c != 0 {
		return c
	}
	if c := cmp.Compare(a.End, b.End); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// entry is a tensor's header entry.
type entry struct {
	dtype   string
	shape   []uint64
	offsets [2]uint64
}

// parseEntry reads a tensor entry: an object with dtype, shape and
// data_offsets (other fields are ignored, as the reference ignores them;
// a repeated field is an error), or the array [dtype, shape,
// data_offsets], which the reference's deserializer accepts too.
func parseEntry(v json.RawMessage) (entry, error) {
	var e entry
	var dt, sh, off json.RawMessage
	switch firstByte(v) {
	case '{':
		fields, err := objectFields(v, false)
		if err != nil {
			return e, err
		}
		for _, f := range fields {
			switch f.key {
			case "dtype":
				dt = f.value
			case "shape":
				sh = f.value
			case "data_offsets":
				off = f.value
			}
		}
		if dt == nil || sh == nil || off == nil {
			return e, errors.New("entry lacks dtype, shape or data_offsets")
		}
	case '[':
		var a []json.RawMessage
		if err := json.Unmarshal(v, &a); err != nil {
			return e, err
		}
		if len(a) != 3 {
			return e, fmt.Errorf("an array entry has %d elements, want 3", len(a))
		}
		dt, sh, off = a[0], a[1], a[2]
	default:
		return e, errors.New("entry is not an object")
	}
	var offs []uint64
	for _, x := range []struct {
		name string
		raw  json.RawMessage
		dst  any
	}{{"dtype", dt, &e.dtype}, {"shape", sh, &e.shape}, {"data_offsets", off, &offs}} {
		if firstByte(x.raw) == 'n' {
			return e, fmt.Errorf("%s is null", x.name)
		}
		if err := json.Unmarshal(x.raw, x.dst); err != nil {
			return e, fmt.Errorf("%s: %v", x.name, err)
		}
	}
	if len(offs) != 2 {
		return e, fmt.Errorf("data_offsets has %d values, want 2", len(offs))
	}
	if e.shape == nil {
		e.shape = []uint64{}
	}
	e.offsets = [2]uint64{offs[0], offs[1]}
	return e, nil
}

// parseMetadata reads __metadata__: null, or an object of strings (a
// repeated key keeps its last value, as the reference does).
func parseMetadata(v json.RawMessage) (map[string]string, error) {
	if firstByte(v) == 'n' {
		return nil, nil
	}
	fields, err := objectFields(v, true)
	if err != nil {
		return nil, fmt.Errorf("is not a map of strings: %v", err)
	}
	m := make(map[string]string, len(fields))
	for _, f := range fields {
		var s string
		if firstByte(f.value) != '"' || json.Unmarshal(f.value, &s) != nil {
			return nil, fmt.Errorf("is not a map of strings: %q is %s", f.key, f.value)
		}
		m[f.key] = s
	}
	return m, nil
}

// loneSurrogate finds the first \u escape in JSON text b that encodes a
// UTF-16 surrogate not paired as the reference implementation (Rust's
// serde_json, which checks every string of the header) requires: a high
// surrogate (\ud800-\udbff) must be followed at once by a \u escape of a
// low one (\udc00-\udfff), and a low one may appear only there.
// encoding/json would turn such a surrogate into U+FFFD, changing the
// name. It returns the escape's offset in b and its text, and ok when
// there is none. Malformed escapes are left to the JSON parser; outside
// strings valid JSON has no backslash.
func loneSurrogate(b []byte) (off int, esc string, ok bool) {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		u, isU := hexEscape(b, i)
		switch {
		case !isU:
			i++ // the escaped byte, which may be a backslash
		case u >= 0xdc00 && u <= 0xdfff:
			return i, string(b[i : i+6]), false
		case u >= 0xd800 && u <= 0xdbff:
			if v, isV := hexEscape(b, i+6); !isV || v < 0xdc00 || v > 0xdfff {
				return i, string(b[i : i+6]), false
			}
			i += 11
		default:
			i += 5
		}
	}
	return 0, "", true
}

// hexEscape decodes the escape \uXXXX at b[i:], if there is one.
func hexEscape(b []byte, i int) (rune, bool) {
	if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
		return 0, false
	}
	var u rune
	for _, c := range b[i+2 : i+6] {
		switch {
		case '0' <= c && c <= '9':
			u = u<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			u = u<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			u = u<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return u, true
}

// firstByte returns the first byte of a JSON value, 0 for none.
func firstByte(v json.RawMessage) byte {
	v = bytes.TrimLeft(v, jsonSpace)
	if len(v) == 0 {
		return 0
	}
	return v[0]
}

// jsonSpace is the whitespace JSON allows between tokens, and the only
// bytes the reference accepts after the header object.
const jsonSpace = " \t\r\n"

type field struct {
	key   string
	value json.RawMessage
}

// objectFields splits a JSON object into its fields, in order. Duplicate
// keys, which encoding/json would silently merge, are an error unless
// dups is set.
func objectFields(b []byte, dups bool) ([]field, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("starts with %v", tok)
	}
	seen := map[string]bool{}
	var out []field
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("key %v is not a string", tok)
		}
		if seen[key] && !dups {
			return nil, duplicateKey(key)
		}
		seen[key] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, field{key, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	// Only whitespace may follow the object.
	rest := b[dec.InputOffset():]
	if len(bytes.TrimLeft(rest, jsonSpace)) != 0 {
		return nil, fmt.Errorf("trailing bytes after the object")
	}
	return out, nil
}

// duplicateKey is objectFields' error for a key an object has twice.
type duplicateKey string

func (k duplicateKey) Error() string { return fmt.Sprintf("duplicate key %q", string(k)) }
