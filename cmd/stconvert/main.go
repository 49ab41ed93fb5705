// Command stconvert converts trained weights shipped as TF.js or ONNX
// models into one BF16 safetensors checkpoint (shards and
// model.safetensors.index.json), for splitzip's real-weights tests:
//
//	stconvert -o DIR [-shard BYTES] FORMAT:PATH...
//
// FORMAT is tfjs (a model.json or a weights manifest, with its shards
// beside it), tfjs-bundle (a model.min.js with NAME.min.js shards, as
// nsfwjs ships them) or onnx. Each input's tensors are prefixed with the input's
// file name, so several models can share one checkpoint. FP32 and FP16
// tensors become BF16 by round-to-nearest-even; other dtypes are kept.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/splitzip/splitzip/internal/convert"
)

func main() {
	out := flag.String("o", "", "output directory")
	shard := flag.Uint64("shard", 8<<20, "shard size in bytes")
	flag.Parse()
	if *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: stconvert -o DIR [-shard BYTES] tfjs:PATH|onnx:PATH...")
		os.Exit(2)
	}
	var all []convert.Tensor
	for _, arg := range flag.Args() {
		format, path, ok := strings.Cut(arg, ":")
		var ts []convert.Tensor
		var err error
		switch {
		case ok && format == "tfjs":
			ts, err = convert.ReadTFJS(path)
		case ok && format == "tfjs-bundle":
			ts, err = convert.ReadTFJSBundle(path)
		case ok && format == "onnx":
			ts, err = convert.ReadONNX(path)
		default:
			fmt.Fprintf(os.Stderr, "stconvert: %q: want tfjs:PATH or onnx:PATH\n", arg)
			os.Exit(2)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "stconvert:", err)
			os.Exit(1)
		}
		prefix := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)), ".min")
		if prefix == "model" { // model.json, model.min.js: name it by its directory
			prefix = filepath.Base(filepath.Dir(path))
		}
		prefix += "/"
		for i := range ts {
			ts[i].Name = prefix + ts[i].Name
		}
		all = append(all, ts...)
	}
	names, err := convert.WriteCheckpoint(*out, all, *shard, map[string]string{"format": "pt", "converted_by": "splitzip stconvert"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "stconvert:", err)
		os.Exit(1)
	}
	var params uint64
	for _, t := range all {
		n := uint64(1)
		for _, d := range t.Shape {
			n *= d
		}
		params += n
	}
	fmt.Printf("%s: %d tensors, %d parameters, %d shards\n", *out, len(all), params, len(names))
}
