package gpu

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/scatter"
)

// runBatch decodes payloads ps (heads hs, trusted as the host checked
// them) with one batch launch from a staging buffer laid out as a pack's
// (the payloads, then their descriptors), into destinations poisoned with
// guard regions between and around them, and returns each one's values
// and the kernel's error; it fails the test if a guard changed.
func runBatch(t *testing.T, ctx *cuda.Context, d *Decoder, ps [][]byte, hs []*entropy.Head) ([][]byte, error) {
	t.Helper()
	align := func(n uint64) uint64 { return (n + 15) &^ 15 }
	var at uint64
	offs := make([]uint64, len(ps))
	for i, p := range ps {
		offs[i], at = at, align(at+uint64(len(p)))
	}
	host := make([]byte, at+scatter.EntropyBytes(len(ps)))
	for i, p := range ps {
		copy(host[offs[i]:], p)
	}
	dsts := make([]uint64, len(ps))
	size := uint64(guard)
	for i, h := range hs {
		dsts[i], size = size, size+align(h.ValueBytes())+guard
	}
	s, err := ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.DestroyStream(s)
	out, err := ctx.Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Free(out)
	stage, err := ctx.Alloc(uint64(len(host)) + guard)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Free(stage)
	ents := make([]scatter.Entropy, len(ps))
	for i := range ps {
		ents[i] = scatter.Entropy{Name: itoa(i), Dst: uint64(out) + dsts[i], Src: offs[i], Size: hs[i].ValueBytes(), Head: hs[i]}
	}
	if err := scatter.PutEntropy(host, at, 0, ents); err != nil {
		t.Fatal(err)
	}
	ctx.MemsetD8Async(out, 0xA5, size, s)
	ctx.MemsetD8Async(stage, 0x5A, uint64(len(host))+guard, s)
	ctx.CopyHtoDAsync(stage, host, s)
	if err := d.LaunchEntropyBatch(stage, at, PlanEntropyBatch(ents), s); err != nil {
		t.Fatal(err)
	}
	kerr := d.TakeError(s)
	got := make([]byte, size)
	ctx.CopyDtoHAsync(got, out, s)
	if err := ctx.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
	vals := make([][]byte, len(ps))
	var end uint64
	for i, h := range hs {
		for j := end; j < dsts[i]; j++ {
			if got[j] != 0xA5 {
				t.Fatalf("byte %d before payload %d's values was written", j, i)
			}
		}
		vals[i], end = got[dsts[i]:dsts[i]+h.ValueBytes()], dsts[i]+h.ValueBytes()
	}
	for j := end; j < size; j++ {
		if got[j] != 0xA5 {
			t.Fatalf("byte %d after the last payload's values was written", j)
		}
	}
	return vals, kerr
}

// batchCases returns the test tensors of every field, encoded and
// checked (short: the sizes of a packed tensor, up to 2 MiB, and the
// larger ones too).
func batchCases(t *testing.T, rng *rand.Rand) (names []string, vals, ps [][]byte, hs []*entropy.Head) {
	for fi, f := range entropy.Fields {
		for _, c := range entropyCases(rng, f, true) {
			p, err := entropy.Encode(fi, c.values, 0)
			if err != nil {
				t.Fatalf("%s, %s: %v", f.Name(), c.name, err)
			}
			h, err := entropy.Check(p)
			if err != nil {
				t.Fatalf("%s, %s: %v", f.Name(), c.name, err)
			}
			names, vals, ps, hs = append(names, f.Name()+", "+c.name), append(vals, c.values), append(ps, p), append(hs, h)
		}
	}
	return names, vals, ps, hs
}

// TestEntropyBatchMatchesReference decodes the test tensors of every
// field that a batch takes with one batch launch, all fields together,
// and compares each with its tensor bit for bit; then with a launch a
// payload, in the other order.
func TestEntropyBatchMatchesReference(t *testing.T) {
	ctx, d := requireGPU(t)
	rng := seeded(t)
	names, vals, ps, hs := batchCases(t, rng)
	pairs := 0
	for _, h := range hs {
		if h.Pairs {
			pairs++
		}
	}
	if pairs == 0 || pairs == len(hs) {
		t.Fatalf("%d of %d payloads of pair symbols", pairs, len(hs))
	}
	got, err := runBatch(t, ctx, d, ps, hs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ps {
		if !bytes.Equal(got[i], vals[i]) {
			t.Fatalf("%s: differs from the reference at byte %d", names[i], firstDiff(got[i], vals[i]))
		}
	}
	for i := len(ps) - 1; i >= 0; i -= 7 {
		one, err := runBatch(t, ctx, d, ps[i:i+1], hs[i:i+1])
		if err != nil || !bytes.Equal(one[0], vals[i]) {
			t.Fatalf("%s alone: %v, equal %v", names[i], err, err == nil && bytes.Equal(one[0], vals[i]))
		}
	}
	t.Logf("%d payloads (%d of pair symbols) in one launch, bit for bit", len(ps), pairs)
}

// TestEntropyBatchCorrupt launches batches in which some payloads have
// flipped bytes in their records or chunk index, or code lengths and
// pair tables that the host's check would refuse: the kernel must report
// them, decode the untouched ones of the batch right, never write
// outside the destinations (runBatch checks the guards) or hang. Run
// under compute-sanitizer it must stay clean.
func TestEntropyBatchCorrupt(t *testing.T) {
	ctx, d := requireGPU(t)
	rng := seeded(t)
	names, vals, ps, hs := batchCases(t, rng)
	rounds := 12
	if testing.Short() {
		rounds = 4
	}
	reported := 0
	for r := range rounds {
		qs := make([][]byte, len(ps))
		qh := make([]*entropy.Head, len(hs))
		bad := map[int]bool{}
		for i, p := range ps {
			q, h := bytes.Clone(p), *hs[i]
			qs[i], qh[i] = q, &h
			if rng.IntN(4) != 0 || h.Values == 0 {
				continue
			}
			bad[i] = true
			f := entropy.Fields[h.Field]
			switch rng.IntN(4) {
			case 0: // the chunk index
				q[h.Index+uint64(rng.IntN(int(h.Size-h.Index)))] ^= byte(1 + rng.IntN(255))
			case 1:
				bits := f.Bits
				if h.Pairs {
					bits = 8
				}
				if h.Pairs && rng.IntN(2) == 0 {
					h.PairFields[rng.IntN(256)] = uint16(rng.Uint32())
				} else {
					h.Lengths[rng.IntN(1<<bits)] = uint8(rng.IntN(13))
				}
			default: // the records
				for k := 0; k <= rng.IntN(4); k++ {
					q[h.Others+uint64(rng.IntN(int(h.Index-h.Others)))] ^= byte(1 + rng.IntN(255))
				}
			}
		}
		got, err := runBatch(t, ctx, d, qs, qh)
		if err != nil {
			if !errors.Is(err, ErrKernel) {
				t.Fatalf("round %d: %v", r, err)
			}
			reported++
		}
		for i := range ps {
			if !bad[i] && !bytes.Equal(got[i], vals[i]) {
				t.Fatalf("round %d: %s, untouched, differs from the reference beside damaged payloads", r, names[i])
			}
		}
	}
	t.Logf("%d of %d batches with damaged payloads reported; none wrote outside its destinations", reported, rounds)
	if reported == 0 {
		t.Error("no batch with damaged payloads was reported")
	}
}
