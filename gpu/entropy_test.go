package gpu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/internal/synth"
)

// runEntropy decodes entropy payload p (head h, trusted as the host
// parsed it) on the GPU as run does a SplitZip payload.
func runEntropy(t *testing.T, ctx *cuda.Context, d *Decoder, p []byte, h *entropy.Head, inPlace bool) ([]byte, error) {
	t.Helper()
	return guarded(t, ctx, d, p, h.ValueBytes(), inPlace, func(dst, src cuda.DevicePtr, s cuda.Stream) error {
		if inPlace {
			return d.LaunchEntropyInPlace(dst, h, s)
		}
		return d.LaunchEntropyOutOfPlace(dst, src, h, s)
	})
}

// entropyCases returns test tensors for field f: every bit pattern in
// order and shuffled, lengths around the chunk size, trained-looking
// values cast to the dtype, incompressible and constant chunks (the raw
// and constant chunk modes), and a mix of all three.
func entropyCases(rng *rand.Rand, f entropy.Field, short bool) []testCase {
	C := codec.ChunkValues
	var patterns []byte
	switch f.Size {
	case 1:
		patterns = make([]byte, 256*40)
		for i := range patterns {
			patterns[i] = byte(i)
		}
	case 2:
		patterns = make([]byte, 2<<16)
		for v := range 1 << 16 {
			binary.LittleEndian.PutUint16(patterns[2*v:], uint16(v))
		}
	case 4: // every exponent, both signs, random mantissas
		patterns = make([]byte, 4*256*64)
		for i := range 256 * 64 {
			binary.LittleEndian.PutUint32(patterns[4*i:], uint32(i%2)<<31|uint32(i/64)<<23|rng.Uint32()&(1<<23-1))
		}
	}
	shuffled := bytes.Clone(patterns)
	n := len(shuffled) / f.Size
	for i := n - 1; i > 0; i-- {
		j := rng.IntN(i + 1)
		for k := range f.Size {
			shuffled[i*f.Size+k], shuffled[j*f.Size+k] = shuffled[j*f.Size+k], shuffled[i*f.Size+k]
		}
	}
	trained := func(n int) []byte {
		bf := synth.Normal(rng, n, 0.02)
		if f.DType == "BF16" {
			return bf
		}
		return synth.Cast(bf, f.DType, 256)
	}
	cs := []testCase{{"all patterns in order", patterns}, {"all patterns shuffled", shuffled}}
	sizes := []int{1, 2, 3, 127, 128, 129, 1001, C - 1, C, C + 1, 2*C - 1, 2*C + 1, 3*C + 7, 64*C + 1, 130*C + 4097}
	if short {
		sizes = sizes[:12]
	}
	for _, n := range sizes {
		cs = append(cs, testCase{"trained n=" + itoa(n), trained(n)})
	}
	noise := make([]byte, 5*C*f.Size+3*f.Size)
	for i := range noise {
		noise[i] = byte(rng.Uint32())
	}
	cs = append(cs, testCase{"incompressible", noise})
	cs = append(cs, testCase{"constant", make([]byte, (4*C+9)*f.Size)})
	var mix []byte
	for c := range 24 {
		switch c % 4 {
		case 0, 3:
			mix = append(mix, trained(C)...)
		case 1:
			mix = append(mix, make([]byte, C*f.Size)...)
		case 2:
			b := make([]byte, C*f.Size)
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			mix = append(mix, b...)
		}
	}
	cs = append(cs, testCase{"trained, constant and incompressible chunks", mix})
	// Few, peaked fields: payloads of pair symbols (version 3), at odd
	// lengths and chunk boundaries, and beside constant and
	// incompressible chunks.
	for _, n := range []int{2001, C - 1, C, C + 1, 3*C + 7, 40*C + 333} {
		cs = append(cs, testCase{"peaked n=" + itoa(n), peakedValues(rng, f, n)})
	}
	var pmix []byte
	for c := range 12 {
		switch c % 3 {
		case 0:
			pmix = append(pmix, peakedValues(rng, f, C)...)
		case 1:
			pmix = append(pmix, make([]byte, C*f.Size)...)
		case 2:
			pmix = append(pmix, peakedValues(rng, f, C)[:C*f.Size/2]...)
			b := make([]byte, C*f.Size/2)
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			pmix = append(pmix, b...)
		}
	}
	return append(cs, testCase{"peaked, constant and part incompressible chunks", append(pmix, peakedValues(rng, f, 5)...)})
}

// peakedValues returns n values of field f whose fields take few values,
// one of them most of the time (a trained tensor's exponents), and whose
// other bits are random: their payloads code pairs of fields.
func peakedValues(rng *rand.Rand, f entropy.Field, n int) []byte {
	return synth.Peaked(rng, n, f.Size, f.Shift, f.Bits, f.Whole)
}

// TestEntropyMatchesReference decodes every test tensor of every field on
// the GPU, out of place and (when flagged) in place, and compares with
// the tensor and with the Go reference decoder bit for bit.
func TestEntropyMatchesReference(t *testing.T) {
	ctx, d := requireGPU(t)
	rng := seeded(t)
	for fi, f := range entropy.Fields {
		inPlace, pairs := 0, 0
		for _, c := range entropyCases(rng, f, testing.Short()) {
			p, err := entropy.Encode(fi, c.values, 0)
			if err != nil {
				t.Fatalf("%s, %s: %v", f.Name(), c.name, err)
			}
			h, err := entropy.Check(p)
			if err != nil {
				t.Fatalf("%s, %s: %v", f.Name(), c.name, err)
			}
			ref := make([]byte, len(c.values))
			if err := entropy.Decode(ref, p, 0); err != nil || !bytes.Equal(ref, c.values) {
				t.Fatalf("%s, %s: the reference decoder: %v", f.Name(), c.name, err)
			}
			modes := []bool{false}
			if h.InPlace {
				modes = append(modes, true)
				inPlace++
			}
			if h.Pairs {
				pairs++
			}
			for _, ip := range modes {
				hh := *h
				if !ip {
					hh.MaxRecord, hh.MaxSymbols = 0, 0 // buffers for the longest symbol chunk a chunk may have
				}
				got, err := runEntropy(t, ctx, d, p, &hh, ip)
				if err != nil {
					t.Fatalf("%s, %s (in place %v): %v", f.Name(), c.name, ip, err)
				}
				if !bytes.Equal(got, c.values) {
					t.Fatalf("%s, %s (in place %v): differs from the reference at byte %d", f.Name(), c.name, ip, firstDiff(got, c.values))
				}
			}
		}
		if inPlace == 0 || pairs == 0 {
			t.Errorf("%s: %d payloads were decoded in place, %d coded pairs", f.Name(), inPlace, pairs)
		}
		t.Logf("%s: every case bit for bit, %d of them also in place, %d of pair symbols", f.Name(), inPlace, pairs)
	}
}

// TestEntropyCorruptPayloads launches hundreds of payloads with flipped
// bytes in the records and the chunk index (the head is what the host
// parses and checks; flipped code lengths are tried too, bypassing that
// check), in place and out of place: the kernel must report or decode
// them, never write outside the destination (runEntropy checks the
// guards) or hang. Run under compute-sanitizer it must stay clean.
func TestEntropyCorruptPayloads(t *testing.T) {
	ctx, d := requireGPU(t)
	rng := seeded(t)
	C := codec.ChunkValues
	runs := 300
	if testing.Short() {
		runs = 60
	}
	reported, tried := 0, 0
	for fi, f := range entropy.Fields {
		for _, pairs := range []bool{false, true} {
			raw := synth.Normal(rng, 9*C+11, 0.02)
			if f.DType != "BF16" {
				raw = synth.Cast(raw, f.DType, 256)
			}
			if pairs {
				raw = peakedValues(rng, f, 9*C+11)
			}
			p, err := entropy.Encode(fi, raw, 0)
			if err != nil {
				t.Fatal(err)
			}
			h, err := entropy.Check(p)
			if err != nil || !h.InPlace || pairs && !h.Pairs {
				t.Fatalf("%s: %v, in place %v, pairs %v", f.Name(), err, h != nil && h.InPlace, h != nil && h.Pairs)
			}
			n, r := corruptRuns(t, ctx, d, rng, f, p, h, runs/len(entropy.Fields)/2)
			reported += n
			tried += r
		}
	}
	t.Logf("%d of %d corrupted payloads reported by the kernel, none wrote outside its range", reported, tried)
	if reported == 0 {
		t.Error("no corrupted payload was reported")
	}
}

// corruptRuns launches runs corruptions of payload p (head h) of field f,
// alternately in place and out of place, and returns how many the kernel
// reported.
func corruptRuns(t *testing.T, ctx *cuda.Context, d *Decoder, rng *rand.Rand, f entropy.Field, p []byte, h *entropy.Head, runs int) (reported, tried int) {
	t.Helper()
	for i := range runs {
		q := bytes.Clone(p)
		hh := *h
		switch i % 5 {
		case 0: // the chunk index
			for k := 0; k <= rng.IntN(3); k++ {
				q[h.Index+uint64(rng.IntN(int(h.Size-h.Index)))] ^= byte(1 + rng.IntN(255))
			}
		case 1: // the code lengths, or a pair table naming fields of any width
			bits := f.Bits
			if h.Pairs {
				bits = 8
			}
			if h.Pairs && i%2 == 1 {
				hh.PairFields[rng.IntN(256)] = uint16(rng.Uint32())
			} else {
				hh.Lengths[rng.IntN(1<<bits)] = uint8(rng.IntN(13))
			}
		default: // the records
			for k := 0; k <= rng.IntN(4); k++ {
				q[h.Others+uint64(rng.IntN(int(h.Index-h.Others)))] ^= byte(1 + rng.IntN(255))
			}
		}
		tried++
		if _, err := runEntropy(t, ctx, d, q, &hh, i%2 == 0); err != nil {
			if !errors.Is(err, ErrKernel) {
				t.Fatalf("%s: %v", f.Name(), err)
			}
			reported++
		}
	}
	return reported, tried
}

// TestEntropyLarge decodes a BF16 tensor of more than 2^31 values in place
// once. It needs about 14 GiB of host memory and 5 GiB on the GPU;
// SPLITZIP_LARGE=1 enables it.
func TestEntropyLarge(t *testing.T) {
	if os.Getenv("SPLITZIP_LARGE") == "" {
		t.Skip("set SPLITZIP_LARGE=1 to decode a tensor of 2^31+3 values")
	}
	ctx, d := requireGPU(t)
	n := 1<<31 + 3
	v := largeBF16(n)
	p, err := entropy.Encode(0, v, 0)
	if err != nil {
		t.Fatal(err)
	}
	h, err := entropy.Check(p)
	if err != nil || !h.InPlace {
		t.Fatalf("a %d-value tensor: %v, in place %v", n, err, h != nil && h.InPlace)
	}
	got, err := runEntropy(t, ctx, d, p, h, true)
	if err != nil || !bytes.Equal(got, v) {
		t.Fatalf("large tensor: %v, first difference at %d", err, firstDiff(got, v))
	}
	t.Logf("%d values (%d payload bytes) decoded in place on the GPU", n, len(p))
}

// TestEntropyDecodeStream decodes entropy payloads of each field through
// DecodeStream with pieces of several sizes (the chunk index then spans
// pieces) bit for bit; a flipped byte fails the checksum.
func TestEntropyDecodeStream(t *testing.T) {
	_, d := requireGPU(t)
	rng := seeded(t)
	C := codec.ChunkValues
	for fi, f := range entropy.Fields {
		raw := synth.Normal(rng, 37*C+5, 0.02)
		if f.DType != "BF16" {
			raw = synth.Cast(raw, f.DType, 256)
		}
		noise := make([]byte, 2*C*f.Size) // not decodable in place: out of place
		for i := range noise {
			noise[i] = byte(rng.Uint32())
		}
		for _, v := range [][]byte{raw, append(noise, raw...)} {
			p, err := entropy.Encode(fi, v, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, seg := range []int{1000, 2 * C, 3 << 20} {
				got := make([]byte, 0, len(v))
				err := d.DecodeStream(bytes.NewReader(p), uint64(len(p)), make([]byte, seg), func(off uint64, b []byte) error {
					if off != uint64(len(got)) || len(b) > seg {
						t.Fatalf("%s: piece of %d bytes at %d after %d", f.Name(), len(b), off, len(got))
					}
					got = append(got, b...)
					return nil
				})
				if err != nil || !bytes.Equal(got, v) {
					t.Fatalf("%s, pieces of %d: %v, first difference at %d", f.Name(), seg, err, firstDiff(got, v))
				}
			}
			q := bytes.Clone(p)
			q[len(q)/2] ^= 0x10
			if err := d.DecodeStream(bytes.NewReader(q), uint64(len(q)), make([]byte, 1<<20), func(uint64, []byte) error { return nil }); !errors.Is(err, codec.ErrChecksum) {
				t.Errorf("%s: corrupt payload: %v", f.Name(), err)
			}
		}
	}
}
