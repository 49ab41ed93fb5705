package convert

import (
	"encoding/binary"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"testing"
)

// refBF16 rounds a finite float32 to BF16 with exact arithmetic: the
// nearest of the two BF16 neighbours, ties to the even one.
func refBF16(f uint32) uint16 {
	lo := uint16(f >> 16)
	hi := lo + 1
	x := new(big.Float).SetFloat64(float64(math.Float32frombits(f)))
	a := new(big.Float).SetFloat64(float64(math.Float32frombits(uint32(lo) << 16)))
	b := new(big.Float).SetFloat64(float64(math.Float32frombits(uint32(hi) << 16)))
	if lo&0x7fff == 0x7f7f {
		// The upper neighbour is infinity, which rounding treats as 2^128.
		b = new(big.Float).SetMantExp(big.NewFloat(0.5), 129)
		if f&0x80000000 != 0 {
			b.Neg(b)
		}
	}
	da := new(big.Float).Sub(x, a)
	db := new(big.Float).Sub(b, x)
	da.Abs(da)
	db.Abs(db)
	switch c := da.Cmp(db); {
	case c < 0:
		return lo
	case c > 0:
		return hi
	case lo&1 == 0:
		return lo
	}
	return hi
}

func TestBF16(t *testing.T) {
	cases := []uint32{0, 0x80000000, 1, 0x00008000, 0x00018000, 0x3f808000, 0x3f818000, 0x3f807fff, 0x3f80ffff,
		0x7f7fffff, 0xff7fffff, 0x7f7f7fff, 0x7f7f8000, 0x7f800000, 0xff800000, 0x007fffff}
	for i := uint32(0); i < 1<<20; i++ {
		cases = append(cases, i*4093+i>>3) // a spread over every exponent
	}
	for _, f := range cases {
		if f&0x7fffffff >= 0x7f800000 {
			continue
		}
		if got, want := BF16(f), refBF16(f); got != want {
			t.Fatalf("BF16(%#08x) = %#04x, want %#04x", f, got, want)
		}
	}
	// NaNs stay NaNs with their sign; infinities stay infinities.
	for _, f := range []uint32{0x7f800001, 0x7fc00000, 0xffffffff, 0x7f80ffff} {
		if b := BF16(f); b&0x7f80 != 0x7f80 || b&0x7f == 0 || b>>15 != uint16(f>>31) {
			t.Errorf("BF16(NaN %#08x) = %#04x", f, b)
		}
	}
	if BF16(0x7f800000) != 0x7f80 || BF16(0xff800000) != 0xff80 {
		t.Error("infinities changed")
	}
}

func TestHalfToFloat(t *testing.T) {
	for h := range 1 << 16 {
		f := math.Float32frombits(HalfToFloat(uint16(h)))
		s, e, m := h>>15, (h>>10)&0x1f, h&0x3ff
		var want float64
		switch {
		case e == 0x1f && m == 0:
			want = math.Inf(1)
		case e == 0x1f:
			if !math.IsNaN(float64(f)) {
				t.Fatalf("half %#04x: %v, want NaN", h, f)
			}
			continue
		case e == 0:
			want = math.Ldexp(float64(m), -24)
		default:
			want = math.Ldexp(1+float64(m)/1024, e-15)
		}
		if s == 1 {
			want = -want
		}
		if float64(f) != want || math.Signbit(float64(f)) != (s == 1) {
			t.Fatalf("half %#04x: %v, want %v", h, f, want)
		}
	}
}

func f32(vs ...float32) []byte {
	b := make([]byte, 0, 4*len(vs))
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func TestTFJS(t *testing.T) {
	dir := t.TempDir()
	// float32, uint8-quantized, float16-quantized and int32 weights over
	// two shards, the second starting mid-weight.
	data := f32(1, -2.5, 3.14159)
	data = append(data, 0, 10, 255)                       // q = min + v*scale
	data = binary.LittleEndian.AppendUint16(data, 0x3c00) // 1.0
	data = binary.LittleEndian.AppendUint16(data, 0xc000) // -2.0
	data = binary.LittleEndian.AppendUint32(data, 7)
	os.WriteFile(filepath.Join(dir, "s1.bin"), data[:7], 0o644)
	os.WriteFile(filepath.Join(dir, "s2.bin"), data[7:], 0o644)
	manifest := `{"format":"graph-model","weightsManifest":[{"paths":["s1.bin","s2.bin"],"weights":[
	 {"name":"w","shape":[3],"dtype":"float32"},
	 {"name":"q","shape":[3],"dtype":"float32","quantization":{"dtype":"uint8","scale":0.5,"min":-1}},
	 {"name":"h","shape":[2,1],"dtype":"float32","quantization":{"dtype":"float16"}},
	 {"name":"i","shape":[],"dtype":"int32"}]}]}`
	p := filepath.Join(dir, "model.json")
	os.WriteFile(p, []byte(manifest), 0o644)
	ts, err := ReadTFJS(p)
	if err != nil {
		t.Fatal(err)
	}
	bf := func(v float32) uint16 { return BF16(math.Float32bits(v)) }
	want := map[string][]uint16{"w": {bf(1), bf(-2.5), bf(3.14159)}, "q": {bf(-1), bf(4), bf(126.5)}, "h": {bf(1), bf(-2)}}
	if len(ts) != 4 || ts[3].DType != "I32" || binary.LittleEndian.Uint32(ts[3].Data) != 7 || len(ts[3].Shape) != 0 {
		t.Fatalf("tensors %+v", ts)
	}
	for _, tn := range ts[:3] {
		for k, w := range want[tn.Name] {
			if tn.DType != "BF16" || binary.LittleEndian.Uint16(tn.Data[2*k:]) != w {
				t.Errorf("%s[%d] = %#04x, want %#04x", tn.Name, k, binary.LittleEndian.Uint16(tn.Data[2*k:]), w)
			}
		}
	}
	// A manifest that needs more bytes than the shards hold is refused.
	os.WriteFile(filepath.Join(dir, "s2.bin"), data[7:len(data)-1], 0o644)
	if _, err := ReadTFJS(p); err == nil {
		t.Error("short shards accepted")
	}
}

func TestJSValue(t *testing.T) {
	got, err := jsValue([]byte(`[{paths:["a","b"],weights:[{name:"x/y",shape:[1,2],dtype:"float32",quantization:{min:-.5,scale:.25,dtype:"uint8"},f:!0,g:1e-5}]}],rest`))
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"paths":["a","b"],"weights":[{"name":"x/y","shape":[1,2],"dtype":"float32","quantization":{"min":-0.5,"scale":0.25,"dtype":"uint8"},"f":true,"g":1e-5}]}]`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// pb builds protobuf messages for the ONNX test.
type pb []byte

func (m pb) bytes(num int, b []byte) pb {
	m = binary.AppendUvarint(m, uint64(num<<3|2))
	m = binary.AppendUvarint(m, uint64(len(b)))
	return append(m, b...)
}
func (m pb) varint(num int, v uint64) pb {
	return binary.AppendUvarint(binary.AppendUvarint(m, uint64(num<<3)), v)
}

func TestONNX(t *testing.T) {
	raw := pb{}.bytes(tensorName, []byte("conv.weight")).varint(tensorDims, 2).varint(tensorDims, 2).
		varint(tensorDataType, 1).bytes(tensorRawData, f32(0.5, -1, 2, 1e-3))
	floats := pb{}.bytes(tensorName, []byte("bias")).varint(tensorDims, 2).varint(tensorDataType, 1).
		bytes(tensorFloatData, f32(7, 8))
	ints := pb{}.bytes(tensorName, []byte("steps")).bytes(tensorDims, binary.AppendUvarint(nil, 3)).varint(tensorDataType, 7).
		bytes(tensorInt64Data, binary.AppendUvarint(binary.AppendUvarint(binary.AppendUvarint(nil, 1), 2), 3))
	constant := pb{}.bytes(nodeOutput, []byte("c0")).bytes(nodeOpType, []byte("Constant")).
		bytes(nodeAttribute, pb{}.bytes(attrName, []byte("value")).bytes(attrTensor, pb{}.varint(tensorDataType, 10).bytes(tensorRawData, []byte{0x00, 0x3c})))
	sub := pb{}.bytes(graphInitializer, pb{}.bytes(tensorName, []byte("w")).varint(tensorDataType, 1).bytes(tensorRawData, f32(4)))
	ifNode := pb{}.bytes(nodeName, []byte("If_0")).bytes(nodeOpType, []byte("If")).
		bytes(nodeAttribute, pb{}.bytes(attrName, []byte("then_branch")).bytes(attrGraph, sub)).
		bytes(nodeAttribute, pb{}.bytes(attrName, []byte("else_branch")).bytes(attrGraph, sub))
	graph := pb{}.bytes(graphInitializer, raw).bytes(graphInitializer, floats).bytes(graphInitializer, ints).
		bytes(graphNode, constant).bytes(graphNode, ifNode)
	model := pb{}.varint(1, 8).bytes(modelGraph, graph)
	p := filepath.Join(t.TempDir(), "m.onnx")
	os.WriteFile(p, model, 0o644)
	ts, err := ReadONNX(p)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"conv.weight", "bias", "steps", "c0", "If_0.then_branch/w", "If_0.else_branch/w"}
	if len(ts) != len(names) {
		t.Fatalf("%d tensors: %+v", len(ts), ts)
	}
	for i, n := range names {
		if ts[i].Name != n {
			t.Errorf("tensor %d is %q, want %q", i, ts[i].Name, n)
		}
	}
	if ts[0].DType != "BF16" || len(ts[0].Data) != 8 || binary.LittleEndian.Uint16(ts[0].Data[2:]) != 0xbf80 {
		t.Errorf("conv.weight %+v", ts[0])
	}
	if ts[1].DType != "BF16" || binary.LittleEndian.Uint16(ts[1].Data) != BF16(math.Float32bits(7)) {
		t.Errorf("bias %+v", ts[1])
	}
	if ts[2].DType != "I64" || binary.LittleEndian.Uint64(ts[2].Data[16:]) != 3 {
		t.Errorf("steps %+v", ts[2])
	}
	if ts[3].DType != "BF16" || binary.LittleEndian.Uint16(ts[3].Data) != 0x3f80 {
		t.Errorf("constant %+v", ts[3])
	}
	// Truncated models fail cleanly.
	for _, n := range []int{1, len(model) / 2, len(model) - 1} {
		os.WriteFile(p, model[:n], 0o644)
		if _, err := ReadONNX(p); err == nil {
			t.Errorf("model truncated to %d bytes accepted", n)
		}
	}
}

func TestWriteCheckpoint(t *testing.T) {
	dir := t.TempDir()
	ts := []Tensor{{Name: "a", DType: "BF16", Shape: []uint64{4}, Data: make([]byte, 8)}, {Name: "b", DType: "I64", Shape: []uint64{2}, Data: make([]byte, 16)},
		{Name: "c", DType: "BF16", Shape: []uint64{}, Data: make([]byte, 2)}}
	names, err := WriteCheckpoint(dir, ts, 20, nil)
	if err != nil || len(names) != 2 {
		t.Fatalf("%v %v", names, err)
	}
	if _, err := WriteCheckpoint(dir, append(ts, ts[0]), 20, nil); err == nil {
		t.Error("a repeated name was accepted")
	}
}

// FuzzONNX: any bytes give tensors or an error, never a panic.
func FuzzONNX(f *testing.F) {
	f.Add([]byte(pb{}.bytes(modelGraph, pb{}.bytes(graphInitializer, pb{}.varint(tensorDataType, 1).varint(tensorDims, 1).bytes(tensorRawData, f32(1))))))
	f.Add([]byte{0x3a, 0x05, 0x2a, 0x03, 0x10, 0x01, 0x08})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, "f.onnx")
		os.WriteFile(p, b, 0o644)
		ReadONNX(p)
	})
}
