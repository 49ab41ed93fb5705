package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
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
