package entropy

// Counting a tensor's symbols before its payload is written, and choosing
// from the counts between coding fields one at a time (version 2) and in
// pairs (version 3).

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"

	"github.com/splitzip/splitzip/codec"
)

// Counts is a tensor's symbol counts for one field, taken a piece at a
// time (Add) before its payload is written: of each pair of adjacent
// values' fields (values 2j and 2j+1 of the tensor; an odd last value
// pairs with itself), from which the counts of single fields follow,
// until more than 256 different pairs have been seen (no payload codes
// those in pairs); from then on of single fields only, which is
// cheaper. The payload codes pairs where the code of the pairs, with
// their table, is smaller than the code of single fields. A Counts takes
// 256 KiB for 8-bit fields (tables reused once released or dropped),
// 17-20 KiB for fields of at most 5 bits, and 16 KiB for a chunk of
// fields.
type Counts struct {
	fi     int
	n      uint64
	narrow []uint32 // pair a, b at a | b<<bits, since the last fold; nil once pairs are dropped
	wide   []uint64 // folded counts (tensors of more than 2^31 pairs)
	folded uint64   // pairs counted since the last fold
	keys   []uint32 // the pairs seen, in the order first seen
	odd    bool     // the last value added awaits its pair
	last   byte     // its field
	single []uint64 // once pairs are dropped: the counts of single fields
	syms   []byte
	pc     *payloadCode        // the code of the counts, once asked for (Add and merge clear it)
	quad   *[4][1 << 10]uint32 // countQuad\'s tables (fields of at most 5 bits)
}

// NewCounts returns empty counts for field Fields[fi].
func NewCounts(fi int) (*Counts, error) {
	if fi < 0 || fi >= len(Fields) {
		return nil, fmt.Errorf("entropy: field %d", fi)
	}
	return &Counts{fi: fi, narrow: pairTables.get(1 << (2 * Fields[fi].Bits))}, nil
}

// pairTables holds the pair tables of 8-bit fields (256 KiB each) that
// Release and dropped pairs returned, all zero, for later Counts.
var pairTables tablePool

type tablePool struct{ p sync.Pool }

// get returns a zeroed table of n counts.
func (t *tablePool) get(n int) []uint32 {
	if n == 1<<16 {
		if b, ok := t.p.Get().(*[]uint32); ok {
			return *b
		}
	}
	return make([]uint32, n)
}

// put takes back table b, whose nonzero counts are at most those of keys.
func (t *tablePool) put(b []uint32, keys []uint32) {
	if len(b) != 1<<16 {
		return
	}
	for _, k := range keys {
		b[k] = 0
	}
	t.p.Put(&b)
}

// Release returns the counts' tables for reuse by later Counts; it is
// optional, and c must not be used after it.
func (c *Counts) Release() {
	if c.narrow != nil {
		pairTables.put(c.narrow, c.keys)
	}
	c.narrow, c.wide, c.keys, c.single = nil, nil, nil, nil
}

// Field returns the index into Fields of the field counted.
func (c *Counts) Field() int { return c.fi }

// Values returns the values counted.
func (c *Counts) Values() uint64 { return c.n }

// pairs reports whether the counts still hold pairs.
func (c *Counts) pairs() bool { return c.narrow != nil }

// Add counts the next values, raw (a whole number of them).
func (c *Counts) Add(raw []byte) error {
	f := Fields[c.fi]
	if len(raw)%f.Size != 0 {
		return fmt.Errorf("entropy: %d bytes are not whole %s values", len(raw), f.DType)
	}
	if c.syms == nil {
		c.syms = make([]byte, codec.ChunkValues)
	}
	c.pc = nil
	// A chunk of fields at a time, after the one left from the last piece:
	// memory bounded whatever len(raw).
	step := codec.ChunkValues * f.Size
	for o := 0; o < len(raw); o += step {
		if !c.pairs() {
			return c.addSingle(raw[o:])
		}
		part := raw[o:min(len(raw), o+step)]
		s := c.syms[:len(part)/f.Size]
		if err := fieldsOf(f, s, part); err != nil {
			return err
		}
		c.addFields(s)
	}
	return nil
}

// addFields counts the next values by their fields, s: in pairs, after
// the one left from the last values, until the pairs are dropped, then
// one at a time.
func (c *Counts) addFields(s []byte) {
	c.pc = nil
	for len(s) > 0 {
		if !c.pairs() {
			c.n += uint64(len(s))
			histogram(c.single, s)
			return
		}
		part := s[:min(len(s), codec.ChunkValues)]
		s = s[len(part):]
		c.n += uint64(len(part))
		if c.odd {
			pair := [2]byte{c.last, part[0]}
			c.countPairs(pair[:])
			part, c.odd = part[1:], false
		}
		if len(part)%2 == 1 {
			c.odd, c.last = true, part[len(part)-1]
			part = part[:len(part)-1]
		}
		c.countPairs(part)
		if len(c.keys) > MaxSymbols {
			c.dropPairs()
		}
	}
}

// addSingle counts the fields of raw's values one at a time.
func (c *Counts) addSingle(raw []byte) error {
	f := Fields[c.fi]
	c.n += uint64(len(raw) / f.Size)
	switch {
	case f.DType == "BF16" && !f.Whole:
		histogramBF16(c.single, raw)
	case f.Whole: // whole FP8 bytes are their own fields
		histogram(c.single, raw)
	default: // a chunk of fields at a time into one set of tables
		var t hist8
		step := codec.ChunkValues * f.Size
		for o, since := 0, 0; o < len(raw); o += step {
			part := raw[o:min(len(raw), o+step)]
			s := c.syms[:len(part)/f.Size]
			if err := f.Symbols(s, part); err != nil {
				return err
			}
			if since += len(s); since > 1<<30 {
				t.fold(c.single)
				since = len(s)
			}
			t.add(s)
		}
		t.fold(c.single)
	}
	return nil
}

// dropPairs turns the pair counts into counts of single fields, which
// all later values add to.
func (c *Counts) dropPairs() {
	if !c.pairs() {
		return
	}
	c.single = c.singleFromPairs()
	pairTables.put(c.narrow, c.keys)
	c.narrow, c.wide, c.keys, c.odd = nil, nil, nil, false
}

// fieldsOf writes the field of each value of raw into dst.
func fieldsOf(f Field, dst, raw []byte) error {
	if f.DType == "BF16" && !f.Whole {
		splitBF16(dst, nil, raw)
		return nil
	}
	return f.Symbols(dst, raw)
}

// countPairs counts the pairs of s (an even number of fields) and notes
// those seen for the first time.
func (c *Counts) countPairs(s []byte) {
	bits := uint(Fields[c.fi].Bits) & 63 // masked: the shifts need no check
	t := c.narrow
	if len(t) <= 1<<10 {
		c.countQuad(s)
		return
	}
	mask := uint(len(t) - 1)
	i := 0
	// Four pairs a 64-bit load; a count read as zero may be a pair's
	// first (each read follows the previous pair's increment).
	for ; i+8 <= len(s); i += 8 {
		x := binary.LittleEndian.Uint64(s[i:])
		k0 := (uint(x)&0xff | uint(x>>8)&0xff<<bits) & mask
		k1 := (uint(x>>16)&0xff | uint(x>>24)&0xff<<bits) & mask
		k2 := (uint(x>>32)&0xff | uint(x>>40)&0xff<<bits) & mask
		k3 := (uint(x>>48)&0xff | uint(x>>56)&0xff<<bits) & mask
		v0 := t[k0]
		t[k0] = v0 + 1
		v1 := t[k1]
		t[k1] = v1 + 1
		v2 := t[k2]
		t[k2] = v2 + 1
		v3 := t[k3]
		t[k3] = v3 + 1
		if min(v0, v1, v2, v3) == 0 {
			for _, kv := range [4][2]uint{{k0, uint(v0)}, {k1, uint(v1)}, {k2, uint(v2)}, {k3, uint(v3)}} {
				if kv[1] == 0 && c.wideZero(kv[0]) {
					c.keys = append(c.keys, uint32(kv[0]))
				}
			}
		}
	}
	for ; i < len(s); i += 2 {
		k := (uint(s[i]) | uint(s[i+1])<<bits) & mask
		if t[k] == 0 && c.wideZero(k) {
			c.keys = append(c.keys, uint32(k))
		}
		t[k]++
	}
	if c.folded += uint64(len(s) / 2); c.folded > foldAt {
		c.fold()
	}
}

// countQuad is countPairs for fields of at most 5 bits (pair tables of at
// most 1,024 counts): four tables, one for each of four pairs a 64-bit
// load, so that a run of one pair does not wait on one counter, summed
// into the pair counts afterwards, where the pairs seen for the first
// time are noted.
func (c *Counts) countQuad(s []byte) {
	bits := uint(Fields[c.fi].Bits) & 63 // masked: the shifts need no check
	if c.quad == nil {
		c.quad = new([4][1 << 10]uint32)
	}
	q := c.quad
	const m = 1<<10 - 1
	i := 0
	for ; i+8 <= len(s); i += 8 {
		x := binary.LittleEndian.Uint64(s[i:])
		q[0][(uint(x)&0xff|uint(x>>8)&0xff<<bits)&m]++
		q[1][(uint(x>>16)&0xff|uint(x>>24)&0xff<<bits)&m]++
		q[2][(uint(x>>32)&0xff|uint(x>>40)&0xff<<bits)&m]++
		q[3][(uint(x>>48)&0xff|uint(x>>56)&0xff<<bits)&m]++
	}
	for ; i < len(s); i += 2 {
		q[0][(uint(s[i])|uint(s[i+1])<<bits)&m]++
	}
	t := c.narrow
	for k := range t {
		n := q[0][k] + q[1][k] + q[2][k] + q[3][k]
		if n == 0 {
			continue
		}
		q[0][k], q[1][k], q[2][k], q[3][k] = 0, 0, 0, 0
		if t[k] == 0 && c.wideZero(uint(k)) {
			c.keys = append(c.keys, uint32(k))
		}
		t[k] += n
	}
	if c.folded += uint64(len(s) / 2); c.folded > foldAt {
		c.fold()
	}
}

// foldAt is the pairs counted in 32 bits before they are folded into 64
// (a variable so that tests can fold small tensors).
var foldAt uint64 = 1 << 31

// wideZero reports whether the folded count of pair k is zero.
func (c *Counts) wideZero(k uint) bool { return c.wide == nil || c.wide[k] == 0 }

// fold moves the 32-bit counts into the 64-bit ones.
func (c *Counts) fold() {
	if c.wide == nil {
		c.wide = make([]uint64, len(c.narrow))
	}
	for _, k := range c.keys {
		c.wide[k] += uint64(c.narrow[k])
		c.narrow[k] = 0
	}
	c.folded = 0
}

// merge adds the counts of o, values that follow c's, to c; at most one
// of them may end with a value awaiting its pair.
func (c *Counts) merge(o *Counts) {
	c.n += o.n
	c.pc = nil
	if !c.pairs() || !o.pairs() {
		c.dropPairs()
		for k, v := range o.Freq() {
			c.single[k] += v
		}
		return
	}
	if o.wide != nil || c.folded+o.folded > foldAt {
		c.fold()
	}
	for _, k := range o.keys {
		if c.narrow[k] == 0 && c.wideZero(uint(k)) {
			c.keys = append(c.keys, k)
		}
		c.narrow[k] += o.narrow[k]
		if o.wide != nil {
			c.wide[k] += o.wide[k]
		}
	}
	c.folded += o.folded
	if o.odd {
		c.odd, c.last = true, o.last
	}
	if len(c.keys) > MaxSymbols {
		c.dropPairs()
	}
}

// pairCount is a pair of fields, a | b<<bits, and its count.
type pairCount struct {
	key   uint32
	count uint64
}

// pairCounts returns the pairs seen and their counts in the order of
// their keys, the odd last value paired with itself (the counts must
// still hold pairs).
func (c *Counts) pairCounts() []pairCount {
	out := make([]pairCount, 0, len(c.keys)+1)
	for _, k := range c.keys {
		v := uint64(c.narrow[k])
		if c.wide != nil {
			v += c.wide[k]
		}
		out = append(out, pairCount{k, v})
	}
	if c.odd {
		k := uint32(c.last) | uint32(c.last)<<Fields[c.fi].Bits
		if c.narrow[k] == 0 && c.wideZero(uint(k)) {
			out = append(out, pairCount{k, 0})
		}
		for i := range out {
			if out[i].key == k {
				out[i].count++
			}
		}
	}
	slices.SortFunc(out, func(a, b pairCount) int { return cmp.Compare(a.key, b.key) })
	return out
}

// Freq returns the counts of single fields, a table of 1<<Fields[fi].Bits.
func (c *Counts) Freq() []uint64 {
	if !c.pairs() {
		return slices.Clone(c.single)
	}
	return c.singleFromPairs()
}

// singleFromPairs returns the counts of single fields the pair counts
// hold.
func (c *Counts) singleFromPairs() []uint64 { return c.fieldCounts(c.pairCounts()) }

// fieldCounts returns the counts of single fields in pcount, the counts'
// pairCounts.
func (c *Counts) fieldCounts(pcount []pairCount) []uint64 {
	bits := uint(Fields[c.fi].Bits) & 63 // masked: the shifts need no check
	freq := make([]uint64, 1<<bits)
	for _, p := range pcount {
		freq[p.key&(1<<bits-1)] += p.count
		freq[p.key>>bits] += p.count
	}
	if c.odd {
		freq[c.last]-- // its pair with itself counted it twice
	}
	return freq
}

// Estimate returns about the bytes of the payload of the values counted:
// the coded symbols, the other bits, the head, the chunk index and 6
// bytes of each chunk's own header (not its lane lengths).
func (c *Counts) Estimate() (uint64, error) {
	pc, err := newPayloadCode(c)
	if err != nil {
		return 0, err
	}
	chunks := (c.n + codec.ChunkValues - 1) / codec.ChunkValues
	bits := pc.bits + c.n*uint64(Fields[c.fi].Other())
	return (bits+7)/8 + pc.records + 8*(chunks+1) + 6*chunks, nil
}
