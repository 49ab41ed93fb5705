// Package gpu decodes fixed-codec payloads on an NVIDIA GPU: in place (the
// payload at the start of the tensor's destination range, overwritten by
// the decoded tensor) or out of place. The kernel is decode.cu, compiled by
// `make kernels` into decode.fatbin, which is committed and embedded, so
// building this package needs no CUDA toolkit. Without a driver, NewDecoder
// returns an error matching cuda.ErrNoDriver.
//
// Gemv (gemv.cu, gemv.fatbin) multiplies matrices held as fixed payloads
// with batches of vectors, decoding in registers on the way to the
// tensor cores (docs/DESIGN.md 3.4).
package gpu
