// Package cuda binds the CUDA driver API (libcuda.so.1) at run time through
// purego, without cgo: the module builds with CGO_ENABLED=0 and no CUDA
// toolkit, and one binary runs on hosts with and without a GPU.
//
// Three layers, as in NVIDIA's go-nvml: Open loads the library and
// resolves every symbol into a Library value (no package globals, no init
// side effects; a missing library or GPU is ErrNoDriver); the raw calls are
// fields of that value; Context gives the idiomatic API.
//
// A CUDA context is current per OS thread, and goroutines move between
// threads. Every Context method therefore locks its goroutine to its
// thread and makes the primary context current for the duration of the
// call, so callers never manage thread state.
package cuda
