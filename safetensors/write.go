package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
)

// TensorSpec describes a tensor to lay out in a new file.
type TensorSpec struct {
	Name  string
	DType string
	Shape []uint64
	Size  uint64 // bytes; must match the shape for known dtypes
}

// EncodeHeader lays the tensors out back to back in the given order and
// returns the 8-byte length plus JSON header, padded with spaces to a
// multiple of 8 bytes as the reference implementation does, and each
// tensor's absolute begin offset.
func EncodeHeader(metadata map[string]string, specs []TensorSpec) ([]byte, []uint64, error) {
	var js bytes.Buffer
	js.WriteByte('{')
	first := true
	sep := func() {
		if !first {
			js.WriteByte(',')
		}
		first = false
	}
	if len(metadata) > 0 {
		sep()
		m, err := json.Marshal(metadata)
		if err != nil {
			return nil, nil, err
		}
		js.WriteString(`"__metadata__":`)
		js.Write(m)
	}
	var off uint64
	rel := make([]uint64, len(specs))
	for i, s := range specs {
		n, known, err := TensorBytes(s.DType, s.Shape)
		if err != nil {
			return nil, nil, fmt.Errorf("safetensors: tensor %q: %v", s.Name, err)
		}
		if known && n != s.Size {
			return nil, nil, fmt.Errorf("safetensors: tensor %q: shape %v of %s is %d bytes, not %d", s.Name, s.Shape, s.DType, n, s.Size)
		}
		sep()
		name, _ := json.Marshal(s.Name)
		dt, _ := json.Marshal(s.DType)
		shape := s.Shape
		if shape == nil {
			shape = []uint64{}
		}
		sh, _ := json.Marshal(shape)
		fmt.Fprintf(&js, `%s:{"dtype":%s,"shape":%s,"data_offsets":[%s,%s]}`, name, dt, sh,
			strconv.FormatUint(off, 10), strconv.FormatUint(off+s.Size, 10))
		rel[i] = off
		off += s.Size
	}
	js.WriteByte('}')
	for js.Len()%8 != 0 {
		js.WriteByte(' ')
	}
	out := make([]byte, 8, 8+js.Len())
	binary.LittleEndian.PutUint64(out, uint64(js.Len()))
	out = append(out, js.Bytes()...)
	for i := range rel {
		rel[i] += uint64(len(out))
	}
	return out, rel, nil
}
