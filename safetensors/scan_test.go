package safetensors

import (
	"fmt"
	"maps"
	"reflect"
	"testing"
	"unicode/utf8"
)

// FuzzScanHeader holds Read's fast path to its general one: whatever
// scanHeader accepts, objectFields and parseEntry accept too, with the same
// tensors and metadata.
func FuzzScanHeader(f *testing.F) {
	f.Add([]byte(`{"__metadata__":{"format":"pt","a\n":"\u00e9"},"b":{"dtype":"BF16","shape":[3,5],"data_offsets":[0,30]},"a":{"shape":[],"data_offsets":[30,32],"dtype":"F16"}}`))
	f.Add([]byte(` {"x":{"dtype":"U8","shape":[0],"data_offsets":[0,0]} , "y" : { "dtype" : "Q3_K" , "shape" : [ 18446744073709551615 ] , "data_offsets" : [ 1 , 0 ] } } ` + "\n"))
	f.Add([]byte(`{"__metadata__":null}`))
	f.Add([]byte(`{}`))
	f.Add(benchHeader(3)[8:])
	f.Fuzz(func(t *testing.T, b []byte) {
		if !utf8.Valid(b) {
			return
		}
		if _, _, ok := loneSurrogate(b); !ok {
			return
		}
		ts, meta, ok := scanHeader(b)
		if !ok {
			return
		}
		fields, err := objectFields(b, false)
		if err != nil {
			t.Fatalf("%s: scanned, but the general path says %v", b, err)
		}
		var want []Tensor
		var wantMeta map[string]string
		for _, kv := range fields {
			if kv.key == "__metadata__" {
				if wantMeta, err = parseMetadata(kv.value); err != nil {
					t.Fatalf("%s: scanned, but the general path says %v", b, err)
				}
				continue
			}
			e, err := parseEntry(kv.value)
			if err != nil {
				t.Fatalf("%s: scanned, but the general path says %v", b, err)
			}
			want = append(want, Tensor{Name: kv.key, DType: e.dtype, Shape: e.shape, Begin: e.offsets[0], End: e.offsets[1]})
		}
		if len(ts) != len(want) || (len(ts) > 0 && !reflect.DeepEqual(ts, want)) {
			t.Fatalf("%s: scanned %+v, the general path reads %+v", b, ts, want)
		}
		if (meta == nil) != (wantMeta == nil) || !maps.Equal(meta, wantMeta) {
			t.Fatalf("%s: scanned metadata %q, the general path reads %q", b, meta, wantMeta)
		}
	})
}

func TestRepeatedName(t *testing.T) {
	ts := make([]Tensor, 5000)
	for k := range ts {
		ts[k].Name = fmt.Sprint(len(ts) - k) // unsorted, distinct
	}
	if repeatedName(ts) {
		t.Fatal("distinct names reported repeated")
	}
	ts = append(ts, Tensor{Name: "2500"})
	if !repeatedName(ts) {
		t.Fatal("a repeated name not found")
	}
}
