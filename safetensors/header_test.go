package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
	os.WriteFile(p, []byte("\xef\xbb\xbf"+`{"weight_map":{"a":"s1.safetensors"}}`), 0o644)
	if _, err := ReadIndex(p); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "byte-order mark") {
		t.Errorf("an index that starts with a byte-order mark: %v", err)
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
		// Names read back unchanged once written: what Read decoded is
		// what the reference decodes, or the pair would disagree.
		specs := make([]TensorSpec, len(h.Tensors))
		for i, tn := range h.Tensors {
			specs[i] = TensorSpec{Name: tn.Name, DType: "U8", Shape: []uint64{0}}
		}
		head, _, err := EncodeHeader(nil, specs)
		if err != nil {
			t.Fatal(err)
		}
		g, err := Read(bytes.NewReader(head), int64(len(head)), "again")
		if err != nil {
			t.Fatalf("names %q written back: %v", names(h), err)
		}
		if a, b := names(h), names(g); !slices.Equal(a, b) {
			t.Fatalf("names %q read back as %q", a, b)
		}
	})
}

// names returns f's tensor names, sorted.
func names(f *File) []string {
	var out []string
	for _, tn := range f.Tensors {
		out = append(out, tn.Name)
	}
	slices.Sort(out)
	return out
}

// TestNamesRoundTrip: tensor names come back as the reference decodes
// them, byte for byte: escaped surrogate pairs, raw UTF-8, escaped control
// characters and quotes; and a name EncodeHeader writes reads back
// unchanged.
func TestNamesRoundTrip(t *testing.T) {
	for _, c := range []struct{ json, want string }{
		{`\ud83d\ude00`, "\U0001F600"},
		{`\uD83D\uDE00x`, "\U0001F600x"},
		{`\udbff\udfff`, "\U0010FFFF"},
		{"é漢\U0001F600", "é漢\U0001F600"},
		{`\u00e9\u6f22`, "é漢"},
		{`a\u0000b\u001f\n\r\t\b\f`, "a\x00b\x1f\n\r\t\b\f"},
		{`q\"\\\/`, `q"\/`},
		{`\\ud800`, `\ud800`},
		{`\u2028\u2029`, "\u2028\u2029"},
		{`\ufffd\uffff`, "\ufffd\uffff"},
	} {
		data := file(`{"`+c.json+`":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1)
		f, err := Read(bytes.NewReader(data), int64(len(data)), "n.safetensors")
		if err != nil {
			t.Errorf("%s: %v", c.json, err)
			continue
		}
		if got := f.Tensors[0].Name; got != c.want {
			t.Errorf("%s: read as %q, want %q", c.json, got, c.want)
		}
		head, _, err := EncodeHeader(nil, []TensorSpec{{Name: c.want, DType: "U8", Shape: []uint64{1}, Size: 1}})
		if err != nil {
			t.Fatal(err)
		}
		data = append(head, 0)
		if f, err = Read(bytes.NewReader(data), int64(len(data)), "n.safetensors"); err != nil || f.Tensors[0].Name != c.want {
			t.Errorf("%q written and read back: %v", c.want, err)
			continue
		}
	}
}

// TestLengthTooLarge: a header length that takes tensor bytes for header
// text is refused saying that the length may be wrong; offsets in errors
// say what they count from.
func TestLengthTooLarge(t *testing.T) {
	header := `{"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}}`
	data := binary.LittleEndian.AppendUint64(nil, uint64(len(header)+3))
	data = append(append(data, header...), 0xff, 0xfe, 0xfd, 0xfc)
	_, err := Read(bytes.NewReader(data), int64(len(data)), "x.safetensors")
	if err == nil || !strings.Contains(err.Error(), "is its 8-byte length, "+strconv.Itoa(len(header)+3)+", right?") {
		t.Errorf("a length 3 bytes too large: %v", err)
	}
	past := `{"a":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]}}`
	data = binary.LittleEndian.AppendUint64(nil, uint64(len(past)))
	data = append(append(data, past...), 1, 2, 3, 4)
	if _, err := Read(bytes.NewReader(data), int64(len(data)), "x.safetensors"); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("from the data section's start, file byte %d", 8+len(past))) {
		t.Errorf("offsets past the end: %v", err)
	}
}
