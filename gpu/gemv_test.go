package gpu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/internal/synth"
)

// requireGemv returns a context and the matrix-vector kernels, or skips
// when there is no GPU.
func requireGemv(t *testing.T) (*cuda.Context, *Gemv) {
	t.Helper()
	ctx, _ := requireGPU(t)
	g, err := NewGemv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return ctx, g
}

// gemvRun is one product's operands on the device: W's payload and W in
// BF16, x, and y inside guard regions.
type gemvRun struct {
	ctx        *cuda.Context
	p, w, x, y cuda.DevicePtr
	pLen       uint64 // payload bytes at p
	rows, cols uint64
	batch      int
	h          codec.Header
	yBytes     uint64
}

func upload(t *testing.T, ctx *cuda.Context, b []byte, extra uint64) cuda.DevicePtr {
	t.Helper()
	d, err := ctx.Alloc(uint64(len(b)) + extra)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Free(d) })
	if len(b) > 0 {
		if err := ctx.CopyHtoDAsync(d, b, 0); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// newGemvRun uploads W (rows x cols BF16 values), its fixed payload and
// batch vectors x.
func newGemvRun(t *testing.T, ctx *cuda.Context, w []byte, rows, cols uint64, x []byte, batch int) *gemvRun {
	t.Helper()
	p, _, err := codec.Encode(w)
	if err != nil {
		t.Fatal(err)
	}
	r := &gemvRun{ctx: ctx, rows: rows, cols: cols, batch: batch, yBytes: 2 * rows * uint64(batch)}
	if r.h, err = codec.ParseHeader(p); err != nil {
		t.Fatal(err)
	}
	r.p, r.pLen, r.w, r.x = upload(t, ctx, p, 0), uint64(len(p)), upload(t, ctx, w, 0), upload(t, ctx, x, 0)
	r.y = upload(t, ctx, nil, r.yBytes+2*guard)
	return r
}

// run launches the fused product (or the reference) into a poisoned y
// and returns y and the kernels' error; a changed guard fails the test.
func (r *gemvRun) run(t *testing.T, g *Gemv, ref bool) ([]byte, error) {
	t.Helper()
	if err := r.ctx.MemsetD8Async(r.y, 0xA5, r.yBytes+2*guard, 0); err != nil {
		t.Fatal(err)
	}
	y := r.y + guard
	var err error
	if ref {
		err = g.Reference(r.w, r.rows, r.cols, r.x, y, r.batch, 0)
	} else {
		err = g.Fixed(r.p, r.pLen, &r.h, r.rows, r.cols, r.x, y, r.batch, 0)
	}
	if err != nil {
		t.Fatal(err)
	}
	kerr := g.TakeError(0)
	host := make([]byte, r.yBytes+2*guard)
	if err := r.ctx.CopyDtoHAsync(host, r.y, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.ctx.StreamSynchronize(0); err != nil {
		t.Fatal(err)
	}
	for i, b := range append(host[:guard:guard], host[guard+r.yBytes:]...) {
		if b != 0xA5 {
			t.Fatalf("guard byte %d changed to %#x", i, b)
		}
	}
	return host[guard : guard+r.yBytes], kerr
}

func bf16(v uint16) float64 { return float64(math.Float32frombits(uint32(v) << 16)) }

// checkProduct compares y (batch x rows BF16) with W x computed in float64:
// within 2 BF16 ulps of the exact value, plus the fp32 accumulation's
// bound on the sum of the products' magnitudes. Non-finite sums are
// skipped (the fused and reference kernels are compared bit for bit).
func checkProduct(t *testing.T, w []byte, rows, cols uint64, x []byte, batch int, y []byte) {
	t.Helper()
	bad := 0
	for b := range uint64(batch) {
		for r := range rows {
			var sum, mag float64
			for c := range cols {
				wv := bf16(binary.LittleEndian.Uint16(w[2*(r*cols+c):]))
				xv := bf16(binary.LittleEndian.Uint16(x[2*(b*cols+c):]))
				sum += wv * xv
				mag += math.Abs(wv * xv)
			}
			if math.IsInf(mag, 0) || math.IsNaN(mag) {
				continue
			}
			got := bf16(binary.LittleEndian.Uint16(y[2*(b*rows+r):]))
			ulp := math.Ldexp(1, max(math.Ilogb(math.Abs(sum)), -126)-7)
			if tol := 2*ulp + 1e-5*mag; math.Abs(got-sum) > tol {
				if bad++; bad <= 5 {
					t.Errorf("y[%d][%d] = %g, W x = %g (tolerance %g)", b, r, got, sum, tol)
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d outputs off", bad, uint64(batch)*rows)
	}
}

// TestGemvMatchesReference: on every shape and batch, the fused product
// from the payload equals the reference kernel's from the BF16 matrix bit
// for bit, and both are W x within rounding: normal weights, row-scaled,
// escape-heavy ones with raw chunks, and every BF16 bit pattern (NaNs,
// infinities, subnormals); with a tile's columns split among 8 warps and
// among 4 (each fused kernel against the reference of its split).
func TestGemvMatchesReference(t *testing.T) {
	ctx, g := requireGemv(t)
	rng := seeded(t)
	C := uint64(codec.ChunkValues)
	type mat struct {
		name       string
		rows, cols uint64
		fill       func(w []byte)
	}
	normal := func(w []byte) { synth.FillNormal(rng, w, 0.02, 0, 0) }
	mats := []mat{
		{"normal 64x4096", 64, 4096, normal},
		{"normal 40x14336", 40, 14336, normal},
		{"normal 9x16", 9, 16, normal},
		{"normal 37x48 (a step of 64 columns cut short)", 37, 48, normal},
		{"normal 19x2064 (rows across chunks, odd row count)", 19, 2064, normal},
		{"normal 3x40000 (a row over three chunks)", 3, 40000, normal},
		{"row-scaled 96x4096", 96, 4096, func(w []byte) { synth.FillNormal(rng, w, 0.02, 1.5, 4096) }},
		{"normal 160x8192 (80 chunks: groups past the first)", 160, 8192, normal},
		{"escape-heavy with raw chunks 33x8192", 33, 8192, func(w []byte) {
			synth.FillNormal(rng, w, 0.02, 0, 0)
			for c := uint64(0); c*C < uint64(len(w)/2); c++ {
				rate := []float64{0, 0.001, 0.1, 0.166, 0.17, 0.5}[c%6]
				for i := c * C; i < min((c+1)*C, uint64(len(w)/2)); i++ {
					if rng.Float64() < rate { // exponents far below the codebook's: escapes
						binary.LittleEndian.PutUint16(w[2*i:], uint16(rng.Uint32()&0x807f|rng.Uint32N(0x50)<<7))
					}
				}
			}
		}},
		{"every bit pattern 8x8192", 8, 8192, func(w []byte) {
			for i := range 65536 {
				binary.LittleEndian.PutUint16(w[2*i:], uint16(i))
			}
			rng.Shuffle(65536, func(i, j int) {
				a, b := w[2*i:2*i+2], w[2*j:2*j+2]
				a[0], a[1], b[0], b[1] = b[0], b[1], a[0], a[1]
			})
		}},
	}
	for _, m := range mats {
		w := make([]byte, 2*m.rows*m.cols)
		m.fill(w)
		for split := range gemvSplits {
			g.force = split
			warps := gemvSplits[split].warps
			for _, batch := range []int{1, 2, 3, 8, 12, 16} {
				x := make([]byte, 2*m.cols*uint64(batch))
				synth.FillNormal(rng, x, 1, 0, 0)
				r := newGemvRun(t, ctx, w, m.rows, m.cols, x, batch)
				fused, err := r.run(t, g, false)
				if err != nil {
					t.Fatalf("%s, batch %d, %d warps a tile: %v", m.name, batch, warps, err)
				}
				ref, err := r.run(t, g, true)
				if err != nil {
					t.Fatalf("%s, batch %d, %d warps a tile, reference: %v", m.name, batch, warps, err)
				}
				if !bytes.Equal(fused, ref) {
					i := 0
					for fused[i] == ref[i] {
						i++
					}
					t.Fatalf("%s, batch %d, %d warps a tile: the fused product differs from the reference first at output %d", m.name, batch, warps, i/2)
				}
				if m.name[:5] != "every" {
					checkProduct(t, w, m.rows, m.cols, x, batch, ref)
				}
			}
		}
	}
}

// TestGemvCorruptPayloads: a payload with damaged tables or escapes is
// reported (never a read outside it: compute-sanitizer checks that on the
// GPU machine) and y's guards hold; random damage to chunk data gives
// garbage or an error, never a fault; with a tile's columns split among
// 8 warps and among 4.
func TestGemvCorruptPayloads(t *testing.T) {
	ctx, g := requireGemv(t)
	for split := range gemvSplits {
		g.force = split
		t.Run(fmt.Sprintf("%d warps a tile", gemvSplits[split].warps), func(t *testing.T) { corruptPayloads(t, ctx, g) })
	}
}

// corruptPayloads is TestGemvCorruptPayloads with g's split.
func corruptPayloads(t *testing.T, ctx *cuda.Context, g *Gemv) {
	rng := seeded(t)
	const rows, cols = 40, 14336
	w := make([]byte, 2*rows*cols)
	synth.FillNormal(rng, w, 0.02, 0, 0)
	x := make([]byte, 2*cols)
	synth.FillNormal(rng, x, 1, 0, 0)
	good, _, err := codec.Encode(w)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := codec.ParseHeader(good)
	table := binary.LittleEndian.Uint64(good[codec.HeaderSize:])
	last := table + 16*(h.Chunks()-1) // the last chunk's entry (one group)
	for _, c := range []struct {
		name   string
		damage func(p []byte)
		want   bool // an error must be reported
	}{
		{"group table past the end", func(p []byte) { binary.LittleEndian.PutUint64(p[codec.HeaderSize:], 1<<40) }, true},
		{"group table misaligned", func(p []byte) { binary.LittleEndian.PutUint64(p[codec.HeaderSize:], table+8) }, true},
		{"chunk data past the end", func(p []byte) { binary.LittleEndian.PutUint64(p[last:], uint64(len(p))) }, true},
		{"escape count past the end", func(p []byte) { binary.LittleEndian.PutUint16(p[last+12:], 0xFFFE) }, true},
		// Chunk 0 lies in a full tile, whose steps go in spans: some of
		// its lanes find the bad entry, others (rows in chunk 1) do not.
		{"first chunk's data past the end", func(p []byte) { binary.LittleEndian.PutUint64(p[table:], uint64(len(p))) }, true},
		// The most escapes an entry can name fit in this payload after
		// the first chunk: other chunks' bytes read as its escapes, within
		// the payload (an error is likely, not certain).
		{"first chunk's escape count over its data", func(p []byte) { binary.LittleEndian.PutUint16(p[table+12:], 0xFFFE) }, false},
		{"escapes out of order", func(p []byte) {
			// A chunk whose escapes are made to run backwards.
			off := binary.LittleEndian.Uint64(p[table:])
			esc := binary.LittleEndian.Uint16(p[table+12:])
			binary.LittleEndian.PutUint16(p[table+12:], max(esc, 2))
			at := off + C + C/2 // the escape stream of a full coded chunk (align16(C) + align16(C/2))
			binary.LittleEndian.PutUint16(p[at:], 9)
			binary.LittleEndian.PutUint16(p[at+2:], 3)
		}, true},
		{"random bytes in chunk data", func(p []byte) {
			for range 64 {
				p[table+4096+uint64(rng.IntN(len(p)-int(table)-4096))] ^= byte(1 + rng.IntN(255))
			}
		}, false},
	} {
		p := bytes.Clone(good)
		c.damage(p)
		r := newGemvRun(t, ctx, w, rows, cols, x, 1)
		if err := ctx.CopyHtoDAsync(r.p, p, 0); err != nil {
			t.Fatal(err)
		}
		r.h = h
		_, err := r.run(t, g, false)
		switch {
		case c.want && !errors.Is(err, ErrKernel):
			t.Errorf("%s: %v, want ErrKernel", c.name, err)
		case err != nil && !errors.Is(err, ErrKernel):
			t.Errorf("%s: %v", c.name, err)
		}
	}
	// The error bits were taken: a good payload runs clean after them.
	r := newGemvRun(t, ctx, w, rows, cols, x, 1)
	if _, err := r.run(t, g, false); err != nil {
		t.Errorf("a good payload after the damaged ones: %v", err)
	}
}

// C is codec.ChunkValues, for offsets in tests.
const C = codec.ChunkValues

// TestGemvShapes: operands that do not fit are refused before a launch.
func TestGemvShapes(t *testing.T) {
	ctx, g := requireGemv(t)
	w := make([]byte, 2*16*64)
	synth.FillNormal(rand.New(rand.NewPCG(1, 2)), w, 0.02, 0, 0)
	r := newGemvRun(t, ctx, w, 16, 64, make([]byte, 2*64*17), 1)
	for name, f := range map[string]func() error{
		"wrong value count": func() error { return g.Fixed(r.p, r.pLen, &r.h, 16, 72, r.x, r.y, 1, 0) },
		"payload past w":    func() error { return g.Fixed(r.p, r.pLen-1, &r.h, 16, 64, r.x, r.y, 1, 0) },
		"cols not /16":      func() error { return g.Reference(r.w, 8, 24, r.x, r.y, 1, 0) },
		"batch 0":           func() error { return g.Fixed(r.p, r.pLen, &r.h, 16, 64, r.x, r.y, 0, 0) },
		"batch 17":          func() error { return g.Fixed(r.p, r.pLen, &r.h, 16, 64, r.x, r.y, 17, 0) },
		"x misaligned":      func() error { return g.Fixed(r.p, r.pLen, &r.h, 16, 64, r.x+2, r.y, 1, 0) },
	} {
		if err := f(); !errors.Is(err, ErrShape) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestGemvOperands: what a launch is refused for, without a GPU: shapes
// the kernels do not take, pointers out of alignment, a payload whose
// header says more bytes than the caller has, a value count that only
// matches modulo 2^64.
func TestGemvOperands(t *testing.T) {
	w := make([]byte, 2*16*64)
	synth.FillNormal(rand.New(rand.NewPCG(1, 2)), w, 0.02, 0, 0)
	p, _, err := codec.Encode(w)
	if err != nil {
		t.Fatal(err)
	}
	h, err := codec.ParseHeader(p)
	if err != nil {
		t.Fatal(err)
	}
	n := uint64(len(p))
	if err := fixedFits(&h, n, 16, 64); err != nil {
		t.Fatal(err)
	}
	if err := operandsFit(0, 16, 2, 16, 64, 16); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"payload past w":        fixedFits(&h, n-1, 16, 64),
		"wrong value count":     fixedFits(&h, n, 16, 80),
		"count wraps past 2^64": fixedFits(&h, n, 1024, 1<<54+1), // 2^64 + 1024 values
		"batch 0":               operandsFit(0, 16, 2, 16, 64, 0),
		"batch 17":              operandsFit(0, 16, 2, 16, 64, 17),
		"cols not /16":          operandsFit(0, 16, 2, 16, 24, 1),
		"no rows":               operandsFit(0, 16, 2, 0, 64, 1),
		"values past 2^62":      operandsFit(0, 16, 2, 1<<32, 1<<32, 1),
		"w misaligned":          operandsFit(8, 16, 2, 16, 64, 1),
		"x misaligned":          operandsFit(0, 18, 2, 16, 64, 1),
		"y misaligned":          operandsFit(0, 16, 3, 16, 64, 1),
	} {
		if !errors.Is(err, ErrShape) {
			t.Errorf("%s: %v, want ErrShape", name, err)
		}
	}
}

// TestGemvSplit: how many warps split a tile's columns, without a GPU:
// 4 where that fills every SM with 16 warps, else 8, and what
// GemvWarpsEnv may force.
func TestGemvSplit(t *testing.T) {
	for _, c := range []struct {
		tiles uint64
		sms   int
		warps int
	}{
		{64, 132, 8},   // 1024 rows on an H100
		{256, 132, 8},  // 4096 rows: 1,024 warps of 4 for 2,112 places
		{527, 132, 8},  // 2,108
		{528, 132, 4},  // 2,112
		{896, 132, 4},  // 14336 rows
		{8016, 132, 4}, // 128256 rows
		{4, 0, 4},      // no SM count: taken as 1
		{3, 1, 8},
		{1 << 31, 132, 4},
	} {
		if got := gemvSplits[gemvSplit(c.tiles, c.sms)].warps; got != c.warps {
			t.Errorf("%d tiles on %d SMs: %d warps a tile, want %d", c.tiles, c.sms, got, c.warps)
		}
	}
	for v, want := range map[string]int{"": 0, "4": 4, "8": 8} {
		i, err := gemvForce(v)
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		got := 0
		if i >= 0 {
			got = gemvSplits[i].warps
		}
		if got != want {
			t.Errorf("%q forces %d warps (0: none), want %d", v, got, want)
		}
	}
	for _, v := range []string{"1", "2", "3", "16", "0", "x", " 8"} {
		if _, err := gemvForce(v); !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), GemvWarpsEnv) || !strings.Contains(err.Error(), "8, 4") {
			t.Errorf("%q: %v, want ErrOption naming %s and the splits", v, err, GemvWarpsEnv)
		}
	}
}
