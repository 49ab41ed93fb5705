// Package transport moves tensors from storage into their ranges of a
// weight arena (package vmm) on a device (an engine.Engine: CUDA, or host memory
// for tests and --device cpu).
//
//   - Raw reads each tensor's bytes from its safetensors shard into a ring
//     of pinned buffers with several reader goroutines and copies them to
//     the device; a buffer is reused only after the copy that read it has
//     completed.
//   - Payloads wraps another transport: a tensor with a payload in the
//     cache is read into pinned memory, its checksum verified, copied to
//     the start of its range and decoded there in place, all on one stream,
//     with an event after the decode as its fence. Others are delegated.
//   - Store faults bindings in through a transport, once however many
//     goroutines ask, and tracks their residency.
package transport
