package shardcache

// Index versions 4 and 5: the index as a compact binary table. Versions 1
// to 3 were JSON, about 430 bytes a tensor beyond its name (field names,
// keys in hex, a reason sentence and codec statistics repeated per
// tensor); a checkpoint of 760,000 small tensors had a 324 MB index that
// took longer to write and parse than its tensors took to compress.
// Version 4 keeps everything the JSON held, so the in-memory Index is the
// same whatever the version read, in about 60 bytes a tensor beyond its
// name: keys as 32 raw bytes written once (an object used by one tensor
// inside that tensor's record, others in a table that records name by
// position), repeated strings (dtypes, reasons, fields, roots) once in a
// table, numbers as varints, floats without their trailing zero bytes,
// and offsets, sizes and statistics left out where they follow from the
// rest (derivedValues and below).
//
// Version 5 writes the same records, split in two: the body holds what a
// reader needs to find and check a payload (kinds, sizes, keys, CRC-32Cs,
// packs and offsets, tensors' names, shapes and places), a section after
// it the statistics (ObjectStats, TensorStats) with its own length and
// hash, its records in the body's order. Opening a cache hashes and
// parses the body only and keeps the section's bytes; Index.LoadStats
// decodes them for inspect and before a writer changes the index. For a
// shard of small tensors left raw the statistics (a reason, two floats)
// are most of a tensor's record.
//
// index_encode.go writes version 5, index_decode.go reads versions 4 and
// 5, index_stats.go decodes version 5's statistics; docs/FORMAT.md
// sections 5.5 and 5.6 have the layouts.

import (
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
	"os"
	"path/filepath"
	"strings"
)

// Layout constants of a binary index file (all integers little-endian).
const (
	// indexMagic starts a binary index: its first line reads as text.
	indexMagic = "splitzip-index\n\x00"
	// indexHeaderSize is the fixed header: magic (16), version (u32),
	// flags (u32), body length (u64), BLAKE3-256 of the body (32).
	indexHeaderSize = 64
	// binaryIndexVersion is the first index version written in binary.
	binaryIndexVersion = 4
	// maxJSONIndexVersion is the last index version written as JSON.
	maxJSONIndexVersion = 3
	// statsIndexVersion is the first index version whose statistics are
	// in a section of their own.
	statsIndexVersion = 5
	// indexHasStats, a flag of a version 5 header, says the statistics
	// section follows the body; a version 4 header has no flags.
	indexHasStats = 1
	// statsHeaderSize is the statistics section's head: the length of
	// the rest of the section (u64) and its BLAKE3-256 (32).
	statsHeaderSize = 40
)

// Object kinds and tensor storage in a binary index, one byte each.
var (
	kindCodes   = []string{KindRaw, KindFixed, KindEntropy, KindPack}
	storedCodes = []string{StoredRaw, StoredFixed, StoredEntropy}
)

// Bits of an object record's field mask: which optional fields follow
// its size, in this order, the ones a fixed-codec payload has in the low
// seven so its mask is one byte. An absent field is zero, or the value it
// derives from the others (derivedRawSize and the derived* functions).
const (
	objRawSize    = 1 << iota // raw_size differs from the derived one
	objCodebook               // a codebook (position in the codebook table)
	objEscapes                //
	objChunks                 //
	objChecksum               // u32
	objEntropy                // float
	objInPlace                // flag only
	objValues                 // values differs from the derived one
	objRawChunks              //
	objCoverage               // float, differs from the derived one
	objEscapeRate             // float, differs from the derived one
	objField                  // string
	objPack                   // pack (a key reference) and offset
	objKnown      = objPack<<1 - 1
)

// Bits of a tensor record's flags; bits 0-1 are its storage (storedCodes).
// The ones a tensor left raw or one with its payload inline uses are
// below bit 7, so their flags are one byte.
const (
	tenReason     = 1 << (iota + 2) // reason (string)
	tenCoverage                     // float
	tenEntropy                      // float
	tenObject                       // the key's object follows, inline: it is used by this tensor only
	tenCopyStored                   //
	tenOffset                       // offset follows; else the tensor starts where the one before ended (the first: where the header ends)
	tenSize                         // size follows; else it is the shape's product times the dtype's size
	tenKnown      = tenSize<<1 - 1
)

// The fields of the records above that are statistics. Version 5 writes
// an object's and a tensor's record in two parts: the other fields in the
// body, with the mask or flags of those (objBody, tenBody), and these in
// the statistics section, with the mask or flags of these; each part
// keeps version 4's bits and order.
const (
	objStats = objCodebook | objEscapes | objChunks | objEntropy | objInPlace | objValues | objRawChunks | objCoverage | objEscapeRate | objField
	objBody  = objKnown &^ objStats // raw size, CRC-32C, pack
	tenStats = tenReason | tenCoverage | tenEntropy
	tenBody  = tenKnown &^ tenStats
)

// Key references: 0 is no key, 1 a key whose 32 bytes follow, 2+i the key
// of the object at position i of the object table.
const (
	keyNone   = 0
	keyInline = 1
	keyObject = 2
)

// dtypeSizes are the bytes a value of each safetensors dtype; a tensor of
// another dtype records its size.
var dtypeSizes = map[string]uint64{
	"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
	"U16": 2, "I16": 2, "F16": 2, "BF16": 2,
	"U32": 4, "I32": 4, "F32": 4,
	"U64": 8, "I64": 8, "F64": 8,
}

// shapeSize returns the bytes of a tensor of dtype and shape, and false
// when the dtype is unknown or the product overflows.
func shapeSize(dtype string, shape []uint64) (uint64, bool) {
	n, ok := dtypeSizes[dtype]
	for _, d := range shape {
		hi, lo := bits.Mul64(n, d)
		n, ok = lo, ok && hi == 0
	}
	return n, ok
}

// The values an object record leaves out when they are what compress
// records: a fixed-codec payload's values are half its raw bytes, its
// escape rate escapes/values and its coverage (values-escapes)/values;
// the raw size of an object inside a tensor record is the tensor's size,
// of one in the object table its stored size.
func derivedValues(o *Object) uint64 {
	if o.Kind != KindFixed {
		return 0
	}
	return o.RawSize / 2
}

func derivedEscapeRate(o *Object) float64 {
	if o.Kind != KindFixed {
		return 0
	}
	return float64(o.Escapes) / float64(max(o.Values, 1))
}

func derivedCoverage(o *Object) float64 {
	if o.Kind != KindFixed || o.Escapes > o.Values {
		return 0
	}
	if o.Values == 0 {
		return 1
	}
	return float64(o.Values-o.Escapes) / float64(o.Values)
}

// IndexError reports an index file that is not valid: the file, where in
// it reading stopped (-1 when the whole file is at fault), and what was
// wrong. It wraps ErrIndexCorrupt.
type IndexError struct {
	File   string
	Offset int64
	Reason string
}

func (e *IndexError) Error() string {
	if e.Offset < 0 {
		return fmt.Sprintf("%s: %v: %s", e.File, ErrIndexCorrupt, e.Reason)
	}
	return fmt.Sprintf("%s: %v at byte %d: %s", e.File, ErrIndexCorrupt, e.Offset, e.Reason)
}

// Unwrap returns ErrIndexCorrupt.
func (e *IndexError) Unwrap() error { return ErrIndexCorrupt }

// IndexFileVersion returns the version of the index of the cache in dir
// as it is on disk (a cache written now has IndexVersion), without
// checking the rest of the file.
func IndexFileVersion(dir string) (int, error) {
	path := filepath.Join(dir, IndexName)
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	head := make([]byte, 4096)
	n, err := io.ReadFull(f, head)
	if err != nil && err != io.ErrUnexpectedEOF {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	head = head[:n]
	if strings.HasPrefix(string(head), indexMagic) {
		if len(head) < indexHeaderSize {
			return 0, &IndexError{path, -1, fmt.Sprintf("%d bytes, shorter than the %d-byte header", len(head), indexHeaderSize)}
		}
		return int(binary.LittleEndian.Uint32(head[16:])), nil
	}
	// A JSON envelope names its version before its body.
	const field = `"version":`
	i := strings.Index(string(head), field)
	if i < 0 {
		return 0, &IndexError{path, -1, "no version in the first 4 KiB"}
	}
	var v int
	if _, err := fmt.Sscan(strings.TrimLeft(string(head[i+len(field):]), " "), &v); err != nil {
		return 0, &IndexError{path, int64(i), "the version is not a number"}
	}
	return v, nil
}
