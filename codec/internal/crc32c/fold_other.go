//go:build !amd64 || noasm

package crc32c

// canFold and canFoldWide: no folding on this processor or build.
const (
	canFold     = false
	canFoldWide = false
)

func foldRaw(r uint32, p []byte, wide bool) uint32 { panic("crc32c: no folding on this processor") }
