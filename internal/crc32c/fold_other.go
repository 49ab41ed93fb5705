//go:build !amd64 || noasm

package crc32c

// canFold: no folding on this processor or build.
const canFold = false

func foldRaw(r uint32, p []byte) uint32 { panic("crc32c: no folding on this processor") }
