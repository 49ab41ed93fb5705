// Package convert turns trained weights shipped in other formats into
// BF16 safetensors checkpoints for tests: TF.js graph or layers models
// (model.json or a bare weights manifest, with its binary shards, float32,
// float16 and uint8/uint16-quantized weights) and ONNX models (graph
// initializers and Constant nodes, subgraphs included). FP32 and FP16
// tensors become BF16 by round-to-nearest-even; other dtypes are kept.
// It uses the standard library only.
package convert
