// Package synth makes realistic synthetic BF16 data and safetensors
// checkpoints for tests, benchmarks and the demo: N(0, sigma) weights with
// per-row scales, norms near 1.0, and the odd tensors real checkpoints have.
package synth
