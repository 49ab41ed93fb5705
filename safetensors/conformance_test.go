package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/big"
	"sort"
	"strings"
	"testing"
)

// e is a tensor entry in the compact form the conformance table uses.
func e(dtype, shape string, b, end uint64) string {
	return fmt.Sprintf(`{"dtype":%q,"shape":%s,"data_offsets":[%d,%d]}`, dtype, shape, b, end)
}

// TestConformance holds Read to the reference implementation's rules: one
// accepted and one rejected file per rule, plus the three deviations
// splitzip keeps (docs/FORMAT.md, "Source files").
func TestConformance(t *testing.T) {
	type tc struct {
		rule   string
		header string // JSON, written as is after the length
		data   int    // data bytes after the header
		accept bool
		want   string // rejected: in the error; accepted: in a deviation ("" for none)
	}
	cases := []tc{
		{"key order unlike offset order", `{"b":` + e("U8", "[2]", 2, 4) + `,"a":` + e("U8", "[2]", 0, 2) + `}`, 4, true, ""},
		{"overlapping non-empty tensors", `{"a":` + e("U8", "[3]", 0, 3) + `,"b":` + e("U8", "[2]", 2, 4) + `}`, 4, false, `data_offsets [2, 4] overlap tensor "a"'s [0, 3]`},
		{"empty tensor where a tensor begins, named after it", `{"a":` + e("U8", "[2]", 0, 2) + `,"z":` + e("U8", "[0]", 0, 0) + `}`, 2, true, ""},
		{"empty tensor inside a tensor", `{"a":` + e("U8", "[4]", 0, 4) + `,"z":` + e("U8", "[0]", 2, 2) + `}`, 4, false, "overlap"},
		{"empty tensor where a tensor begins, named before it", `{"z":` + e("U8", "[2]", 0, 2) + `,"a":` + e("F32", "[0,3]", 0, 0) + `}`, 2, true, ""},
		{"empty tensors at the end", `{"a":` + e("U8", "[2]", 0, 2) + `,"b":` + e("BF16", "[0]", 2, 2) + `,"c":` + e("I64", "[5,0]", 2, 2) + `}`, 2, true, ""},
		{"several empty tensors at one offset between two", `{"a":` + e("U8", "[1]", 0, 1) + `,"m":` + e("U8", "[0]", 1, 1) + `,"0":` + e("U8", "[0]", 1, 1) + `,"b":` + e("U8", "[1]", 1, 2) + `}`, 2, true, ""},
		{"only empty tensors", `{"a":` + e("U8", "[0]", 0, 0) + `,"b":` + e("U8", "[0]", 0, 0) + `}`, 0, true, ""},
		{"reversed offsets", `{"a":` + e("U8", "[0]", 2, 1) + `}`, 3, false, "reversed"},
		{"empty header object", `{}`, 0, true, ""},
		{"metadata only", `{"__metadata__":{"format":"pt"}}`, 0, true, ""},
		{"null metadata", `{"__metadata__":null}`, 0, true, ""},
		{"metadata value not a string", `{"__metadata__":{"a":1}}`, 0, false, "__metadata__"},
		{"metadata null value", `{"__metadata__":{"a":null}}`, 0, false, "__metadata__"},
		{"repeated metadata", `{"__metadata__":{},"__metadata__":{}}`, 0, false, "duplicate key"},
		{"header not an object", `[1,2]`, 0, false, "not a JSON object"},
		{"header a string", `"x"`, 0, false, "not a JSON object"},
		{"header null", `null`, 0, false, "not a JSON object"},
		{"empty header", ``, 0, false, "the header is empty"},
		{"padded with spaces", `{"a":` + e("U8", "[1]", 0, 1) + `}    `, 1, true, ""},
		{"followed by newline", "{}\n", 0, true, ""},
		{"followed by tab, CR, LF", "{} \t\r\n", 0, true, ""},
		{"preceded by whitespace", "\n {}", 0, true, ""},
		{"padded with NUL", "{}\x00\x00", 0, false, "trailing bytes"},
		{"followed by text", `{} x`, 0, false, "trailing bytes"},
		{"not UTF-8", "{\"a\xff\":" + e("U8", "[0]", 0, 0) + "}", 0, false, "UTF-8"},
		{"unknown field in an entry", `{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":[1,{"y":2}]}}`, 1, true, ""},
		{"repeated field in an entry", `{"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1, false, "duplicate key"},
		{"entry as an array", `{"a":["U8",[1],[0,1]]}`, 1, true, ""},
		{"entry as a short array", `{"a":["U8",[1]]}`, 1, false, "want 3"},
		{"entry lacks data_offsets", `{"a":{"dtype":"U8","shape":[1]}}`, 1, false, "lacks"},
		{"null shape", `{"a":{"dtype":"U8","shape":null,"data_offsets":[0,0]}}`, 0, false, "null"},
		{"three data_offsets", `{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,1]}}`, 1, false, "want 2"},
		{"entry a number", `{"a":3}`, 0, false, "not an object"},
		{"scalar", `{"a":` + e("BF16", "[]", 0, 2) + `}`, 2, true, ""},
		{"scalar of the wrong size", `{"a":` + e("BF16", "[]", 0, 0) + `}`, 0, false, "needs 2 bytes"},
		{"size mismatch", `{"a":` + e("BF16", "[3]", 0, 4) + `}`, 4, false, "needs 6 bytes"},
		{"F4, even count", `{"a":` + e("F4", "[3,2]", 0, 3) + `}`, 3, true, ""},
		{"F4, odd count", `{"a":` + e("F4", "[3]", 0, 2) + `}`, 2, false, "not a whole number of bytes"},
		{"F6_E2M3, 4 values", `{"a":` + e("F6_E2M3", "[4]", 0, 3) + `}`, 3, true, ""},
		{"F6_E3M2, 2 values", `{"a":` + e("F6_E3M2", "[2]", 0, 2) + `}`, 2, false, "not a whole number of bytes"},
		{"negative dimension", `{"a":` + e("U8", "[-1]", 0, 1) + `}`, 1, false, "shape"},
		{"fractional dimension", `{"a":` + e("U8", "[1.0]", 0, 1) + `}`, 1, false, "shape"},
		{"overflowing dimensions", `{"a":` + e("F64", "[4294967296,4294967296]", 0, 0) + `}`, 0, false, "overflows"},
		{"dimension past 64 bits", `{"a":` + e("U8", "[18446744073709551616]", 0, 0) + `}`, 0, false, "shape"},
		{"zero before overflow", `{"a":` + e("U8", "[0,4294967296,4294967296]", 0, 0) + `}`, 0, true, ""},
		{"tensor past the end of the file", `{"a":` + e("U8", "[4]", 0, 4) + `}`, 3, false, "run past the end"},
		{"duplicate tensor names", `{"a":` + e("U8", "[1]", 0, 1) + `,"a":` + e("U8", "[1]", 0, 1) + `}`, 1, false, `tensor "a": the header names this tensor twice`},
		// Strings: serde_json reads every string of the header as UTF-8,
		// so a \u escape of half a surrogate pair is refused wherever it is.
		{"escaped surrogate pair in a name", `{"\ud83d\ude00":` + e("U8", "[1]", 0, 1) + `}`, 1, true, ""},
		{"escaped surrogate pair, upper-case hex", `{"\uD83D\uDE00":` + e("U8", "[1]", 0, 1) + `}`, 1, true, ""},
		{"escaped backslash before u", `{"a\\ud800":` + e("U8", "[1]", 0, 1) + `}`, 1, true, ""},
		{"escaped control characters in a name", `{"a\u0000\u001f\n\t\"\/":` + e("U8", "[1]", 0, 1) + `}`, 1, true, ""},
		{"lone high surrogate in a name", `{"a\ud800":` + e("U8", "[1]", 0, 1) + `}`, 1, false, `\ud800 at byte 11`},
		{"lone low surrogate in a name", `{"\udc00":` + e("U8", "[1]", 0, 1) + `}`, 1, false, `\udc00`},
		{"high surrogate before a plain escape", `{"\ud800\u0041":` + e("U8", "[1]", 0, 1) + `}`, 1, false, `\ud800`},
		{"high surrogate before a newline escape", `{"\ud800\n":` + e("U8", "[1]", 0, 1) + `}`, 1, false, `\ud800`},
		{"two high surrogates", `{"\ud83d\ud83d\ude00":` + e("U8", "[1]", 0, 1) + `}`, 1, false, `\ud83d at byte 10`},
		{"surrogate pair reversed", `{"\ude00\ud83d":` + e("U8", "[1]", 0, 1) + `}`, 1, false, `\ude00`},
		{"high surrogate at the end of a name", `{"a\udbff":` + e("U8", "[1]", 0, 1) + `}`, 1, false, `\udbff`},
		{"lone surrogate in metadata", `{"__metadata__":{"k":"\ud800"}}`, 0, false, `\ud800`},
		{"lone surrogate in a metadata key", `{"__metadata__":{"\udfff":"v"}}`, 0, false, `\udfff`},
		{"lone surrogate in a dtype", `{"a":{"dtype":"U8\ud800","shape":[1],"data_offsets":[0,1]}}`, 1, false, `\ud800`},
		{"lone surrogate in an unknown field of an entry", `{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":"\udc00"}}`, 1, false, `\udc00`},
		// Deviations: refused by the reference, kept by splitzip.
		{"hole between tensors", `{"a":` + e("U8", "[1]", 0, 1) + `,"b":` + e("U8", "[1]", 3, 4) + `}`, 4, true, `data bytes [1, 3) before tensor "b"`},
		{"bytes after the last tensor", `{"a":` + e("U8", "[1]", 0, 1) + `}`, 5, true, "after the last tensor"},
		{"unknown dtype", `{"a":` + e("Q3_K", "[7]", 0, 3) + `}`, 3, true, "not a safetensors dtype"},
	}
	for dt, bits := range dtypeBits {
		n := 16 * bits / 8
		cases = append(cases,
			tc{"dtype " + dt, `{"a":` + e(dt, "[4,4]", 0, n) + `}`, int(n), true, ""},
			tc{"dtype " + dt + " of the wrong size", `{"a":` + e(dt, "[4,4]", 0, n+1) + `}`, int(n + 1), false, "needs"})
	}
	sort.Slice(cases, func(i, j int) bool { return cases[i].rule < cases[j].rule })
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			data := file(c.header, c.data)
			f, err := Read(bytes.NewReader(data), int64(len(data)), "c.safetensors")
			if !c.accept {
				if err == nil || !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "c.safetensors") {
					t.Fatalf("got %v, want a format error naming the file and saying %q", err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			dev := strings.Join(f.Deviations, "; ")
			if (c.want == "") != (dev == "") || !strings.Contains(dev, c.want) {
				t.Fatalf("deviations %q, want %q", dev, c.want)
			}
		})
	}
}

// spaces is a ReaderAt of a header length n, "{}" and then spaces, so the
// size limit can be tested without a 100 MB file.
type spaces struct{ n uint64 }

func (s spaces) ReadAt(p []byte, off int64) (int, error) {
	for i := range p {
		switch o := uint64(off) + uint64(i); {
		case o < 8:
			p[i] = byte(s.n >> (8 * o))
		case o == 8:
			p[i] = '{'
		case o == 9:
			p[i] = '}'
		case o < 8+s.n:
			p[i] = ' '
		default:
			return i, io.EOF
		}
	}
	return len(p), nil
}

func TestHeaderLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 100 MB")
	}
	if _, err := Read(spaces{MaxHeaderSize}, 8+MaxHeaderSize, "max"); err != nil {
		t.Errorf("a header of exactly %d bytes: %v", MaxHeaderSize, err)
	}
	if _, err := Read(spaces{MaxHeaderSize + 1}, 9+MaxHeaderSize, "over"); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "exceeds the limit") {
		t.Errorf("a header of %d bytes: %v", MaxHeaderSize+1, err)
	}
}

// modelTensor is one tensor of a header FuzzConformance builds.
type modelTensor struct {
	name  string
	dtype string
	shape []uint64
	offs  [2]uint64
}

// modelBits is the fuzz model's own copy of the reference dtype table.
var modelBits = map[string]int64{"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8,
	"F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16,
	"F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64}

// modelAccepts decides a header by the reference rules (Metadata::validate
// and read_metadata), written independently of Read, plus splitzip's
// three kept deviations; dataLen is the bytes after the header.
func modelAccepts(ts []modelTensor, dataLen uint64) bool {
	names := map[string]bool{}
	for _, t := range ts {
		if names[t.name] {
			return false // splitzip refuses repeated names
		}
		names[t.name] = true
	}
	sorted := append([]modelTensor(nil), ts...)
	sort.SliceStable(sorted, func(i, j int) bool {
		a, b := sorted[i].offs, sorted[j].offs
		return a[0] < b[0] || a[0] == b[0] && a[1] < b[1]
	})
	limit := new(big.Int).SetUint64(^uint64(0))
	var start uint64
	for _, t := range sorted {
		s, e := t.offs[0], t.offs[1]
		if e < s || s < start || e > dataLen { // s > start is a kept hole
			return false
		}
		start = e
		bits, ok := modelBits[t.dtype]
		if !ok {
			continue // kept as raw bytes
		}
		n := big.NewInt(1)
		for _, d := range t.shape {
			n.Mul(n, new(big.Int).SetUint64(d))
			if n.Cmp(limit) > 0 {
				return false
			}
		}
		n.Mul(n, big.NewInt(bits))
		if n.Cmp(limit) > 0 {
			return false
		}
		if new(big.Int).Mod(n, big.NewInt(8)).Sign() != 0 {
			return false
		}
		if n.Div(n, big.NewInt(8)).Cmp(new(big.Int).SetUint64(e-s)) != 0 {
			return false
		}
	}
	return true // bytes after the last tensor are kept
}

// FuzzConformance builds headers from the fuzzer's bytes and checks Read's
// decision against modelAccepts.
func FuzzConformance(f *testing.F) {
	f.Add([]byte{3, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17})
	f.Add([]byte{2, 14, 1, 4, 0, 0, 14, 1, 0, 0, 0, 1})
	f.Add([]byte{4, 1, 2, 3, 0, 0, 0, 0, 5, 2, 1, 0, 0, 200, 7, 3, 1, 1, 1})
	dtypes := []string{"BF16", "F4", "F6_E2M3", "U8", "F32", "F64", "BOOL", "F8_E4M3", "Q3_K", "I16", "F6_E3M2", "C64", "F8_E8M0", "U64", "F16", "I8"}
	dims := []uint64{0, 1, 2, 3, 4, 7, 8, 1 << 32, 1 << 33, 1<<64 - 1}
	f.Fuzz(func(t *testing.T, in []byte) {
		next := func() byte {
			if len(in) == 0 {
				return 0
			}
			b := in[0]
			in = in[1:]
			return b
		}
		n := int(next() % 6)
		var ts []modelTensor
		var pos uint64
		for i := range n {
			c := next()
			mt := modelTensor{name: string(rune('a' + (next() % 5))), dtype: dtypes[c%16]}
			if c&0x80 != 0 {
				mt.name = fmt.Sprintf("t%d", i)
			}
			rank := int(next() % 4)
			for range rank {
				mt.shape = append(mt.shape, dims[next()%10])
			}
			size := uint64(0)
			if b, ok, err := TensorBytes(mt.dtype, mt.shape); ok && err == nil && b < 64 {
				size = b
			} else if !ok {
				size = uint64(next() % 8)
			}
			// Mostly contiguous, sometimes nudged.
			switch d := next(); d % 8 {
			case 0:
				mt.offs = [2]uint64{pos + uint64(d>>4), pos + size}
			case 1:
				mt.offs = [2]uint64{pos, pos + size + uint64(d>>4) - 8}
			case 2:
				mt.offs = [2]uint64{pos - min(pos, uint64(d>>4)), pos + size}
			default:
				mt.offs = [2]uint64{pos, pos + size}
			}
			if mt.offs[1] <= pos+64 {
				pos = max(pos, mt.offs[1])
			}
			ts = append(ts, mt)
		}
		dataLen := pos + uint64(next()%3)
		var js strings.Builder
		js.WriteString("{")
		if next()%2 == 0 {
			js.WriteString(`"__metadata__":{"k":"v"}`)
			if len(ts) > 0 {
				js.WriteString(",")
			}
		}
		order := next()
		for i := range ts {
			mt := ts[(i+int(order))%len(ts)]
			if i > 0 {
				js.WriteString(",")
			}
			sh := make([]string, len(mt.shape))
			for k, d := range mt.shape {
				sh[k] = fmt.Sprint(d)
			}
			fmt.Fprintf(&js, `%q:{"dtype":%q,"shape":[%s],"data_offsets":[%d,%d]}`, mt.name, mt.dtype, strings.Join(sh, ","), mt.offs[0], mt.offs[1])
		}
		js.WriteString("}")
		js.WriteString([]string{"", "  ", "\n", "\t\r\n "}[next()%4])
		data := file(js.String(), int(dataLen))
		_, err := Read(bytes.NewReader(data), int64(len(data)), "fuzz")
		want := modelAccepts(ts, dataLen)
		if (err == nil) != want {
			t.Fatalf("header %s with %d data bytes: Read says %v, the model says accept=%v", js.String(), dataLen, err, want)
		}
		if err != nil && !errors.Is(err, ErrFormat) {
			t.Fatalf("error %v is not a format error", err)
		}
	})
}

// TestNotSafetensors: a file of another kind (text, random bytes, too
// short for a length) is a FormatError that says it is not a safetensors
// file; a safetensors file whose header length alone is wrong is not
// called another kind.
func TestNotSafetensors(t *testing.T) {
	for _, c := range []struct {
		name  string
		b     []byte
		other bool
	}{
		{"text", []byte("# A README\n\nsplitzip makes model weights smaller.\n"), true},
		{"short", []byte("hello\n"), true},
		{"eight", []byte("12345678"), true},
		{"length-past-end", append(binary.LittleEndian.AppendUint64(nil, 1000), []byte(`{"a":1}`)...), false},
	} {
		_, err := Read(bytes.NewReader(c.b), int64(len(c.b)), c.name)
		if !errors.Is(err, ErrFormat) || strings.Contains(err.Error(), "not a safetensors file") != c.other {
			t.Errorf("%s: %v (another kind of file: %v)", c.name, err, c.other)
		}
	}
}
