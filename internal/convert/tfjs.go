package convert

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// tfjsWeight is one entry of a TF.js weights manifest.
type tfjsWeight struct {
	Name         string  `json:"name"`
	Shape        []int64 `json:"shape"`
	DType        string  `json:"dtype"`
	Quantization *struct {
		DType string   `json:"dtype"`
		Scale *float64 `json:"scale"`
		Min   *float64 `json:"min"`
	} `json:"quantization"`
}

type tfjsGroup struct {
	Paths   []string     `json:"paths"`
	Weights []tfjsWeight `json:"weights"`
}

// ReadTFJS reads a TF.js model: path is a model.json (with a
// weightsManifest) or a bare weights manifest (a JSON array of groups, as
// face-api ships), and the shards it names are read from its directory.
// Quantized weights are dequantized as TF.js does (value * scale + min,
// computed in float64 and stored as float32), then rounded to BF16.
func ReadTFJS(path string) ([]Tensor, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var groups []tfjsGroup
	if len(b) > 0 && firstNonSpace(b) == '[' {
		err = json.Unmarshal(b, &groups)
	} else {
		var m struct {
			WeightsManifest []tfjsGroup `json:"weightsManifest"`
		}
		err = json.Unmarshal(b, &m)
		groups = m.WeightsManifest
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return readGroups(path, groups, func(p string) ([]byte, error) {
		return os.ReadFile(filepath.Join(filepath.Dir(path), p))
	})
}

// readGroups converts the weights of a manifest's groups, reading each
// group's shards with load.
func readGroups(path string, groups []tfjsGroup, load func(string) ([]byte, error)) ([]Tensor, error) {
	if len(groups) == 0 {
		return nil, fmt.Errorf("%s: no weights manifest", path)
	}
	var out []Tensor
	for _, g := range groups {
		var data []byte
		for _, p := range g.Paths {
			shard, err := load(p)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			data = append(data, shard...)
		}
		for _, w := range g.Weights {
			t, n, err := tfjsTensor(w, data)
			if err != nil {
				return nil, fmt.Errorf("%s: weight %q: %w", path, w.Name, err)
			}
			out = append(out, t)
			data = data[n:]
		}
		if len(data) != 0 {
			return nil, fmt.Errorf("%s: %d bytes left after the group's weights", path, len(data))
		}
	}
	return out, nil
}

// tfjsTensor converts one weight from the start of data and returns how
// many bytes it took.
func tfjsTensor(w tfjsWeight, data []byte) (Tensor, int, error) {
	n, shape, err := elements(w.Shape)
	if err != nil {
		return Tensor{}, 0, err
	}
	t := Tensor{Name: w.Name, Shape: shape}
	stored := w.DType
	if q := w.Quantization; q != nil {
		stored = q.DType
	}
	size := map[string]uint64{"float32": 4, "int32": 4, "bool": 1, "uint8": 1, "uint16": 2, "float16": 2}[stored]
	if size == 0 {
		return t, 0, fmt.Errorf("stored dtype %q is not supported", stored)
	}
	if n > uint64(len(data))/size {
		return t, 0, fmt.Errorf("needs %d bytes, the shards have %d left", n*size, len(data))
	}
	raw := data[:n*size]
	q := w.Quantization
	switch {
	case q == nil && w.DType == "float32":
		t.DType, t.Data = "BF16", fromFloat32(raw)
	case q == nil && w.DType == "int32":
		t.DType, t.Data = "I32", append([]byte(nil), raw...)
	case q == nil && w.DType == "bool":
		t.DType, t.Data = "BOOL", append([]byte(nil), raw...)
	case q.DType == "float16":
		t.DType, t.Data = "BF16", fromFloat16(raw)
	case (q.DType == "uint8" || q.DType == "uint16") && q.Scale != nil && q.Min != nil:
		vals := make([]byte, 4*n)
		for i := range n {
			var v uint64
			if q.DType == "uint8" {
				v = uint64(raw[i])
			} else {
				v = uint64(binary.LittleEndian.Uint16(raw[2*i:]))
			}
			x := float64(v)*(*q.Scale) + *q.Min
			if w.DType == "int32" {
				binary.LittleEndian.PutUint32(vals[4*i:], uint32(int32(math.Round(x))))
			} else {
				binary.LittleEndian.PutUint32(vals[4*i:], math.Float32bits(float32(x)))
			}
		}
		if w.DType == "int32" {
			t.DType, t.Data = "I32", vals
		} else {
			t.DType, t.Data = "BF16", fromFloat32(vals)
		}
	default:
		return t, 0, fmt.Errorf("quantization %+v of %s is not supported", *q, w.DType)
	}
	return t, int(n * size), nil
}

func firstNonSpace(b []byte) byte {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
		default:
			return c
		}
	}
	return 0
}
