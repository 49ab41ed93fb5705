package safetensors

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
)

// benchHeader builds a file of n small BF16 tensors with names in the
// order a model lists them (not sorted), like the shards of mixtures of
// experts with very many tensors.
func benchHeader(n int) []byte {
	var js strings.Builder
	js.WriteString(`{"__metadata__":{"format":"pt"}`)
	parts := []string{"gate_proj.weight_scale", "gate_proj.input_scale", "gate_proj.bias", "up_proj.weight_scale", "down_proj.weight_zero_point"}
	var pos uint64
	for i := range n {
		dim := uint64(1 + i%61)
		fmt.Fprintf(&js, `,"model.layers.%d.mlp.experts.%d.%s":{"dtype":"BF16","shape":[%d],"data_offsets":[%d,%d]}`,
			i/5000, i/5%1000, parts[i%5], dim, pos, pos+2*dim)
		pos += 2 * dim
	}
	js.WriteString("}")
	return file(js.String(), int(pos))
}

func BenchmarkRead(b *testing.B) {
	for _, n := range []int{100_000} {
		data := benchHeader(n)
		b.Run(fmt.Sprintf("tensors=%d", n), func(b *testing.B) {
			b.SetBytes(8 + int64(binary.LittleEndian.Uint64(data))) // the header is what Read reads
			b.ReportAllocs()
			for b.Loop() {
				f, err := Read(bytes.NewReader(data), int64(len(data)), "bench")
				if err != nil || len(f.Tensors) != n {
					b.Fatal(err)
				}
			}
		})
	}
}
