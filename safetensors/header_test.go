package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// file builds a safetensors file from a JSON header and n data bytes.
func file(header string, n int) []byte {
	b := make([]byte, 8, 8+len(header)+n)
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	b = append(b, header...)
	return append(b, make([]byte, n)...)
}

func TestReadValid(t *testing.T) {
	head, offs, err := EncodeHeader(map[string]string{"format": "pt"}, []TensorSpec{
		{Name: "b", DType: "BF16", Shape: []uint64{3, 5}, Size: 30},
		{Name: "a", DType: "F32", Shape: []uint64{2}, Size: 8},
		{Name: "odd", DType: "F4_WEIRD", Shape: []uint64{7}, Size: 3},
		{Name: "empty", DType: "I64", Shape: []uint64{0, 4}, Size: 0},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(head)%8 != 0 {
		t.Errorf("header of %d bytes is not padded to 8", len(head))
	}
	data := append(head, make([]byte, 41)...)
	f, err := Read(bytes.NewReader(data), int64(len(data)), "x.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if f.Metadata["format"] != "pt" || len(f.Tensors) != 4 {
		t.Fatalf("metadata %v, %d tensors", f.Metadata, len(f.Tensors))
	}
	if f.Tensors[0].Name != "b" || f.Tensors[0].Begin != offs[0] || f.Tensors[0].Size() != 30 || f.Tensors[0].Elements() != 15 {
		t.Errorf("first tensor %+v, want b at %d", f.Tensors[0], offs[0])
	}
}

func TestReadInvalid(t *testing.T) {
	big := make([]byte, 8)
	binary.LittleEndian.PutUint64(big, 1<<40)
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "too short"},
		{"length past end", file(`{}`, 0)[:9], "runs past the end"},
		{"huge length", big, "exceeds the limit"},
		{"not json", file(`{"a":`, 0), "not a JSON object"},
		{"array", file(`[1,2]`, 0), "not a JSON object"},
		{"duplicate", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2), "duplicate key"},
		{"out of range", file(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, 3), "run past the end"},
		{"reversed", file(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[2,1]}}`, 3), "reversed"},
		{"overlap", file(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}`, 3), "overlap"},
		{"shape mismatch", file(`{"a":{"dtype":"BF16","shape":[3],"data_offsets":[0,4]}}`, 4), "needs 6 bytes"},
		{"overflow", file(`{"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, 0), "overflows"},
		{"missing field", file(`{"a":{"dtype":"U8","shape":[1]}}`, 1), "lacks"},
		{"unknown field", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}}`, 1), "bad entry"},
		{"negative shape", file(`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}`, 1), "bad entry"},
		{"bad metadata", file(`{"__metadata__":{"a":1}}`, 0), "__metadata__"},
		{"trailing", file(`{} x`, 0), "not a JSON object"},
	}
	for _, c := range cases {
		_, err := Read(bytes.NewReader(c.data), int64(len(c.data)), "bad.safetensors")
		if err == nil || !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "bad.safetensors") {
			t.Errorf("%s: got %v, want a format error naming the file and saying %q", c.name, err, c.want)
		}
	}
	// The tensor is named where one is at fault.
	_, err := Read(bytes.NewReader(cases[9].data), int64(len(cases[9].data)), "f")
	if !strings.Contains(err.Error(), `tensor "a"`) {
		t.Errorf("error %v does not name the tensor", err)
	}
}

func TestReadIndex(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, IndexFileName)
	os.WriteFile(p, []byte(`{"metadata":{},"weight_map":{"a":"s1.safetensors","b":"s2.safetensors","c":"s1.safetensors"}}`), 0o644)
	ix, err := ReadIndex(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := ix.Shards(); len(got) != 2 || got[0] != "s1.safetensors" {
		t.Errorf("shards %v", got)
	}
	for _, bad := range []string{`{}`, `{"weight_map":{"a":"../x.safetensors"}}`, `nope`} {
		os.WriteFile(p, []byte(bad), 0o644)
		if _, err := ReadIndex(p); !errors.Is(err, ErrFormat) {
			t.Errorf("index %s: %v", bad, err)
		}
	}
}

func FuzzRead(f *testing.F) {
	head, _, _ := EncodeHeader(map[string]string{"k": "v"}, []TensorSpec{{Name: "w", DType: "BF16", Shape: []uint64{2, 2}, Size: 8}, {Name: "x", DType: "U8", Shape: []uint64{3}, Size: 3}})
	f.Add(append(head, make([]byte, 11)...))
	f.Add(file(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}`, 2))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := Read(bytes.NewReader(data), int64(len(data)), "fuzz")
		if err != nil {
			return
		}
		// Whatever parses must be in bounds and ordered without overlap.
		var prev uint64
		for _, tn := range h.Tensors {
			if tn.Begin < h.DataStart || tn.End > uint64(len(data)) || tn.Begin > tn.End || tn.Begin < prev {
				t.Fatalf("tensor %q [%d, %d) out of bounds or order", tn.Name, tn.Begin, tn.End)
			}
			prev = tn.End
		}
	})
}
