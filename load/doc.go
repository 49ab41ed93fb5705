// Package load assembles and runs the load of a cached checkpoint onto
// a device: it resolves the options and their defaults, plans the pinned
// staging, builds the transports (Transports), lays the tensors out in a
// weight arena, faults them in layer group by layer group a few groups
// ahead as a loader would, checks what arrived and reports it. Every
// front end calls it: `splitzip load` and `splitzip bench load` (through
// internal/loadbench, which only repeats and compares loads), the C ABI
// and Python (package loader, uploads into ranges the caller owns, over
// Transports) and the load onto several GPUs (Devices). Package transport
// holds the transports; this package puts them together.
package load
