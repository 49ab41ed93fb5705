// Package scatter defines the table a packed staging buffer starts with:
// one 64-byte entry per tensor, saying where its stored bytes lie in the
// buffer, how many bytes they decode or copy to, where in device memory
// they go, and which units of work (payload chunks, raw 32 KiB pieces)
// are its. Engines and transports build tables here; the scatter kernel
// (package gpu) and the host engine read them. Every entry is checked
// before a table is written, so a kernel reading one needs to check only
// what the buffer's bytes may have changed since.
//
// An entry, little-endian:
//
//	[0, 8)   destination address
//	[8, 16)  offset of the stored bytes in the buffer (16-aligned, after the table)
//	[16, 24) stored bytes (0 for an empty payload)
//	[24, 32) bytes written at the destination
//	[32, 36) payload: chunks per group       (0 for raw bytes)
//	[36, 40) payload: offset of its chunk data
//	[40, 56) payload: the 16-entry exponent codebook
//	[56, 60) first unit of work of the item
//	[60, 64) units of work of the item
package scatter
