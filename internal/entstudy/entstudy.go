// Package entstudy measures how small entropy payloads (issue 12) would
// make tensors of each float dtype before the format is fixed: the
// Shannon bound of each tensor's exponent field, a canonical length-
// limited code in 32 interleaved lanes per chunk (codec/entropy, with its
// padding, lane lengths and table), huff0 (klauspost/compress, the decided
// CPU entropy coder) on the same symbols, and for BF16 the fixed-rate
// fixed-codec payload. `splitzip bench entropy` prints it.
package entstudy

import (
	"errors"
	"fmt"

	"github.com/klauspost/compress/huff0"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/internal/synth"
)

// Chunk is the values per chunk the study codes (the fixed-rate format's).
const Chunk = codec.ChunkValues

// MaxLen is the code length limit studied: a 4,096-entry decode table of
// 16-bit entries is 8 KiB of shared memory.
const MaxLen = 12

// groupValues is the values that share one code in the grouped variant.
const groupValues = 4 * Chunk

// huffBlock is the symbols per huff0 block (its limit is 128 KiB).
const huffBlock = 64 << 10

// Result sums the tensors of one dtype field.
type Result struct {
	DType   string `json:"dtype"`
	Field   string `json:"field"` // "exponent" or "byte" (FP8 whole bytes)
	Tensors int    `json:"tensors"`
	Values  uint64 `json:"values"`
	// Bits per value of the whole value, each: the other bits stored as
	// they are plus the field coded by...
	Bound     float64 `json:"bound_bits"`           // ...its entropy, per tensor
	Canonical float64 `json:"canonical_bits"`       // ...the lane code, lanes padded to 32-bit words
	Packed    float64 `json:"packed_bits"`          // ...the lane code, lanes bit-packed one after another
	Grouped   float64 `json:"grouped_bits"`         // ...bit-packed lanes, a code per group of 65,536 values
	Compact   float64 `json:"compact_bits"`         // ...bit-packed lanes whose lengths are stored as deviations from their mean
	Free      float64 `json:"free_bits"`            // ...bit-packed lanes with no lengths stored (a floor for any framing)
	Huff0     float64 `json:"huff0_bits"`           // ...huff0 4X in 64 Ki-symbol blocks
	Fixed     float64 `json:"fixed_bits,omitempty"` // the fixed codec's BF16 payload (BF16 only)
	// Pairs is compact lengths over symbols that are pairs of adjacent
	// fields, where a tensor's pairs are at most 256 and that is smaller
	// (its table of pairs counted), else Compact; PairTensors the tensors
	// coded so.
	Pairs       float64 `json:"pairs_bits"`
	PairTensors int     `json:"pair_tensors"`

	bound, canon, packed, grouped, compact, free, huff, fixed, pairs float64 // bits summed
}

// Study accumulates results per dtype field.
type Study struct {
	byKey map[string]*Result
	order []string
	syms  []byte
}

// New returns an empty study.
func New() *Study { return &Study{byKey: map[string]*Result{}} }

// Add studies one tensor of dtype (raw little-endian values) under every
// field of that dtype; other dtypes are ignored.
func (s *Study) Add(dtype string, raw []byte) error {
	for _, f := range entropy.Fields {
		if f.DType != dtype {
			continue
		}
		if err := s.add(f, raw); err != nil {
			return err
		}
	}
	return nil
}

func (s *Study) add(f entropy.Field, raw []byte) error {
	n := len(raw) / f.Size
	if n == 0 {
		return nil
	}
	key := f.DType + "/exponent"
	name := "exponent"
	if f.Whole {
		key, name = f.DType+"/byte", "byte"
	}
	r := s.byKey[key]
	if r == nil {
		r = &Result{DType: f.DType, Field: name}
		s.byKey[key] = r
		s.order = append(s.order, key)
	}
	if cap(s.syms) < n {
		s.syms = make([]byte, n)
	}
	syms := s.syms[:n]
	if err := f.Symbols(syms, raw); err != nil {
		return err
	}
	freq := make([]uint64, 1<<f.Bits)
	for _, b := range syms {
		freq[b]++
	}
	other := float64(f.Other()) * float64(n)
	r.Tensors++
	r.Values += uint64(n)
	r.bound += other + entropy.EntropyBits(freq)
	fr, err := canonicalBits(freq, syms, f.Bits)
	if err != nil {
		return err
	}
	r.canon += other + fr.padded
	r.packed += other + fr.packed
	r.compact += other + fr.compact
	r.free += other + fr.free
	pb, ok, err := pairBits(syms, f.Bits)
	if err != nil {
		return err
	}
	if ok && pb < fr.compact {
		r.pairs += other + pb
		r.PairTensors++
	} else {
		r.pairs += other + fr.compact
	}
	var grouped float64
	for off := 0; off < n; off += groupValues {
		g := syms[off:min(off+groupValues, n)]
		gf := make([]uint64, len(freq))
		for _, b := range g {
			gf[b]++
		}
		gr, err := canonicalBits(gf, g, f.Bits)
		if err != nil {
			return err
		}
		grouped += gr.packed
	}
	r.grouped += other + grouped
	huff, err := huff0Bits(syms)
	if err != nil {
		return err
	}
	r.huff += other + huff
	if f.DType == "BF16" {
		p, _, err := codec.Encode(raw)
		if err != nil {
			return err
		}
		r.fixed += 8 * float64(len(p))
	}
	return nil
}

// framing is what the lane code stores for a tensor under each way of
// storing lane boundaries.
type framing struct {
	padded  float64 // lanes padded to 32-bit words, a 16-bit length each
	packed  float64 // lanes bit-packed, a 16-bit length each
	compact float64 // entropy.EncodeChunk's output: lanes bit-packed, compact lengths, mode byte, byte padding
	free    float64 // lanes bit-packed, no lengths
}

// canonicalBits is what the lane code stores for syms: per tensor the code
// lengths of the symbols from the smallest used to the largest (4 bits
// each, and 16 bits for the range); per chunk its lanes (or the symbols
// raw, bits each, when that is smaller; a chunk of one symbol, that
// symbol) and their lengths (see framing).
// A chunk has one lane per 128 symbols, at most 32, so a small tensor does
// not pay for 32 lane lengths.
func canonicalBits(freq []uint64, syms []byte, bits int) (framing, error) {
	var fr framing
	ls, err := entropy.Lengths(freq, MaxLen)
	if err != nil {
		return fr, err
	}
	c, err := entropy.NewCode(ls, MaxLen)
	if err != nil {
		return fr, err
	}
	lo, hi := len(freq), -1
	for s, f := range freq {
		if f > 0 {
			lo, hi = min(lo, s), max(hi, s)
		}
	}
	table := 16 + 4*float64(max(hi-lo+1, 0))
	fr = framing{table, table, table, table}
	var buf []byte
	for off := 0; off < len(syms); off += Chunk {
		chunk := syms[off:min(off+Chunk, len(syms))]
		if constant(chunk) {
			// A chunk of one symbol stores it and nothing else (a
			// one-symbol code would spend a bit a value).
			fr.padded += 8
			fr.packed += 8
			fr.compact += 16 // EncodeChunk: the mode and the symbol
			fr.free += 8
			continue
		}
		lanes := min(entropy.Lanes, (len(chunk)+127)/128)
		var coded uint64
		laneBits := make([]uint64, lanes)
		for i, b := range chunk {
			l := uint64(c.Lengths[b])
			coded += l
			laneBits[i%lanes] += l
		}
		var words uint64
		for _, b := range laneBits {
			words += (b + 31) / 32
		}
		raw := float64(bits * len(chunk))
		fr.padded += min(32*float64(words), raw) + 16*float64(lanes)
		fr.packed += min(float64(coded), raw) + 16*float64(lanes)
		enc, err := entropy.EncodeChunk(buf[:0], c, chunk, bits)
		if err != nil {
			return fr, err
		}
		buf = enc
		fr.compact += 8 * float64(len(enc))
		fr.free += min(float64(coded), raw)
	}
	return fr, nil
}

// pairBits is what the lane code with compact lengths stores for syms
// coded as pairs (symbols 2i and 2i+1 as one symbol; an odd last symbol
// paired with itself), when they make at most 256 pairs: per tensor the
// pairs (two fields each) with their code lengths (4 bits each) and a
// 16-bit count, per chunk of Chunk values entropy.EncodeChunk's output
// over the pairs' ids. ok is false for more than 256 pairs.
func pairBits(syms []byte, bits int) (total float64, ok bool, err error) {
	n := (len(syms) + 1) / 2
	pair := func(i int) uint16 {
		a := syms[2*i]
		b := a
		if 2*i+1 < len(syms) {
			b = syms[2*i+1]
		}
		return uint16(a)<<8 | uint16(b)
	}
	id := map[uint16]byte{}
	var freq []uint64
	ids := make([]byte, n)
	for i := range n {
		p := pair(i)
		k, seen := id[p]
		if !seen {
			if len(freq) == 256 {
				return 0, false, nil
			}
			k = byte(len(freq))
			id[p] = k
			freq = append(freq, 0)
		}
		freq[k]++
		ids[i] = k
	}
	ls, err := entropy.Lengths(freq, MaxLen)
	if err != nil {
		return 0, false, err
	}
	c, err := entropy.NewCode(append(ls, make([]uint8, 256-len(ls))...), MaxLen)
	if err != nil {
		return 0, false, err
	}
	total = 16 + float64(len(freq))*float64(2*bits+4)
	var buf []byte
	for off := 0; off < n; off += Chunk / 2 {
		if buf, err = entropy.EncodeChunk(buf[:0], c, ids[off:min(off+Chunk/2, n)], 8); err != nil {
			return 0, false, err
		}
		total += 8 * float64(len(buf))
	}
	return total, true, nil
}

// constant reports whether every symbol of b is the same.
func constant(b []byte) bool {
	for _, x := range b {
		if x != b[0] {
			return false
		}
	}
	return true
}

// huff0Bits is what huff0 4X stores for syms in blocks of huffBlock
// symbols, each with its own table (a block it cannot shrink stored raw,
// one of a single symbol as one byte).
func huff0Bits(syms []byte) (float64, error) {
	var total float64
	// Each block stands alone, as blocks decoded in parallel must.
	sc := huff0.Scratch{Reuse: huff0.ReusePolicyNone}
	for off := 0; off < len(syms); off += huffBlock {
		block := syms[off:min(off+huffBlock, len(syms))]
		out, _, err := huff0.Compress4X(block, &sc)
		switch {
		case errors.Is(err, huff0.ErrIncompressible), errors.Is(err, huff0.ErrTooBig):
			total += 8 * float64(len(block))
		case errors.Is(err, huff0.ErrUseRLE):
			total += 8
		case err != nil:
			return 0, fmt.Errorf("huff0: %w", err)
		default:
			total += 8 * float64(len(out))
		}
	}
	return total, nil
}

// Results returns the sums per dtype field, in the order first seen.
func (s *Study) Results() []Result {
	var out []Result
	for _, k := range s.order {
		r := *s.byKey[k]
		v := float64(r.Values)
		r.Bound, r.Canonical, r.Packed, r.Grouped, r.Huff0 = r.bound/v, r.canon/v, r.packed/v, r.grouped/v, r.huff/v
		r.Compact, r.Free, r.Pairs = r.compact/v, r.free/v, r.pairs/v
		if r.fixed > 0 {
			r.Fixed = r.fixed / v
		}
		out = append(out, r)
	}
	return out
}

// Cast adds a BF16 tensor as it would be stored in each other float dtype
// (rows of cols values scaled per row for FP8).
func (s *Study) Cast(raw []byte, cols int) error {
	for _, d := range []string{"F16", "F32", "F8_E4M3", "F8_E5M2"} {
		if err := s.Add(d, synth.Cast(raw, d, cols)); err != nil {
			return err
		}
	}
	return nil
}
