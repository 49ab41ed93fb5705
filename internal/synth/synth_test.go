package synth

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splitzip/splitzip/safetensors"
)

func TestBF16(t *testing.T) {
	for _, c := range []struct {
		f    float32
		want uint16
	}{{0, 0}, {1, 0x3f80}, {-2, 0xc000}, {1.00390625, 0x3f80}, {1.01171875, 0x3f82}, {float32(math.Inf(1)), 0x7f80}} {
		if got := BF16(c.f); got != c.want {
			t.Errorf("BF16(%v) = %#04x, want %#04x", c.f, got, c.want)
		}
	}
	if v := BF16(float32(math.NaN())); v&0x7f80 != 0x7f80 || v&0x7f == 0 {
		t.Errorf("NaN became %#04x", v)
	}
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	paths, err := Write(context.Background(), dir, Config{Bytes: 4 << 20, Shards: 3, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 4 || filepath.Base(paths[3]) != safetensors.IndexFileName {
		t.Fatalf("wrote %v", paths)
	}
	ix, err := safetensors.ReadIndex(paths[3])
	if err != nil {
		t.Fatal(err)
	}
	var total uint64
	dtypes := map[string]int{}
	for _, p := range paths[:3] {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		h, err := safetensors.Read(f, st.Size(), p)
		if err != nil {
			t.Fatal(err)
		}
		for _, tn := range h.Tensors {
			total += tn.Size()
			dtypes[tn.DType]++
			if ix.WeightMap[tn.Name] != filepath.Base(p) {
				t.Errorf("%s is in %s, the index says %s", tn.Name, filepath.Base(p), ix.WeightMap[tn.Name])
			}
			if tn.Name == "model.norm.weight" {
				b := make([]byte, 2)
				f.ReadAt(b, int64(tn.Begin))
				if v := binary.LittleEndian.Uint16(b) >> 7; v < 120 || v > 128 {
					t.Errorf("norm weight exponent %d, want near 1.0", v)
				}
			}
		}
		f.Close()
	}
	if total < 3<<20 || total > 5<<20 {
		t.Errorf("%d tensor bytes for a 4 MiB request", total)
	}
	if dtypes["F32"] != 1 || dtypes["I64"] != 1 || dtypes["BF16"] < 10 {
		t.Errorf("dtypes %v", dtypes)
	}
}

// TestMix: the size mix has 60% of its tensors under 16 KiB and none over
// 4 MiB.
func TestMix(t *testing.T) {
	ts := Plan(Config{Mix: 4000, Seed: 1})
	under, over, total := 0, 0, uint64(0)
	for _, tn := range ts {
		switch {
		case tn.Size < 16<<10:
			under++
		case tn.Size > 4<<20:
			over++
		}
		total += tn.Size
	}
	if f := float64(under) / float64(len(ts)); len(ts) != 4000 || f < 0.57 || f > 0.63 || over > 0 || total < 200e6 {
		t.Errorf("%d tensors, %d under 16 KiB, %d over 4 MiB, %d bytes", len(ts), under, over, total)
	}
}

// TestTiny: tiny tensors are 32 bytes to 4 KiB, whole rows of 16 values,
// with names unique, and as many as asked.
func TestTiny(t *testing.T) {
	ts := Plan(Config{Tiny: 100000, Seed: 1})
	names := map[string]bool{}
	var lo, hi uint64 = 1 << 62, 0
	for _, tn := range ts {
		lo, hi = min(lo, tn.Size), max(hi, tn.Size)
		names[tn.Name] = true
		if tn.Size%32 != 0 {
			t.Errorf("%s: %d bytes, not whole rows of 16 values", tn.Name, tn.Size)
		}
	}
	if len(ts) != 100000 || len(names) != len(ts) || lo < 32 || hi > 4096 {
		t.Errorf("%d tensors, %d names, %d to %d bytes", len(ts), len(names), lo, hi)
	}
}

// TestMoE: 48 layers of 64 experts make more than 9,000 tensors, the
// experts' matrices 1.5 to 3 MiB, over 15 GB in all.
func TestMoE(t *testing.T) {
	ts := Plan(Config{MoE: 64})
	var total uint64
	experts := 0
	for _, tn := range ts {
		total += tn.Size
		if strings.Contains(tn.Name, ".experts.") {
			experts++
			if tn.Size < 3<<19 || tn.Size > 3<<20 {
				t.Errorf("%s: %d bytes", tn.Name, tn.Size)
			}
		}
	}
	if len(ts) < 9000 || experts != 48*64*3 || total < 15e9 {
		t.Errorf("%d tensors, %d expert matrices, %d bytes", len(ts), experts, total)
	}
	// A small one writes and reads back.
	dir := t.TempDir()
	if _, err := Write(context.Background(), dir, Config{MoE: 4, Layers: 2, Hidden: 256, Shards: 1}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	h, err := safetensors.Read(f, st.Size(), f.Name())
	if err != nil || len(h.Tensors) != 2*(7+4*3)+3 {
		t.Fatalf("%v, %d tensors", err, len(h.Tensors))
	}
}

// TestPeaked: the field takes values below 6, 3 most of the time, and the
// other bits vary; whole bytes are the field's own values.
func TestPeaked(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	v := Peaked(rng, 10000, 2, 10, 5, false)
	if len(v) != 20000 {
		t.Fatalf("%d bytes", len(v))
	}
	threes, others := 0, map[uint16]bool{}
	for i := 0; i < len(v); i += 2 {
		x := binary.LittleEndian.Uint16(v[i:])
		e := x >> 10 & 31
		if e >= 6 {
			t.Fatalf("field %d", e)
		}
		if e == 3 {
			threes++
		}
		others[x&^(31<<10)] = true
	}
	if threes < 7500 || threes > 8500 || len(others) < 1000 {
		t.Errorf("%d of 10000 fields are 3; %d different other bits", threes, len(others))
	}
	for _, b := range Peaked(rng, 1000, 1, 0, 8, true) {
		if (b-1)%7 != 0 || b > 36 {
			t.Fatalf("whole byte %d", b)
		}
	}
}

// TestWriteLeavesNothing: a Write cancelled after its first piece, and
// one whose index cannot be written (a folder in its place), leave no
// file behind, temporary or not.
func TestWriteLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cfg := Config{Bytes: 96 << 20, Shards: 2, Seed: 1, Progress: func(uint64) { cancel() }}
	if _, err := Write(ctx, dir, cfg); err == nil {
		t.Fatal("a cancelled Write returned no error")
	}
	if ents, _ := os.ReadDir(dir); len(ents) > 0 {
		t.Errorf("a cancelled Write left %d files, the first %s", len(ents), ents[0].Name())
	}
	dir = t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, safetensors.IndexFileName), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(context.Background(), dir, Config{Bytes: 1 << 20, Shards: 2, Seed: 1}); err == nil {
		t.Fatal("a Write whose index cannot be renamed into place returned no error")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != safetensors.IndexFileName {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("a failed Write left %v", names)
	}
}

// TestShardNames: more shards asked for than there are tensors to fill
// them: the files are named for those written, with no gaps.
func TestShardNames(t *testing.T) {
	dir := t.TempDir()
	paths, err := Write(context.Background(), dir, Config{Tiny: 10, Shards: 100, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 11 {
		t.Fatalf("%d files: %v", len(paths), paths)
	}
	for i, p := range paths[:10] {
		if want := filepath.Join(dir, fmt.Sprintf("model-%05d-of-00010.safetensors", i+1)); p != want {
			t.Errorf("file %d is %s, want %s", i, p, want)
		}
	}
}
