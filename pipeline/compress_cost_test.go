package pipeline

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splitzip/splitzip/costmodel"
	"github.com/splitzip/splitzip/shardcache"
)

// TestCostCodec: --codec cost stores each tensor as its profile's
// fastest kind, and the cache verifies. Where a payload costs a load more
// than its bytes save, the checkpoint's tensors stay raw, each with the
// model's reason; where coding is cheap, BF16 tensors get the faster of
// the two payloads and the other float dtypes entropy ones; integers stay
// raw.
func TestCostCodec(t *testing.T) {
	cheap := func(fixed, entropy float64) *costmodel.Profile {
		p := costmodel.Default()
		p.Raw = costmodel.Cost{Tensor: 1e-6, Rate: 1e9}
		p.RawSmall = p.Raw
		p.Fixed = costmodel.Cost{Rate: fixed}
		p.FixedSmall = p.Fixed
		p.Entropy, p.EntropySmall = costmodel.Cost{Rate: entropy}, costmodel.Cost{Rate: entropy}
		return p
	}
	dear := costmodel.Default()
	dear.Fixed.Tensor, dear.FixedSmall.Tensor, dear.Entropy.Tensor, dear.EntropySmall.Tensor = 1e-3, 1e-3, 1e-3, 1e-3
	floats := []string{"w.F16", "w.F32", "w.F8_E4M3", "w.F8_E5M2"}
	for _, c := range []struct {
		name    string
		p       *costmodel.Profile
		fixed   []string
		entropy []string
	}{
		{"coding dear", dear, nil, nil},
		{"fixed fastest", cheap(4e9, 2e9), []string{"w.BF16", "odd"}, floats},
		{"entropy fastest", cheap(2e9, 4e9), nil, append([]string{"w.BF16", "odd"}, floats...)},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			src, cache := filepath.Join(dir, "ck"), filepath.Join(dir, "cache")
			floatCheckpoint(t, filepath.Join(src, "model.safetensors"))
			_, err := Compress(context.Background(), src, CompressOptions{Output: cache, Jobs: 2, MinSaving: DefaultMinSaving,
				NoSync: true, Codec: CodecCost, Cost: c.p})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{}
			for _, n := range c.fixed {
				want[n] = shardcache.StoredFixed
			}
			for _, n := range c.entropy {
				want[n] = shardcache.StoredEntropy
			}
			ca, err := shardcache.Open(cache)
			if err != nil {
				t.Fatal(err)
			}
			if err := ca.Index().LoadStats(); err != nil {
				t.Fatal(err)
			}
			for _, tn := range ca.Index().Sources[0].Shards[0].Tensors {
				w, ok := want[tn.Name]
				if !ok {
					w = shardcache.StoredRaw
				}
				if tn.Stored != w {
					t.Errorf("%s (%s, %d bytes) stored %s, want %s (%s)", tn.Name, tn.DType, tn.Size, tn.Stored, w, tn.Reason)
				}
				isFloat := tn.DType != "I64" && tn.Size > 0
				if w == shardcache.StoredRaw && isFloat && !strings.HasPrefix(tn.Reason, "cost model: raw ") {
					t.Errorf("%s raw for %q, want the cost model's reason", tn.Name, tn.Reason)
				}
			}
			if v := mustVerify(t, cache); !v.OK() || v.Payloads != len(c.fixed)+len(c.entropy) {
				t.Fatalf("verify: %d payloads, %+v", v.Payloads, v.Problems)
			}
			// inspect's prediction by the same model: as stored is all raw
			// where the model kept everything raw, and faster where it coded.
			ins, err := Inspect(context.Background(), cache, InspectOptions{Cost: c.p})
			if err != nil {
				t.Fatal(err)
			}
			p := ins.Predicted
			if len(ins.Sources) != 1 || ins.Sources[0].Predicted == nil || *ins.Sources[0].Predicted != *p {
				t.Errorf("the one checkpoint's prediction %+v, the cache's %+v", ins.Sources, p)
			}
			switch {
			case p == nil || p.Raw <= 0:
				t.Fatalf("predicted %+v", p)
			case len(c.fixed)+len(c.entropy) == 0 && p.Stored != p.Raw:
				t.Errorf("all raw, predicted %+v", p)
			case len(c.fixed)+len(c.entropy) > 0 && p.Stored >= p.Raw:
				t.Errorf("coded where faster, predicted %+v", p)
			}
		})
	}
	bad := costmodel.Default()
	bad.Raw.Rate = 0
	_, err := Compress(context.Background(), t.TempDir(), CompressOptions{Output: filepath.Join(t.TempDir(), "c"), Codec: CodecCost, Cost: bad})
	if !errors.Is(err, costmodel.ErrProfile) || !errors.Is(err, ErrOption) {
		t.Fatalf("a bad profile: %v", err)
	}
}

// TestCostCodecGate: where no payload passes the gate (--min-saving),
// --codec cost keeps a float tensor raw with the gates' reason, naming
// each payload's estimate, and does not count it as the model's choice.
func TestCostCodecGate(t *testing.T) {
	p := costmodel.Default()
	free := costmodel.Cost{Rate: 1e15} // coding would win wherever allowed
	p.Fixed, p.FixedSmall, p.Entropy, p.EntropySmall = free, free, free, free
	dir := t.TempDir()
	src, cache := filepath.Join(dir, "ck"), filepath.Join(dir, "cache")
	floatCheckpoint(t, filepath.Join(src, "model.safetensors"))
	res, err := Compress(context.Background(), src, CompressOptions{Output: cache, Jobs: 2, MinSaving: 0.9, NoSync: true, Codec: CodecCost, Cost: p})
	if err != nil {
		t.Fatal(err)
	}
	if res.Totals.CostRawTensors != 0 {
		t.Errorf("%d tensors counted as kept raw by the model, none was weighed", res.Totals.CostRawTensors)
	}
	ca, err := shardcache.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	if err := ca.Index().LoadStats(); err != nil {
		t.Fatal(err)
	}
	for _, tn := range ca.Index().Sources[0].Shards[0].Tensors {
		if tn.DType == "I64" || tn.Size == 0 {
			continue
		}
		if tn.Stored != shardcache.StoredRaw || !strings.HasPrefix(tn.Reason, "no payload passes the gate (90.0% saved): ") || !strings.Contains(tn.Reason, "entropy payload of about") ||
			strings.Contains(tn.Reason, fmt.Sprintf("about %d bytes saves 0.0%%", tn.Size)) {
			t.Errorf("%s (%s) stored %s for %q", tn.Name, tn.DType, tn.Stored, tn.Reason)
		}
		if tn.DType == "BF16" && !strings.Contains(tn.Reason, "fixed payload of about") {
			t.Errorf("%s: %q names no fixed payload", tn.Name, tn.Reason)
		}
	}
}

// TestCostCodecKept: --codec cost into a cache whose payloads an earlier
// run stored keeps them, and counts as kept those its model would keep
// raw (none where the model codes them).
func TestCostCodecKept(t *testing.T) {
	dear := costmodel.Default()
	dear.Fixed.Tensor, dear.FixedSmall.Tensor, dear.Entropy.Tensor, dear.EntropySmall.Tensor = 1e-3, 1e-3, 1e-3, 1e-3
	cheap := costmodel.Default()
	free := costmodel.Cost{Rate: 1e15}
	cheap.Fixed, cheap.FixedSmall, cheap.Entropy, cheap.EntropySmall = free, free, free, free
	for _, c := range []struct {
		name string
		p    *costmodel.Profile
		kept bool
	}{{"model keeps raw", dear, true}, {"model codes", cheap, false}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			src, cache := filepath.Join(dir, "ck"), filepath.Join(dir, "cache")
			floatCheckpoint(t, filepath.Join(src, "model.safetensors"))
			first, err := Compress(context.Background(), src, CompressOptions{Output: cache, NoSync: true, Codec: CodecEntropy})
			if err != nil {
				t.Fatal(err)
			}
			res, err := Compress(context.Background(), src, CompressOptions{Output: cache, NoSync: true, Codec: CodecCost, Cost: c.p})
			if err != nil {
				t.Fatal(err)
			}
			payloads := first.Totals.CompressedTensors
			if payloads == 0 {
				t.Fatal("the first run stored no payload")
			}
			if want := map[bool]int{true: payloads, false: 0}[c.kept]; res.Totals.KeptTensors != want {
				t.Errorf("%d tensors counted as kept, want %d of %d payloads", res.Totals.KeptTensors, want, payloads)
			}
		})
	}
}
