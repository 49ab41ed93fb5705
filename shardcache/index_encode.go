package shardcache

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
	"time"

	"lukechampine.com/blake3"
)

// marshalBinaryIndex encodes ix as an index file of IndexVersion. It
// writes any index whose kinds, storage and keys are well formed; whether
// the references hold is check's to say. It loads the statistics of an
// index read from version 5 first (LoadStats), so that writing never
// drops them, and fails when they are corrupt.
func marshalBinaryIndex(ix *Index) ([]byte, error) {
	if err := ix.LoadStats(); err != nil {
		return nil, err
	}
	e := &indexEncoder{strs: newStringTable(), statStrs: newStringTable(), books: map[string]uint64{}, objs: map[Key]uint64{}, inline: map[Key]bool{}}
	// An object that one tensor uses and nothing else names is written in
	// that tensor's record; the rest in the object table, by key order.
	uses := map[Key]int{}
	for i := range ix.Sources {
		s := &ix.Sources[i]
		for j := range s.Shards {
			for _, t := range s.Shards[j].Tensors {
				if _, ok := ix.Objects[t.Key]; ok {
					uses[t.Key]++
				}
			}
		}
	}
	for i := range ix.Sources {
		s := &ix.Sources[i]
		if s.Index != nil {
			uses[s.Index.Key] += 2
		}
		for j := range s.Shards {
			uses[s.Shards[j].Header.Key] += 2
			for _, g := range s.Shards[j].Gaps {
				uses[g.Key] += 2
			}
		}
	}
	for _, o := range ix.Objects {
		if o != nil && o.Pack != "" {
			uses[o.Pack] += 2
		}
	}
	keys := make([]Key, 0, len(ix.Objects))
	for k, o := range ix.Objects {
		if uses[k] == 1 && o != nil && o.Kind != KindPack {
			e.inline[k] = true
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		e.objs[k] = uint64(i)
	}
	e.ix = ix
	// Objects and sources first, into rest, collecting the tables, and
	// their statistics into e.stats, in the same order.
	bodyHint, statsHint := sizeHint(ix)
	e.stats = make([]byte, 0, statsHint)
	rest := binary.AppendUvarint(make([]byte, 0, bodyHint+statsHint), uint64(len(keys)))
	for _, k := range keys {
		sum, err := keySum(k)
		if err != nil {
			return nil, err
		}
		rest = append(rest, sum[:]...)
	}
	for _, k := range keys {
		var err error
		if rest, err = e.object(rest, k, ix.Objects[k], nil); err != nil {
			return nil, err
		}
	}
	rest = binary.AppendUvarint(rest, uint64(len(ix.Sources)))
	for i := range ix.Sources {
		var err error
		if rest, err = e.source(rest, &ix.Sources[i]); err != nil {
			return nil, err
		}
	}
	// The file: header, string table, rest, then, when there are records,
	// the statistics section: its head, string table, codebook table and
	// records.
	tables := e.strs.append(nil)
	var flags uint32
	var statTables []byte
	n := indexHeaderSize + len(tables) + len(rest)
	if len(e.stats) > 0 { // a record for each object and tensor, of a byte at least
		flags |= indexHasStats
		statTables = e.statStrs.append(nil)
		statTables = binary.AppendUvarint(statTables, uint64(len(e.bookList)))
		for _, cb := range e.bookList {
			statTables = binary.AppendUvarint(statTables, uint64(len(cb)))
			for _, v := range cb {
				statTables = binary.AppendVarint(statTables, int64(v))
			}
		}
		n += statsHeaderSize + len(statTables) + len(e.stats)
	}
	// Put the header and tables before rest in place when its buffer has
	// room for the whole file (sizeHint is generous), so that the index
	// is in memory once.
	var out []byte
	if h := indexHeaderSize + len(tables); cap(rest) >= n {
		out = rest[:len(rest)+h]
		copy(out[h:], rest)
		copy(out[indexHeaderSize:], tables)
	} else {
		out = make([]byte, indexHeaderSize, n)
		out = append(append(out, tables...), rest...)
	}
	body := len(out) - indexHeaderSize
	if flags&indexHasStats != 0 {
		h := blake3.New(32, nil)
		h.Write(statTables)
		h.Write(e.stats)
		out = binary.LittleEndian.AppendUint64(out, uint64(len(statTables)+len(e.stats)))
		out = h.Sum(out)
		out = append(append(out, statTables...), e.stats...)
	}
	copy(out, indexMagic)
	binary.LittleEndian.PutUint32(out[16:], statsIndexVersion)
	binary.LittleEndian.PutUint32(out[20:], flags)
	binary.LittleEndian.PutUint64(out[24:], uint64(body))
	sum := blake3.Sum256(out[indexHeaderSize : indexHeaderSize+body])
	copy(out[32:], sum[:])
	return out, nil
}

// keySum returns the 32 bytes of a well-formed key: "blake3:" and 64
// lowercase hex digits, as KeyFromSum writes them.
func keySum(k Key) ([32]byte, error) {
	var sum [32]byte
	h, ok := strings.CutPrefix(string(k), KeyPrefix)
	ok = ok && len(h) == 2*len(sum)
	for i := 0; ok && i < len(sum); i++ {
		hi, lo := unhex(h[2*i]), unhex(h[2*i+1])
		ok = hi < 16 && lo < 16
		sum[i] = hi<<4 | lo
	}
	if !ok {
		return sum, fmt.Errorf("shardcache: cannot write key %q: not %s and 64 lowercase hex digits", string(k), KeyPrefix)
	}
	return sum, nil
}

// unhex returns the value of a lowercase hex digit, or 16.
func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return 16
}

// sizeHint returns a little more than the bytes ix's body encodes to,
// without the string table, and than its statistics' records, so that
// each buffer is allocated once.
func sizeHint(ix *Index) (body, stats int) {
	body, stats = 4096+64*len(ix.Objects), 4096+40*len(ix.Objects)
	for i := range ix.Sources {
		body += len(ix.Sources[i].Root)
		for j := range ix.Sources[i].Shards {
			sh := &ix.Sources[i].Shards[j]
			body += 256 + len(sh.Name) + len(sh.Fingerprint) + 80*len(sh.Gaps)
			for k := range sh.Tensors {
				body += 48 + len(sh.Tensors[k].Name) + 10*len(sh.Tensors[k].Shape)
				stats += 24
			}
		}
	}
	return body, stats
}

// stringTable numbers strings in the order they are first written.
type stringTable struct {
	index map[string]uint64
	list  []string
}

func newStringTable() stringTable { return stringTable{index: map[string]uint64{}} }

// ref appends s's position, adding s to the table if it is new.
func (t *stringTable) ref(b []byte, s string) []byte {
	i, ok := t.index[s]
	if !ok {
		i = uint64(len(t.list))
		t.index[s] = i
		t.list = append(t.list, s)
	}
	return binary.AppendUvarint(b, i)
}

// append appends the table: a count, then each string's length and bytes.
func (t *stringTable) append(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(t.list)))
	for _, s := range t.list {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

type indexEncoder struct {
	ix       *Index
	strs     stringTable // the body's
	statStrs stringTable // the statistics section's
	books    map[string]uint64
	bookList [][]int
	objs     map[Key]uint64 // position in the object table
	inline   map[Key]bool   // written in its tensor's record
	stats    []byte         // the statistics' records
}

func (e *indexEncoder) key(b []byte, k Key) ([]byte, error) {
	if k == "" {
		return append(b, keyNone), nil
	}
	if i, ok := e.objs[k]; ok {
		return binary.AppendUvarint(b, keyObject+i), nil
	}
	sum, err := keySum(k)
	if err != nil {
		return nil, err
	}
	return append(append(b, keyInline), sum[:]...), nil
}

func code(codes []string, s, what string) (byte, error) {
	for i, c := range codes {
		if c == s {
			return byte(i), nil
		}
	}
	return 0, fmt.Errorf("shardcache: cannot write %s %q", what, s)
}

// object writes an object record's body part, and appends its
// statistics' part to e.stats; tensorSize, for one inside a tensor
// record, is the raw size it leaves out (else its stored size is).
func (e *indexEncoder) object(b []byte, k Key, o *Object, tensorSize *uint64) ([]byte, error) {
	if o == nil {
		return nil, fmt.Errorf("shardcache: object %s has no record", k)
	}
	rawSize := o.Size
	if tensorSize != nil {
		rawSize = *tensorSize
	}
	kind, err := code(kindCodes, o.Kind, "object kind")
	if err != nil {
		return nil, err
	}
	var mask uint64
	if o.RawSize != rawSize {
		mask |= objRawSize
	}
	if o.Checksum != 0 {
		mask |= objChecksum
	}
	if o.Pack != "" || o.Offset != 0 {
		mask |= objPack
	}
	b = append(b, kind)
	b = binary.AppendUvarint(b, mask)
	b = binary.AppendUvarint(b, o.Size)
	if mask&objRawSize != 0 {
		b = binary.AppendUvarint(b, o.RawSize)
	}
	if mask&objChecksum != 0 {
		b = binary.LittleEndian.AppendUint32(b, o.Checksum)
	}
	if mask&objPack != 0 {
		if b, err = e.key(b, o.Pack); err != nil {
			return nil, err
		}
		b = binary.AppendUvarint(b, o.Offset)
	}
	e.objectStats(o)
	return b, nil
}

// objectStats appends the statistics' part of o's record to e.stats.
func (e *indexEncoder) objectStats(o *Object) {
	var mask uint64
	set := func(bit uint64, on bool) {
		if on {
			mask |= bit
		}
	}
	same := func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }
	set(objValues, o.Values != derivedValues(o))
	set(objCodebook, o.Codebook != nil)
	set(objEscapes, o.Escapes != 0)
	set(objRawChunks, o.RawChunks != 0)
	set(objChunks, o.Chunks != 0)
	set(objCoverage, !same(o.Coverage, derivedCoverage(o)))
	set(objEntropy, !same(o.Entropy, 0))
	set(objInPlace, o.InPlace)
	set(objEscapeRate, !same(o.EscapeRate, derivedEscapeRate(o)))
	set(objField, o.Field != "")
	b := binary.AppendUvarint(e.stats, mask)
	if mask&objCodebook != 0 {
		id := fmt.Sprint(o.Codebook)
		i, ok := e.books[id]
		if !ok {
			i = uint64(len(e.bookList))
			e.books[id] = i
			e.bookList = append(e.bookList, o.Codebook)
		}
		b = binary.AppendUvarint(b, i)
	}
	if mask&objEscapes != 0 {
		b = binary.AppendUvarint(b, o.Escapes)
	}
	if mask&objChunks != 0 {
		b = binary.AppendUvarint(b, o.Chunks)
	}
	if mask&objEntropy != 0 {
		b = appendFloat(b, o.Entropy)
	}
	if mask&objValues != 0 {
		b = binary.AppendUvarint(b, o.Values)
	}
	if mask&objRawChunks != 0 {
		b = binary.AppendUvarint(b, o.RawChunks)
	}
	if mask&objCoverage != 0 {
		b = appendFloat(b, o.Coverage)
	}
	if mask&objEscapeRate != 0 {
		b = appendFloat(b, o.EscapeRate)
	}
	if mask&objField != 0 {
		b = e.statStrs.ref(b, o.Field)
	}
	e.stats = b
}

// tensorStats appends the statistics' part of t's record to e.stats.
func (e *indexEncoder) tensorStats(t *Tensor) {
	var flags uint64
	if t.Reason != "" {
		flags |= tenReason
	}
	if math.Float64bits(t.Coverage) != 0 {
		flags |= tenCoverage
	}
	if math.Float64bits(t.Entropy) != 0 {
		flags |= tenEntropy
	}
	b := binary.AppendUvarint(e.stats, flags)
	if flags&tenReason != 0 {
		b = e.statStrs.ref(b, t.Reason)
	}
	if flags&tenCoverage != 0 {
		b = appendFloat(b, t.Coverage)
	}
	if flags&tenEntropy != 0 {
		b = appendFloat(b, t.Entropy)
	}
	e.stats = b
}

func (e *indexEncoder) source(b []byte, s *Source) ([]byte, error) {
	var err error
	b = e.strs.ref(b, s.Root)
	if s.Index == nil {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = e.strs.ref(b, s.Index.Name)
		b = binary.AppendUvarint(b, s.Index.Size)
		if b, err = e.key(b, s.Index.Key); err != nil {
			return nil, err
		}
	}
	b = appendTime(b, s.Created)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(s.MinSaving))
	b = binary.AppendUvarint(b, uint64(len(s.Shards)))
	for i := range s.Shards {
		if b, err = e.shard(b, &s.Shards[i]); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func (e *indexEncoder) region(b []byte, r Region) ([]byte, error) {
	b = binary.AppendUvarint(b, r.Offset)
	b = binary.AppendUvarint(b, r.Size)
	return e.key(b, r.Key)
}

func (e *indexEncoder) shard(b []byte, sh *Shard) ([]byte, error) {
	var err error
	b = e.strs.ref(b, sh.Name)
	b = binary.AppendUvarint(b, sh.Size)
	b = appendTime(b, sh.ModTime)
	b = binary.AppendUvarint(b, uint64(len(sh.Fingerprint)))
	b = append(b, sh.Fingerprint...)
	if b, err = e.region(b, sh.Header); err != nil {
		return nil, err
	}
	b = binary.AppendUvarint(b, uint64(len(sh.Tensors)))
	end := sh.Header.Offset + sh.Header.Size
	for i := range sh.Tensors {
		t := &sh.Tensors[i]
		stored, err := code(storedCodes, t.Stored, "tensor storage")
		if err != nil {
			return nil, fmt.Errorf("%w (tensor %q)", err, t.Name)
		}
		flags := uint64(stored)
		if t.CopyStored {
			flags |= tenCopyStored
		}
		if t.Offset != end {
			flags |= tenOffset
		}
		if n, ok := shapeSize(t.DType, t.Shape); !ok || n != t.Size {
			flags |= tenSize
		}
		if e.inline[t.Key] {
			flags |= tenObject
		}
		b = binary.AppendUvarint(b, uint64(len(t.Name)))
		b = append(b, t.Name...)
		b = binary.AppendUvarint(b, flags)
		b = e.strs.ref(b, t.DType)
		b = binary.AppendUvarint(b, uint64(len(t.Shape)))
		for _, d := range t.Shape {
			b = binary.AppendUvarint(b, d)
		}
		if flags&tenOffset != 0 {
			b = binary.AppendUvarint(b, t.Offset)
		}
		if flags&tenSize != 0 {
			b = binary.AppendUvarint(b, t.Size)
		}
		// The statistics' part of the tensor's record, then of its
		// object's when its object is inline, as the body has them.
		e.tensorStats(t)
		if flags&tenObject != 0 {
			sum, err := keySum(t.Key)
			if err != nil {
				return nil, err
			}
			b = append(b, sum[:]...)
			if b, err = e.object(b, t.Key, e.ix.Objects[t.Key], &t.Size); err != nil {
				return nil, err
			}
		} else if b, err = e.key(b, t.Key); err != nil {
			return nil, err
		}
		end = t.Offset + t.Size
	}
	b = binary.AppendUvarint(b, uint64(len(sh.Gaps)))
	for _, g := range sh.Gaps {
		if b, err = e.region(b, g); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// appendFloat writes f's bits as a count n (0 to 8) and their n most
// significant bytes, the last not zero: statistics such as 1.0 or 0.5
// take 3 bytes, 0 one.
func appendFloat(b []byte, f float64) []byte {
	v := math.Float64bits(f)
	n := 8 - bits.TrailingZeros64(v)/8
	b = append(b, byte(n))
	for i := range n {
		b = append(b, byte(v>>(56-8*i)))
	}
	return b
}

// appendTime writes t as seconds since 1970 (zigzag varint) and
// nanoseconds (varint); it reads back in UTC.
func appendTime(b []byte, t time.Time) []byte {
	b = binary.AppendVarint(b, t.Unix())
	return binary.AppendUvarint(b, uint64(t.Nanosecond()))
}
