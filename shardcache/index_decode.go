package shardcache

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"lukechampine.com/blake3"
)

// unmarshalBinaryIndex decodes a version 4 or 5 index file (b starts
// with indexMagic) named name in errors; of version 5, it checks and
// decodes the body only and keeps the statistics section for LoadStats.
// The caller checks the references.
func unmarshalBinaryIndex(b []byte, name string) (*Index, error) {
	if len(b) < indexHeaderSize {
		return nil, &IndexError{name, -1, fmt.Sprintf("%d bytes, shorter than the %d-byte header", len(b), indexHeaderSize)}
	}
	v := binary.LittleEndian.Uint32(b[16:])
	switch {
	case v > IndexVersion:
		return nil, fmt.Errorf("%s: %w: version %d; this build reads versions %d to %d", name, ErrVersion, v, minIndexVersion, IndexVersion)
	case v < binaryIndexVersion:
		return nil, &IndexError{name, 16, fmt.Sprintf("version %d in a binary index; binary indexes begin at version %d", v, binaryIndexVersion)}
	}
	known := uint32(0)
	if v >= statsIndexVersion {
		known = indexHasStats
	}
	flags := binary.LittleEndian.Uint32(b[20:])
	if flags&^known != 0 {
		return nil, &IndexError{name, 20, fmt.Sprintf("flags %#x; version %d knows %#x", flags, v, known)}
	}
	// The body, then (version 5, when the flags say so) the statistics
	// section: its length, its hash and itself, to the end of the file.
	n := binary.LittleEndian.Uint64(b[24:])
	if n > uint64(len(b)-indexHeaderSize) || v < statsIndexVersion && n != uint64(len(b)-indexHeaderSize) {
		return nil, &IndexError{name, 24, fmt.Sprintf("the header gives a body of %d bytes, the file holds %d after the header", n, len(b)-indexHeaderSize)}
	}
	end := indexHeaderSize + int(n)
	after := b[end:]
	var stats *statsSection
	switch {
	case flags&indexHasStats == 0 && len(after) > 0:
		return nil, &IndexError{name, int64(end), fmt.Sprintf("%d bytes after the body, and the flags announce no statistics section", len(after))}
	case flags&indexHasStats == 0:
	case len(after) < statsHeaderSize:
		return nil, &IndexError{name, int64(end), fmt.Sprintf("the flags announce a statistics section; the file ends %d bytes after the body, before the section's %d-byte head", len(after), statsHeaderSize)}
	default:
		if m := binary.LittleEndian.Uint64(after); m != uint64(len(after)-statsHeaderSize) {
			return nil, &IndexError{name, int64(end), fmt.Sprintf("the statistics section gives %d bytes, the file holds %d after its head", m, len(after)-statsHeaderSize)}
		}
		// A copy, so that the file's buffer is not kept for them.
		stats = &statsSection{file: name, offset: int64(end + statsHeaderSize), sum: [32]byte(after[8:statsHeaderSize]), b: bytes.Clone(after[statsHeaderSize:])}
	}
	if sum := blake3.Sum256(b[indexHeaderSize:end]); string(sum[:]) != string(b[32:64]) {
		return nil, &IndexError{name, -1, "body checksum mismatch"}
	}
	d := &indexDecoder{file: name, base: indexHeaderSize, b: b[indexHeaderSize:end], version: v}
	ix := d.index()
	if d.err == nil && d.left() != 0 {
		d.fail("%d bytes after the last source", d.left())
	}
	if d.err != nil {
		return nil, d.err
	}
	if stats != nil {
		stats.table, stats.inline, stats.tensors = d.table, d.inline, d.tensors
		ix.stats = stats
	}
	return ix, nil
}

// Smallest encodings, which bound the counts read before allocating.
const (
	minObjectBytes = 32 + 3 // key, then kind, mask, size
	minSourceBytes = 1 + 1 + 2 + 8 + 1
	minShardBytes  = 1 + 1 + 2 + 1 + 3 + 1 + 1
	minTensorBytes = 1 + 1 + 1 + 1 + 1 // name, flags, dtype, rank, key
	minRegionBytes = 3
)

// indexDecoder reads a binary index body, or a version 5 statistics
// section. Errors stick: after the first, every read returns zero and the
// first error is reported.
type indexDecoder struct {
	file    string
	base    int64 // b's offset in the file
	b       []byte
	off     int
	err     error
	version uint32
	strs    []string
	books   [][]int
	keys    []Key    // the object table's
	table   []Object // the object table's records
	ix      *Index
	// inline has bit i set when the body's i-th tensor record holds
	// its object (version 5: the statistics section's records follow
	// the body's); tensors counts them.
	inline  []uint64
	tensors int
}

func (d *indexDecoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = &IndexError{d.file, d.base + int64(d.off), fmt.Sprintf(format, args...)}
	}
}

func (d *indexDecoder) left() int { return len(d.b) - d.off }

func (d *indexDecoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail("%s: not a valid number", what)
		return 0
	}
	d.off += n
	return v
}

func (d *indexDecoder) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.fail("%s: not a valid number", what)
		return 0
	}
	d.off += n
	return v
}

// count reads a number of records each at least min bytes long, and
// refuses one the bytes left cannot hold, before anything is allocated.
func (d *indexDecoder) count(what string, min int) int {
	n := d.uvarint(what)
	if d.err == nil && n > uint64(d.left()/min) {
		d.fail("%d %s, more than the %d bytes left can hold", n, what, d.left())
	}
	if d.err != nil {
		return 0
	}
	return int(n)
}

func (d *indexDecoder) bytes(n uint64, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(d.left()) {
		d.fail("%s of %d bytes, more than the %d bytes left", what, n, d.left())
		return nil
	}
	b := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return b
}

func (d *indexDecoder) byte1(what string) byte {
	b := d.bytes(1, what)
	if b == nil {
		return 0
	}
	return b[0]
}

func (d *indexDecoder) str(what string) string {
	i := d.uvarint(what)
	if d.err == nil && i >= uint64(len(d.strs)) {
		d.fail("%s: string %d of a table of %d", what, i, len(d.strs))
	}
	if d.err != nil {
		return ""
	}
	return d.strs[i]
}

func (d *indexDecoder) sum(what string) Key {
	b := d.bytes(32, what)
	if b == nil {
		return ""
	}
	return KeyFromSum([32]byte(b))
}

func (d *indexDecoder) key(what string) Key {
	r := d.uvarint(what)
	switch {
	case d.err != nil || r == keyNone:
		return ""
	case r == keyInline:
		return d.sum(what)
	case r-keyObject < uint64(len(d.keys)):
		return d.keys[r-keyObject]
	}
	d.fail("%s: object %d of a table of %d", what, r-keyObject, len(d.keys))
	return ""
}

func (d *indexDecoder) float(what string) float64 {
	n := d.byte1(what)
	if d.err == nil && n > 8 {
		d.fail("%s: a float of %d bytes", what, n)
	}
	b := d.bytes(uint64(n), what)
	var v uint64
	for i, c := range b {
		v |= uint64(c) << (56 - 8*i)
	}
	if d.err == nil && n > 0 && b[n-1] == 0 {
		d.fail("%s: a float with a trailing zero byte", what) // one value, one encoding
	}
	return math.Float64frombits(v)
}

func (d *indexDecoder) time(what string) time.Time {
	s := d.varint(what)
	ns := d.uvarint(what)
	if d.err == nil && ns >= 1e9 {
		d.fail("%s: %d nanoseconds", what, ns)
	}
	if d.err != nil {
		return time.Time{}
	}
	return time.Unix(s, int64(ns)).UTC()
}

func (d *indexDecoder) index() *Index {
	d.strings()
	if d.version < statsIndexVersion {
		d.codebooks()
	}
	n := d.count("objects", minObjectBytes)
	d.keys = make([]Key, n)
	for i := range d.keys {
		d.keys[i] = d.sum("object key")
		if d.err == nil && i > 0 && d.keys[i] <= d.keys[i-1] {
			d.fail("object keys out of order")
		}
	}
	d.table = make([]Object, n)
	d.ix = &Index{Objects: make(map[Key]*Object, n)}
	for i := range d.table {
		d.object(&d.table[i], nil)
		d.ix.Objects[d.keys[i]] = &d.table[i]
	}
	d.ix.Sources = make([]Source, d.count("sources", minSourceBytes))
	for i := range d.ix.Sources {
		d.source(&d.ix.Sources[i])
	}
	return d.ix
}

// strings reads a string table.
func (d *indexDecoder) strings() {
	d.strs = make([]string, d.count("strings", 1))
	for i := range d.strs {
		d.strs[i] = string(d.bytes(d.uvarint("string length"), "string"))
	}
}

// codebooks reads a codebook table.
func (d *indexDecoder) codebooks() {
	d.books = make([][]int, d.count("codebooks", 1))
	for i := range d.books {
		cb := make([]int, d.count("codebook entries", 1))
		for j := range cb {
			v := d.varint("codebook entry")
			if d.err == nil && (v < math.MinInt32 || v > math.MaxInt32) {
				d.fail("codebook entry %d", v)
			}
			cb[j] = int(v)
		}
		d.books[i] = cb
	}
}

// object reads an object record (of version 5, its body part);
// tensorSize, for one inside a tensor record, is the raw size it leaves
// out (else its stored size is).
func (d *indexDecoder) object(o *Object, tensorSize *uint64) {
	kind := d.byte1("object kind")
	if d.err == nil && int(kind) >= len(kindCodes) {
		d.fail("object kind %d", kind)
	}
	known := uint64(objKnown)
	if d.version >= statsIndexVersion {
		known = objBody
	}
	mask := d.uvarint("object fields")
	if d.err == nil && mask&^known != 0 {
		d.fail("object fields %#x; version %d knows %#x", mask, d.version, known)
	}
	if d.err != nil {
		return
	}
	o.Kind = kindCodes[kind]
	o.Size = d.uvarint("object size")
	o.RawSize = o.Size
	if tensorSize != nil {
		o.RawSize = *tensorSize
	}
	if mask&objRawSize != 0 {
		o.RawSize = d.uvarint("object raw size")
	}
	if d.version < statsIndexVersion {
		d.statsBeforeChecksum(o, mask)
	}
	if mask&objChecksum != 0 {
		if c := d.bytes(4, "object checksum"); c != nil {
			o.Checksum = binary.LittleEndian.Uint32(c)
		}
	}
	if d.version < statsIndexVersion {
		d.statsAfterChecksum(o, mask)
	}
	if mask&objPack != 0 {
		o.Pack = d.key("object pack")
		o.Offset = d.uvarint("object offset")
	}
}

// objectStats reads the statistics' part of a version 5 object record.
func (d *indexDecoder) objectStats(o *Object) {
	mask := d.uvarint("object statistics")
	if d.err == nil && mask&^objStats != 0 {
		d.fail("object statistics %#x; version %d knows %#x", mask, d.version, objStats)
	}
	if d.err != nil {
		return
	}
	d.statsBeforeChecksum(o, mask)
	d.statsAfterChecksum(o, mask)
}

// statsBeforeChecksum reads the statistics mask names that come before
// the CRC-32C in a version 4 object record: codebook, escapes, chunks.
func (d *indexDecoder) statsBeforeChecksum(o *Object, mask uint64) {
	if mask&objCodebook != 0 {
		i := d.uvarint("codebook")
		if d.err == nil && i >= uint64(len(d.books)) {
			d.fail("codebook %d of a table of %d", i, len(d.books))
		}
		if d.err != nil {
			return
		}
		o.Codebook = d.books[i]
	}
	if mask&objEscapes != 0 {
		o.Escapes = d.uvarint("object escapes")
	}
	if mask&objChunks != 0 {
		o.Chunks = d.uvarint("object chunks")
	}
}

// statsAfterChecksum reads the statistics mask names that come after the
// CRC-32C in a version 4 object record, and derives those it leaves out.
func (d *indexDecoder) statsAfterChecksum(o *Object, mask uint64) {
	if mask&objEntropy != 0 {
		o.Entropy = d.float("object entropy")
	}
	o.InPlace = mask&objInPlace != 0
	o.Values = derivedValues(o)
	if mask&objValues != 0 {
		o.Values = d.uvarint("object values")
	}
	if mask&objRawChunks != 0 {
		o.RawChunks = d.uvarint("object raw chunks")
	}
	o.Coverage = derivedCoverage(o)
	if mask&objCoverage != 0 {
		o.Coverage = d.float("object coverage")
	}
	o.EscapeRate = derivedEscapeRate(o)
	if mask&objEscapeRate != 0 {
		o.EscapeRate = d.float("object escape rate")
	}
	if mask&objField != 0 {
		o.Field = d.str("object field")
	}
}

// tensorStats reads the statistics' part of a version 5 tensor record.
func (d *indexDecoder) tensorStats(t *Tensor) {
	flags := d.uvarint("tensor statistics")
	if d.err == nil && flags&^tenStats != 0 {
		d.fail("tensor %q: statistics %#x; version %d knows %#x", t.Name, flags, d.version, tenStats)
	}
	d.tensorStatsFields(t, flags)
}

// tensorStatsFields reads the statistics a tensor's flags name.
func (d *indexDecoder) tensorStatsFields(t *Tensor, flags uint64) {
	if flags&tenReason != 0 {
		t.Reason = d.str("tensor reason")
	}
	if flags&tenCoverage != 0 {
		t.Coverage = d.float("tensor coverage")
	}
	if flags&tenEntropy != 0 {
		t.Entropy = d.float("tensor entropy")
	}
}

func (d *indexDecoder) source(s *Source) {
	s.Root = d.str("source root")
	switch d.byte1("source index flag") {
	case 0:
	case 1:
		s.Index = &File{Name: d.str("source index name"), Size: d.uvarint("source index size"), Key: d.key("source index key")}
	default:
		d.fail("source index flag")
	}
	s.Created = d.time("source creation time")
	if b := d.bytes(8, "source minimum saving"); b != nil {
		s.MinSaving = math.Float64frombits(binary.LittleEndian.Uint64(b))
	}
	s.Shards = make([]Shard, d.count("shards", minShardBytes))
	for i := range s.Shards {
		d.shard(&s.Shards[i])
	}
}

func (d *indexDecoder) region(what string) Region {
	return Region{Offset: d.uvarint(what + " offset"), Size: d.uvarint(what + " size"), Key: d.key(what + " key")}
}

func (d *indexDecoder) shard(sh *Shard) {
	sh.Name = d.str("shard name")
	sh.Size = d.uvarint("shard size")
	sh.ModTime = d.time("shard modification time")
	sh.Fingerprint = string(d.bytes(d.uvarint("fingerprint length"), "fingerprint"))
	sh.Header = d.region("shard header")
	sh.Tensors = make([]Tensor, d.count("tensors", minTensorBytes))
	end := sh.Header.Offset + sh.Header.Size
	// Shapes share arrays (of at most as many dimensions as there are
	// bytes left), cut with full slice expressions.
	dims := make([]uint64, 0, min(d.left(), 4*len(sh.Tensors)))
	for i := range sh.Tensors {
		t := &sh.Tensors[i]
		t.Name = string(d.bytes(d.uvarint("tensor name length"), "tensor name"))
		flags := d.uvarint("tensor flags")
		known := uint64(tenKnown)
		if d.version >= statsIndexVersion {
			known = tenBody
		}
		if d.err == nil && (flags&^known != 0 || int(flags&3) >= len(storedCodes)) {
			d.fail("tensor %q: flags %#x", t.Name, flags)
		}
		if d.err != nil {
			return
		}
		t.Stored = storedCodes[flags&3]
		t.CopyStored = flags&tenCopyStored != 0
		t.DType = d.str("tensor dtype")
		rank := d.count("tensor dimensions", 1)
		if len(dims)+rank > cap(dims) {
			dims = make([]uint64, 0, max(rank, min(d.left(), 4*(len(sh.Tensors)-i))))
		}
		for range rank {
			dims = append(dims, d.uvarint("tensor dimension"))
		}
		t.Shape = dims[len(dims)-rank : len(dims) : len(dims)]
		t.Offset = end
		if flags&tenOffset != 0 {
			t.Offset = d.uvarint("tensor offset")
		}
		if flags&tenSize != 0 {
			t.Size = d.uvarint("tensor size")
		} else if n, ok := shapeSize(t.DType, t.Shape); ok {
			t.Size = n
		} else if d.err == nil {
			d.fail("tensor %q: no size, and none follows from dtype %q and its shape", t.Name, t.DType)
		}
		if flags&tenObject != 0 {
			t.Key = d.sum("tensor object key")
			if _, ok := d.ix.Objects[t.Key]; ok && d.err == nil {
				d.fail("tensor %q: object %s recorded twice", t.Name, t.Key)
			}
			o := new(Object)
			d.object(o, &t.Size)
			d.ix.Objects[t.Key] = o
		} else {
			t.Key = d.key("tensor key")
		}
		d.tensorStatsFields(t, flags) // version 4; version 5 has none here
		if d.version >= statsIndexVersion {
			if d.tensors%64 == 0 {
				d.inline = append(d.inline, 0)
			}
			if flags&tenObject != 0 {
				d.inline[d.tensors/64] |= 1 << (d.tensors % 64)
			}
		}
		d.tensors++
		end = t.Offset + t.Size
	}
	if d.err != nil {
		return
	}
	if n := d.count("gaps", minRegionBytes); n > 0 {
		sh.Gaps = make([]Region, n)
		for i := range sh.Gaps {
			sh.Gaps[i] = d.region("gap")
		}
	}
}
