package convert

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"
)

// ONNX field numbers (onnx.proto3) the reader uses.
const (
	modelGraph = 7

	graphNode        = 1
	graphInitializer = 5

	nodeOutput    = 2
	nodeName      = 3
	nodeOpType    = 4
	nodeAttribute = 5

	attrName    = 1
	attrTensor  = 5
	attrGraph   = 6
	attrTensors = 10
	attrGraphs  = 11

	tensorDims         = 1
	tensorDataType     = 2
	tensorFloatData    = 4
	tensorInt32Data    = 5
	tensorInt64Data    = 7
	tensorName         = 8
	tensorRawData      = 9
	tensorDoubleData   = 10
	tensorDataLocation = 14
)

// onnxTypes maps ONNX TensorProto data types to safetensors dtypes and
// element sizes. FLOAT and FLOAT16 become BF16.
var onnxTypes = map[uint64]struct {
	dtype string
	size  int
}{
	1: {"F32", 4}, 2: {"U8", 1}, 3: {"I8", 1}, 4: {"U16", 2}, 5: {"I16", 2}, 6: {"I32", 4}, 7: {"I64", 8},
	9: {"BOOL", 1}, 10: {"F16", 2}, 11: {"F64", 8}, 12: {"U32", 4}, 13: {"U64", 8}, 16: {"BF16", 2},
}

// ReadONNX reads the weights of an ONNX model: the initializers of its
// graph and of every subgraph (If, Loop, Scan bodies), and the tensors of
// Constant nodes, named by the path of graphs that holds them.
func ReadONNX(path string) ([]Tensor, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	fs, err := fields(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r := &onnxReader{seen: map[string]int{}}
	found := false
	for _, f := range fs {
		if f.num == modelGraph && f.wire == 2 {
			found = true
			if err := r.graph(f.b, ""); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("%s: not an ONNX model (no graph)", path)
	}
	return r.out, nil
}

type onnxReader struct {
	out  []Tensor
	seen map[string]int
}

func (r *onnxReader) graph(msg []byte, prefix string) error {
	fs, err := fields(msg)
	if err != nil {
		return err
	}
	for _, f := range fs {
		switch {
		case f.num == graphInitializer && f.wire == 2:
			if err := r.tensor(f.b, prefix, ""); err != nil {
				return err
			}
		case f.num == graphNode && f.wire == 2:
			if err := r.node(f.b, prefix); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *onnxReader) node(msg []byte, prefix string) error {
	fs, err := fields(msg)
	if err != nil {
		return err
	}
	var name, op, output string
	for _, f := range fs {
		switch f.num {
		case nodeName:
			name = string(f.b)
		case nodeOpType:
			op = string(f.b)
		case nodeOutput:
			if output == "" {
				output = string(f.b)
			}
		}
	}
	label := name
	if label == "" {
		label = output
	}
	for _, f := range fs {
		if f.num != nodeAttribute || f.wire != 2 {
			continue
		}
		as, err := fields(f.b)
		if err != nil {
			return err
		}
		var an string
		for _, a := range as {
			if a.num == attrName {
				an = string(a.b)
			}
		}
		for _, a := range as {
			switch {
			case (a.num == attrTensor || a.num == attrTensors) && a.wire == 2:
				// A Constant's tensor is named by the node's output.
				fallback := label + "." + an
				if op == "Constant" && output != "" {
					fallback = output
				}
				if err := r.tensor(a.b, prefix, fallback); err != nil {
					return err
				}
			case (a.num == attrGraph || a.num == attrGraphs) && a.wire == 2:
				if err := r.graph(a.b, prefix+label+"."+an+"/"); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// tensor converts a TensorProto; fallback names it when it has no name.
func (r *onnxReader) tensor(msg []byte, prefix, fallback string) error {
	fs, err := fields(msg)
	if err != nil {
		return err
	}
	var name string
	var dt uint64
	var raw []byte
	hasRaw := false
	for _, f := range fs {
		switch f.num {
		case tensorName:
			name = string(f.b)
		case tensorDataType:
			dt = f.v
		case tensorRawData:
			raw, hasRaw = f.b, true
		case tensorDataLocation:
			if f.v == 1 {
				return fmt.Errorf("tensor %q: external data is not supported", name)
			}
		}
	}
	if name == "" {
		name = fallback
	}
	dims, err := varints(fs, tensorDims)
	if err != nil {
		return err
	}
	shape := make([]int64, len(dims))
	for i, d := range dims {
		shape[i] = int64(d)
	}
	n, ushape, err := elements(shape)
	if err != nil {
		return fmt.Errorf("tensor %q: %w", name, err)
	}
	ty, ok := onnxTypes[dt]
	if !ok {
		return nil // strings and other types carry no weights
	}
	if !hasRaw {
		if raw, err = typedData(fs, dt, n); err != nil {
			return fmt.Errorf("tensor %q: %w", name, err)
		}
	}
	if uint64(len(raw)) != n*uint64(ty.size) {
		return fmt.Errorf("tensor %q: %d bytes for %d values of %s", name, len(raw), n, ty.dtype)
	}
	t := Tensor{Name: r.unique(prefix + name), DType: ty.dtype, Shape: ushape}
	switch ty.dtype {
	case "F32":
		t.DType, t.Data = "BF16", fromFloat32(raw)
	case "F16":
		t.DType, t.Data = "BF16", fromFloat16(raw)
	default:
		t.Data = append([]byte(nil), raw...)
	}
	r.out = append(r.out, t)
	return nil
}

// unique makes tensor names distinct.
func (r *onnxReader) unique(name string) string {
	name = strings.TrimSpace(name)
	if name == "" {
		name = "tensor"
	}
	k := r.seen[name]
	r.seen[name] = k + 1
	if k == 0 {
		return name
	}
	return fmt.Sprintf("%s.%d", name, k)
}

// typedData packs the typed repeated fields of a TensorProto (used when
// it has no raw_data) into little-endian bytes.
func typedData(fs []field, dt, n uint64) ([]byte, error) {
	var out []byte
	switch dt {
	case 1: // float_data, packed fixed32
		for _, f := range fs {
			if f.num == tensorFloatData {
				if f.wire == 2 {
					out = append(out, f.b...)
				} else {
					out = binary.LittleEndian.AppendUint32(out, uint32(f.v))
				}
			}
		}
	case 11: // double_data, packed fixed64
		for _, f := range fs {
			if f.num == tensorDoubleData {
				if f.wire == 2 {
					out = append(out, f.b...)
				} else {
					out = binary.LittleEndian.AppendUint64(out, f.v)
				}
			}
		}
	case 7, 13: // int64_data (uint64_data has its own field; rare)
		vs, err := varints(fs, tensorInt64Data)
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			out = binary.LittleEndian.AppendUint64(out, v)
		}
	case 2, 3, 4, 5, 6, 9, 10, 16: // int32_data holds every narrower type
		vs, err := varints(fs, tensorInt32Data)
		if err != nil {
			return nil, err
		}
		size := onnxTypes[dt].size
		for _, v := range vs {
			var b [4]byte
			binary.LittleEndian.PutUint32(b[:], uint32(v))
			out = append(out, b[:size]...)
		}
	default:
		return nil, fmt.Errorf("data type %d without raw_data is not supported", dt)
	}
	return out, nil
}
