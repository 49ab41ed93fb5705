// Package engine is the device side of the load runtime: the Engine
// contract (pinned host memory, device memory with virtual address
// ranges, streams that run copies, decodes and scatters in order, events),
// the Timer contract for device busy times, and their busy-time
// arithmetic. Implementations: cudaengine (an NVIDIA GPU through the CUDA
// driver) and hostengine (host memory and the Go reference decoder, for
// tests and machines without a GPU). The table a packed staging buffer
// starts with is package scatter's, which engines, transports and the
// scatter kernel follow; neither engine nor the host engine links the
// kernels.
package engine
