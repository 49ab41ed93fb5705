package gpu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/internal/synth"
)

// requireGPU returns a context and decoder on device 0, or skips with the
// reason when there is no driver or GPU.
func requireGPU(t testing.TB) (*cuda.Context, *Decoder) {
	t.Helper()
	l, err := cuda.Open()
	if errors.Is(err, cuda.ErrNoDriver) {
		t.Skipf("no GPU: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := l.NewContext(0)
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDecoder(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(); ctx.Close() })
	return ctx, d
}

const guard = 4096

// run decodes payload p on the GPU into a poisoned buffer with guard
// regions on both sides, in place or out of place, and returns the decoded
// bytes and the kernel's error; it fails the test if a guard changed.
func run(t *testing.T, ctx *cuda.Context, d *Decoder, p []byte, h *codec.Header, inPlace bool) ([]byte, error) {
	t.Helper()
	return guarded(t, ctx, d, p, 2*h.Values, inPlace, func(dst, src cuda.DevicePtr, s cuda.Stream) error {
		if inPlace {
			return d.LaunchInPlace(dst, h, s)
		}
		return d.LaunchOutOfPlace(dst, src, h, s)
	})
}

// guarded runs launch(dst, src, s), which decodes payload p into n bytes
// at dst (in place: p copied to dst first; else from src), in buffers
// poisoned with guard regions on both sides, and returns the decoded bytes
// and the kernel's error; it fails the test if a guard changed.
func guarded(t *testing.T, ctx *cuda.Context, d *Decoder, p []byte, n uint64, inPlace bool, launch func(dst, src cuda.DevicePtr, s cuda.Stream) error) ([]byte, error) {
	t.Helper()
	s, err := ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.DestroyStream(s)
	total := guard + max(n, uint64(len(p))) + guard
	buf, err := ctx.Alloc(total)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Free(buf)
	ctx.MemsetD8Async(buf, 0xA5, total, s)
	var src cuda.DevicePtr
	if inPlace {
		ctx.CopyHtoDAsync(buf+guard, p, s)
	} else {
		src, err = ctx.Alloc(uint64(len(p)) + 2*guard)
		if err != nil {
			t.Fatal(err)
		}
		defer ctx.Free(src)
		ctx.MemsetD8Async(src, 0x5A, uint64(len(p))+2*guard, s)
		ctx.CopyHtoDAsync(src+guard, p, s)
		src += guard
	}
	if err := launch(buf+guard, src, s); err != nil {
		t.Fatal(err)
	}
	kerr := d.TakeError(s)
	host := make([]byte, total)
	ctx.CopyDtoHAsync(host, buf, s)
	if err := ctx.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
	end := guard + n
	if inPlace {
		end = guard + max(n, uint64(len(p)))
	}
	for i, b := range host {
		if (i < guard || uint64(i) >= end) && b != 0xA5 {
			t.Fatalf("byte %d outside the destination was written", i-guard)
		}
	}
	return host[guard : guard+n], kerr
}

func seeded(t *testing.T) *rand.Rand {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, 9))
}

type testCase struct {
	name   string
	values []byte
}

func cases(rng *rand.Rand, short bool) []testCase {
	C := codec.ChunkValues
	var cs []testCase
	all := make([]byte, 2*65536)
	for i := range 65536 {
		binary.LittleEndian.PutUint16(all[2*i:], uint16(i))
	}
	cs = append(cs, testCase{"all patterns in order", all})
	shuf := bytes.Clone(all)
	rng.Shuffle(65536, func(i, j int) {
		a, b := shuf[2*i:2*i+2], shuf[2*j:2*j+2]
		a[0], a[1], b[0], b[1] = b[0], b[1], a[0], a[1]
	})
	cs = append(cs, testCase{"all patterns shuffled", shuf})
	if short {
		cs = cs[1:]
	}
	embedded := synth.Normal(rng, 40*C, 0.02)
	for i := range 65536 {
		binary.LittleEndian.PutUint16(embedded[2*rng.IntN(40*C):], uint16(i))
	}
	cs = append(cs, testCase{"all patterns in normal data", embedded})
	sizes := []int{0, 1, 2, 3, 17, 1001, C - 1, C, C + 1, 2*C - 1, 2*C + 1, 64*C - 1, 64*C + 1, 200*C + 4097}
	if short {
		sizes = sizes[:11]
	}
	for _, n := range sizes {
		cs = append(cs, testCase{"normal n=" + itoa(n), synth.Normal(rng, n, 0.02)})
	}
	heavy := synth.Normal(rng, 30*C+7, 0.02)
	for c := 0; c < 30; c++ {
		rate := []float64{0, 0.001, 0.1, 0.166, 0.17, 0.5}[c%6]
		for i := c * C; i < min((c+1)*C, 30*C+7); i++ {
			if rng.Float64() < rate {
				binary.LittleEndian.PutUint16(heavy[2*i:], uint16(rng.Uint32()&0x807f|0x7f00))
			}
		}
	}
	cs = append(cs, testCase{"escape-heavy with raw chunks", heavy})
	rows := make([]byte, 2*(96*C+333))
	synth.FillNormal(rng, rows, 0.02, 1.5, 4096)
	cs = append(cs, testCase{"row-scaled", rows})
	return cs
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestDecodeMatchesReference(t *testing.T) {
	ctx, d := requireGPU(t)
	rng := seeded(t)
	for _, c := range cases(rng, testing.Short()) {
		p, st, err := codec.Encode(c.values)
		if err != nil {
			t.Fatal(err)
		}
		h, err := codec.ParseHeader(p)
		if err != nil {
			t.Fatal(err)
		}
		modes := []bool{false}
		if st.InPlace {
			modes = append(modes, true)
		}
		for _, inPlace := range modes {
			got, err := run(t, ctx, d, p, &h, inPlace)
			if err != nil {
				t.Fatalf("%s (in place %v): %v", c.name, inPlace, err)
			}
			if !bytes.Equal(got, c.values) {
				t.Fatalf("%s (in place %v): differs from the reference at byte %d", c.name, inPlace, firstDiff(got, c.values))
			}
		}
		t.Logf("%s: %d values, %d raw chunks, %d escapes, in place %v: ok", c.name, h.Values, st.RawChunks, st.Escapes, st.InPlace)
	}
}

func TestCorruptPayloads(t *testing.T) {
	ctx, d := requireGPU(t)
	rng := seeded(t)
	C := codec.ChunkValues
	v := synth.Normal(rng, 9*C+11, 0.02)
	for i := 0; i < 3000; i++ {
		binary.LittleEndian.PutUint16(v[2*rng.IntN(9*C+11):], 0x0001)
	}
	p, _, err := codec.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := codec.ParseHeader(p)
	failed := 0
	runs := 300
	if testing.Short() {
		runs = 40
	}
	for i := 0; i < runs; i++ {
		q := bytes.Clone(p)
		for k := 0; k <= rng.IntN(4); k++ {
			pos := codec.HeaderSize + rng.IntN(len(q)-codec.HeaderSize)
			q[pos] ^= byte(1 + rng.IntN(255))
		}
		// The header is trusted (the host parses it); everything after it
		// is what the kernel must survive. run checks the guards.
		_, err := run(t, ctx, d, q, &h, i%2 == 0)
		if err != nil {
			failed++
		}
	}
	t.Logf("%d of %d corrupted payloads reported by the kernel, none wrote outside its range", failed, runs)
}

// TestDecoderInterface: Decoder.Decode takes SplitZip and entropy
// payloads, and refuses a corrupt one on the host.
func TestDecoderInterface(t *testing.T) {
	_, d := requireGPU(t)
	rng := seeded(t)
	v := synth.Normal(rng, 5*codec.ChunkValues+3, 0.02)
	p, _, _ := codec.Encode(v)
	f32 := synth.Cast(v, "F32", 256)
	pe, err := entropy.Encode(2, f32, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ values, payload []byte }{{v, p}, {f32, pe}} {
		out := make([]byte, len(c.values))
		if err := d.Decode(out, c.payload); err != nil || !bytes.Equal(out, c.values) {
			t.Fatalf("Decode: %v", err)
		}
		c.payload[len(c.payload)/2] ^= 1
		if err := d.Decode(out, c.payload); !errors.Is(err, codec.ErrChecksum) {
			t.Errorf("Decode of a corrupt payload: %v", err)
		}
	}
}

// TestLarge decodes a tensor of more than 2^31 values once. It needs about
// 12 GiB of host memory and 5 GiB on the GPU; SPLITZIP_LARGE=1 enables it.
func TestLarge(t *testing.T) {
	if os.Getenv("SPLITZIP_LARGE") == "" {
		t.Skip("set SPLITZIP_LARGE=1 to decode a tensor of 2^31+5 values")
	}
	ctx, d := requireGPU(t)
	n := 1<<31 + 5
	v := largeBF16(n)
	p, st, err := codec.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	if !st.InPlace {
		t.Fatalf("a %d-value tensor is not in-place decodable: %v", n, st.NotInPlace)
	}
	h, _ := codec.ParseHeader(p)
	got, err := run(t, ctx, d, p, &h, true)
	if err != nil || !bytes.Equal(got, v) {
		t.Fatalf("large tensor: %v, first difference at %d", err, firstDiff(got, v))
	}
	t.Logf("%d values (%d payload bytes) decoded in place on the GPU", n, len(p))
}

// largeBF16 returns n BF16 values: 1 Mi N(0, 0.02) values repeated, the
// last one an exponent the fixed-rate codebook escapes.
func largeBF16(n int) []byte {
	v := make([]byte, 2*n)
	rng := rand.New(rand.NewPCG(1, 1))
	synth.FillNormal(rng, v[:2<<20], 0.02, 0, 0)
	for off := 2 << 20; off < len(v); off += 2 << 20 {
		copy(v[off:], v[:2<<20])
	}
	binary.LittleEndian.PutUint16(v[len(v)-2:], 0x7f81)
	return v
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestDecodeStream decodes every test case through DecodeStream with
// pieces of several sizes and compares with the input bit for bit; a
// payload with a flipped byte fails its checksum.
func TestDecodeStream(t *testing.T) {
	_, d := requireGPU(t)
	rng := seeded(t)
	for _, c := range cases(rng, testing.Short()) {
		p, st, err := codec.Encode(c.values)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for _, seg := range []int{2, 1000, 2 * codec.ChunkValues, 3 << 20} {
			if seg < 1000 && len(p) > 1<<16 {
				continue // a copy and a sync per two bytes: small payloads only
			}
			got := make([]byte, 0, len(c.values))
			err := d.DecodeStream(bytes.NewReader(p), uint64(len(p)), make([]byte, seg), func(off uint64, b []byte) error {
				if off != uint64(len(got)) || len(b) > seg {
					t.Fatalf("%s: piece of %d bytes at %d after %d", c.name, len(b), off, len(got))
				}
				got = append(got, b...)
				return nil
			})
			if err != nil || !bytes.Equal(got, c.values) {
				t.Fatalf("%s (in place %v), pieces of %d: %v, first difference at %d", c.name, st.InPlace, seg, err, firstDiff(got, c.values))
			}
		}
		if len(p) > codec.HeaderSize {
			q := bytes.Clone(p)
			q[codec.HeaderSize+rng.IntN(len(q)-codec.HeaderSize)] ^= 0x10
			if err := d.DecodeStream(bytes.NewReader(q), uint64(len(q)), make([]byte, 1<<20), func(uint64, []byte) error { return nil }); !errors.Is(err, codec.ErrChecksum) {
				t.Errorf("%s: corrupt payload: %v", c.name, err)
			}
		}
	}
}

// TestDecodeFewBlocks decodes, with grids of a few blocks each taking
// many chunks (in place, one block waits only on itself) and rings of 1
// to SZ_MAX_STAGES stages, data whose chunks' stored sizes vary from
// chunk to chunk (few escapes, many, raw), so that a block's stages hold
// chunks of every size pair.
func TestDecodeFewBlocks(t *testing.T) {
	ctx, d := requireGPU(t)
	rng := seeded(t)
	C := codec.ChunkValues
	n := 97*C + 123
	v := synth.Normal(rng, n, 0.02)
	for c := 0; c*C < n; c++ {
		rate := []float64{0, 0.001, 0.1, 0.166, 0.17, 0.5, 0, 0.05}[rng.IntN(8)]
		for i := c * C; i < min((c+1)*C, n); i++ {
			if rng.Float64() < rate {
				binary.LittleEndian.PutUint16(v[2*i:], uint16(rng.Uint32()&0x807f|0x7f00))
			}
		}
	}
	p, st, err := codec.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := codec.ParseHeader(p)
	full, smem := d.maxGrid, d.smem
	defer func() { d.maxGrid, d.smem = full, smem }()
	for _, stages := range []uint32{1, 2, uint32(decodeStages), maxStages} {
		// Fewer stages than the launcher's fit in the shared memory it
		// allowed; more need their own allowance.
		if err := ctx.SetFuncAttribute(d.fn, cuda.FuncAttrMaxDynamicSharedBytes, int(max(stages*stageBytes, smem))); err != nil {
			t.Fatal(err)
		}
		d.smem = stages * stageBytes
		for _, grid := range []uint32{1, 2, 3, 7, full} {
			d.maxGrid = grid
			for _, inPlace := range []bool{false, true} {
				if inPlace && !st.InPlace {
					continue
				}
				got, err := run(t, ctx, d, p, &h, inPlace)
				if err != nil {
					t.Fatalf("%d stages, grid %d, in place %v: %v", stages, grid, inPlace, err)
				}
				if !bytes.Equal(got, v) {
					t.Fatalf("%d stages, grid %d, in place %v: differs from the reference at byte %d", stages, grid, inPlace, firstDiff(got, v))
				}
			}
		}
	}
	t.Logf("%d chunks (%d raw, %d escapes), in place %v: ok", h.Chunks(), st.RawChunks, st.Escapes, st.InPlace)
}

// TestDecodeOutOfOrder: a launch given a ticket base past the device's
// counter (as when a decoder's launches run out of the order they were
// made in) reports it, writes nothing outside its range, and the decoder
// works again after TakeError.
func TestDecodeOutOfOrder(t *testing.T) {
	ctx, d := requireGPU(t)
	rng := seeded(t)
	v := synth.Normal(rng, 3*codec.ChunkValues+5, 0.02)
	p, st, err := codec.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := codec.ParseHeader(p)
	for _, inPlace := range []bool{false, true} {
		if inPlace && !st.InPlace {
			continue
		}
		for _, skew := range []uint32{1, 7, 1 << 20} {
			d.mu.Lock()
			d.tickets += skew
			d.mu.Unlock()
			_, err := run(t, ctx, d, p, &h, inPlace)
			if !errors.Is(err, ErrKernel) || !strings.Contains(err.Error(), "out of order") {
				t.Fatalf("in place %v, counters skewed by %d: %v, want the out-of-order error", inPlace, skew, err)
			}
			got, err := run(t, ctx, d, p, &h, inPlace)
			if err != nil || !bytes.Equal(got, v) {
				t.Fatalf("in place %v, after the out-of-order error: %v (equal %v)", inPlace, err, bytes.Equal(got, v))
			}
		}
	}
}
