package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"sort"
)

// MaxHeaderSize bounds the JSON header, as the reference implementation does.
const MaxHeaderSize = 100 << 20

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
	Tensors   []Tensor          // ordered by Begin, then name
	DataStart uint64            // offset of the data section
}

// DTypeSize returns the bytes per element of the dtypes this package
// knows, and false for others.
func DTypeSize(dtype string) (uint64, bool) {
	switch dtype {
	case "BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E4M3FN", "F8_E5M2FNUZ", "F8_E4M3FNUZ", "F8_E8M0":
		return 1, true
	case "I16", "U16", "F16", "BF16":
		return 2, true
	case "I32", "U32", "F32":
		return 4, true
	case "I64", "U64", "F64", "C64":
		return 8, true
	}
	return 0, false
}

type rawTensor struct {
	DType       *string   `json:"dtype"`
	Shape       *[]uint64 `json:"shape"`
	DataOffsets *[]uint64 `json:"data_offsets"`
}

// Read parses and validates the header of a safetensors file of size
// bytes. name is used in errors.
func Read(r io.ReaderAt, size int64, name string) (*File, error) {
	bad := func(tensor, format string, args ...any) error {
		return &FormatError{File: name, Tensor: tensor, Reason: fmt.Sprintf(format, args...)}
	}
	if size < 8 {
		return nil, bad("", "%d bytes, too short for the 8-byte header length", size)
	}
	var lb [8]byte
	if _, err := r.ReadAt(lb[:], 0); err != nil {
		return nil, fmt.Errorf("%s: reading header length: %w", name, err)
	}
	hlen := binary.LittleEndian.Uint64(lb[:])
	if hlen > MaxHeaderSize {
		return nil, bad("", "header length %d exceeds the limit of %d", hlen, MaxHeaderSize)
	}
	if 8+hlen > uint64(size) {
		return nil, bad("", "header length %d runs past the end of the %d-byte file", hlen, size)
	}
	head := make([]byte, 8+hlen)
	if _, err := r.ReadAt(head, 0); err != nil {
		return nil, fmt.Errorf("%s: reading header: %w", name, err)
	}
	f := &File{Name: name, Size: uint64(size), Header: head, DataStart: 8 + hlen}
	fields, err := objectFields(head[8:])
	if err != nil {
		return nil, bad("", "header is not a JSON object: %v", err)
	}
	for _, kv := range fields {
		if kv.key == "__metadata__" {
			if err := json.Unmarshal(kv.value, &f.Metadata); err != nil {
				return nil, bad("", "__metadata__ is not a map of strings: %v", err)
			}
			continue
		}
		var rt rawTensor
		dec := json.NewDecoder(bytes.NewReader(kv.value))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rt); err != nil {
			return nil, bad(kv.key, "bad entry: %v", err)
		}
		if rt.DType == nil || rt.Shape == nil || rt.DataOffsets == nil {
			return nil, bad(kv.key, "entry lacks dtype, shape or data_offsets")
		}
		if len(*rt.DataOffsets) != 2 {
			return nil, bad(kv.key, "data_offsets has %d values, want 2", len(*rt.DataOffsets))
		}
		b, e := (*rt.DataOffsets)[0], (*rt.DataOffsets)[1]
		if b > e {
			return nil, bad(kv.key, "data_offsets [%d, %d] are reversed", b, e)
		}
		if e > uint64(size)-f.DataStart {
			return nil, bad(kv.key, "data_offsets [%d, %d] run past the end of the file (%d data bytes)", b, e, uint64(size)-f.DataStart)
		}
		t := Tensor{Name: kv.key, DType: *rt.DType, Shape: *rt.Shape, Begin: f.DataStart + b, End: f.DataStart + e}
		if es, ok := DTypeSize(t.DType); ok {
			n := es
			for _, d := range t.Shape {
				hi, lo := bits.Mul64(n, d)
				if hi != 0 {
					return nil, bad(kv.key, "shape %v overflows", t.Shape)
				}
				n = lo
			}
			if n != t.Size() {
				return nil, bad(kv.key, "shape %v of %s needs %d bytes, data_offsets give %d", t.Shape, t.DType, n, t.Size())
			}
		}
		f.Tensors = append(f.Tensors, t)
	}
	sort.Slice(f.Tensors, func(i, j int) bool {
		a, b := &f.Tensors[i], &f.Tensors[j]
		if a.Begin != b.Begin {
			return a.Begin < b.Begin
		}
		return a.Name < b.Name
	})
	for i := 1; i < len(f.Tensors); i++ {
		if prev, t := &f.Tensors[i-1], &f.Tensors[i]; t.Begin < prev.End {
			return nil, bad(t.Name, "bytes [%d, %d) overlap tensor %q", t.Begin, t.End, prev.Name)
		}
	}
	return f, nil
}

type field struct {
	key   string
	value json.RawMessage
}

// objectFields splits a JSON object into its fields, in order, rejecting
// duplicate keys (which encoding/json would silently merge).
func objectFields(b []byte) ([]field, error) {
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
		if seen[key] {
			return nil, fmt.Errorf("duplicate key %q", key)
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
	// Only padding (spaces) may follow the object.
	rest := b[dec.InputOffset():]
	if len(bytes.TrimRight(rest, " \x00")) != 0 {
		return nil, fmt.Errorf("trailing bytes after the object")
	}
	return out, nil
}
