package distplan

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/internal/fixture"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/shardcache"
)

func plan(t *testing.T, ranks int, rules string) (*Plan, *shardcache.Source) {
	t.Helper()
	c, s := fixture.Compressed(t, synth.Config{Bytes: 6 << 20, Shards: 2, Seed: 31}, pipeline.CompressOptions{})
	rs, err := ParseRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(c, s, ranks, rs)
	if err != nil {
		t.Fatal(err)
	}
	return p, s
}

// TestReadsOncePerNode: every object is read by one rank, the reads are
// balanced within the largest object, and a replicated load leaves every
// rank with every tensor, receiving what others read.
func TestReadsOncePerNode(t *testing.T) {
	for _, ranks := range []int{1, 2, 4, 8} {
		p, _ := plan(t, ranks, "")
		var read, largest, raw uint64
		for _, tn := range p.Tensors {
			raw += tn.Size
			largest = max(largest, tn.Object)
			if len(tn.Parts) != ranks {
				t.Fatalf("%s: %d parts for %d ranks", tn.Name, len(tn.Parts), ranks)
			}
		}
		for r, st := range p.PerRank {
			read += st.Read
			if st.Read > p.Read/uint64(ranks)+largest {
				t.Errorf("%d ranks: rank %d reads %d of %d bytes (largest object %d)", ranks, r, st.Read, p.Read, largest)
			}
			if st.Bytes != raw {
				t.Errorf("%d ranks: rank %d ends with %d raw bytes, want %d", ranks, r, st.Bytes, raw)
			}
			if st.Received != p.Read-st.Read && ranks > 1 {
				t.Errorf("%d ranks: rank %d receives %d bytes, others read %d", ranks, r, st.Received, p.Read-st.Read)
			}
		}
		if read != p.Read {
			t.Errorf("%d ranks: reads sum to %d of %d", ranks, read, p.Read)
		}
	}
}

// TestShardDim0: sharded along dimension 0, the ranks' value ranges
// partition each tensor in order and their chunk ranges cover them.
func TestShardDim0(t *testing.T) {
	p, _ := plan(t, 4, "*embed*=replicate,*lm_head*=replicate,*.weight=shard:0")
	payloads := 0
	for _, tn := range p.Tensors {
		if !tn.Placement.Shard {
			continue
		}
		var next, bytes uint64
		for r, pt := range tn.Parts {
			if pt.Rank != r || pt.Values[0] != next || pt.Values[1] < pt.Values[0] {
				t.Fatalf("%s: part %d is %+v after value %d", tn.Name, r, pt, next)
			}
			next = pt.Values[1]
			bytes += pt.Bytes
			if tn.Stored == shardcache.StoredFixed {
				if pt.Chunks[0]*codec.ChunkValues > pt.Values[0] || pt.Chunks[1]*codec.ChunkValues < pt.Values[1] {
					t.Errorf("%s: chunks %v do not cover values %v", tn.Name, pt.Chunks, pt.Values)
				}
				if pt.Rank == tn.Reader && pt.Wire != 0 || pt.Rank != tn.Reader && pt.Wire > tn.Object {
					t.Errorf("%s: part %d receives %d of %d stored bytes", tn.Name, r, pt.Wire, tn.Object)
				}
			}
		}
		if bytes != tn.Size || next != tn.Size/2 && tn.DType == "BF16" {
			t.Errorf("%s: parts of %d bytes ending at value %d, the tensor has %d bytes", tn.Name, bytes, next, tn.Size)
		}
		if tn.Stored == shardcache.StoredFixed {
			payloads++
		}
	}
	if payloads == 0 {
		t.Fatal("no payloads in the fixture")
	}
}

// TestShardOtherDim: along another dimension a payload's part is the
// whole payload, its index range one part of the dimension.
func TestShardOtherDim(t *testing.T) {
	p, _ := plan(t, 2, "*norm*=replicate,*.weight=shard:1,*=replicate")
	found := false
	for _, tn := range p.Tensors {
		if !tn.Placement.Shard {
			continue
		}
		found = true
		for _, pt := range tn.Parts {
			if pt.Index[1]-pt.Index[0] != tn.Shape[1]/2 || (tn.Stored == shardcache.StoredFixed) != pt.Whole {
				t.Errorf("%s: part %+v of shape %v", tn.Name, pt, tn.Shape)
			}
		}
	}
	if !found {
		t.Fatal("no tensor sharded")
	}
}

func TestPlanErrors(t *testing.T) {
	c, s := fixture.Compressed(t, synth.Config{Bytes: 2 << 20, Shards: 1, Seed: 32}, pipeline.CompressOptions{})
	// A rule naming a tensor outright that lacks the dimension is refused.
	named := s.Shards[0].Tensors[0].Name + "=shard:3"
	for _, rules := range []string{named, "*=shard:0"} {
		rs, err := ParseRules(rules)
		if err != nil {
			t.Fatal(err)
		}
		ranks := 2
		if rules == "*=shard:0" {
			ranks = 7 // no dimension of the fixture splits into 7
		}
		_, err = New(c, s, ranks, rs)
		var te *shardcache.TensorError
		if !errors.Is(err, ErrPlan) || !errors.As(err, &te) || !strings.HasPrefix(te.Tensor, "model.") || strings.Contains(err.Error(), "shards nothing") {
			t.Errorf("%s on %d ranks: %v, want ErrPlan naming the tensor (a TensorError, for --json)", rules, ranks, err)
		}
	}
	// A wildcard rule passes over the tensors without its dimension (a
	// scalar under "*=shard:0"): the next rule places them, else they are
	// replicated.
	rs, _ := ParseRules("*=shard:1,*norm*=replicate")
	p, err := New(c, s, 2, rs)
	if err != nil {
		t.Fatalf("*=shard:1 over tensors of one dimension: %v", err)
	}
	one := 0
	for _, tp := range p.Tensors {
		if want := len(tp.Shape) > 1; tp.Placement.Shard != want {
			t.Errorf("%s of %d dimensions under *=shard:1: sharded %v", tp.Name, len(tp.Shape), tp.Placement.Shard)
		}
		if len(tp.Shape) <= 1 {
			one++
		}
	}
	if one == 0 {
		t.Fatal("no tensor of one dimension in the fixture")
	}
	// A wildcard rule whose dimension no tensor it matches has shards
	// nothing: a mistyped dimension, refused rather than replicating them.
	// Tensors an earlier rule places are not its to shard.
	for _, rules := range []string{"*.weight=shard:5", "*proj*=replicate,*embed*=replicate,*lm_head*=replicate,*.weight=shard:1"} {
		rs, _ = ParseRules(rules)
		if _, err := New(c, s, 2, rs); !errors.Is(err, ErrPlan) || !strings.Contains(err.Error(), "shards nothing") {
			t.Errorf("%s: %v, want ErrPlan saying the last rule shards nothing", rules, err)
		}
	}
	// A rule an earlier one shadows whole is no error, but it is said
	// (trial 71: the user asked to shard q_proj and nothing was); spaces
	// around "=" are the rule's.
	rs, err = ParseRules("*=replicate, *.weight = shard:5 ,nomatch=replicate")
	if err != nil {
		t.Fatal(err)
	}
	if p, err := New(c, s, 2, rs); err != nil || !slices.Equal(p.Shadowed, []string{"*.weight"}) || !slices.Equal(p.Unmatched, []string{"nomatch"}) {
		t.Errorf("a shadowed rule: %v, shadowed %q, unmatched %q", err, p.Shadowed, p.Unmatched)
	}
	for _, bad := range []string{"x", "=shard:0", "*=shard:x", "*=shard:-1", "*=copy", "[=replicate"} {
		if _, err := ParseRules(bad); !errors.Is(err, ErrPlan) {
			t.Errorf("rules %q: %v, want ErrPlan", bad, err)
		}
	}
	if _, err := New(c, s, 0, nil); !errors.Is(err, ErrPlan) {
		t.Errorf("0 ranks: %v", err)
	}
}

// TestPlacementJSON: a sharded placement names its dimension, 0 too; a
// replicated one none; both read back as written.
func TestPlacementJSON(t *testing.T) {
	for _, c := range []struct {
		p    Placement
		want string
	}{{Placement{}, `{"shard":false}`}, {Placement{Shard: true}, `{"shard":true,"dim":0}`}, {Placement{Shard: true, Dim: 2}, `{"shard":true,"dim":2}`}} {
		b, err := json.Marshal(c.p)
		if err != nil || string(b) != c.want {
			t.Errorf("%+v: %s, %v; want %s", c.p, b, err, c.want)
		}
		var back Placement
		if err := json.Unmarshal(b, &back); err != nil || back != c.p {
			t.Errorf("%s read back as %+v, %v", b, back, err)
		}
	}
}

// TestPlanSources: a plan of a checkpoint whose shard is gone, with
// tensors whose bytes are only in it, is refused as a load of it is
// (ErrSourceMissing), and so is one whose shard changed; one of no
// tensors lists none, not null (trial 71).
func TestPlanSources(t *testing.T) {
	c, s := fixture.Compressed(t, synth.Config{Bytes: 2 << 20, Shards: 2, Seed: 33}, pipeline.CompressOptions{})
	path := filepath.Join(s.Root, s.Shards[1].Name)
	if err := os.Rename(path, path+".moved"); err != nil {
		t.Fatal(err)
	}
	if _, err := New(c, s, 2, nil); !errors.Is(err, shardcache.ErrSourceMissing) {
		t.Errorf("a shard gone: %v, want ErrSourceMissing", err)
	}
	if err := os.Rename(path+".moved", path); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, time.Time{}, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := New(c, s, 2, nil); !errors.Is(err, shardcache.ErrSourceChanged) {
		t.Errorf("a shard changed: %v, want ErrSourceChanged", err)
	}
	empty := &shardcache.Source{Root: t.TempDir()}
	p, err := New(c, empty, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(p); !strings.Contains(string(b), `"tensors":[]`) {
		t.Errorf("no tensors: %s", b)
	}
}

// TestPlanDuplicateName: a checkpoint whose two shards hold a tensor of
// one name is refused, naming it and its shards, as a load of it is
// (trial 71: plan planned both).
func TestPlanDuplicateName(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "ck")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"a.safetensors", "b.safetensors"} {
		h := fmt.Sprintf(`{"w":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"x%d":{"dtype":"U8","shape":[8],"data_offsets":[8,16]}}`, i)
		h += strings.Repeat(" ", -len(h)&7)
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
		b = append(append(b, h...), make([]byte, 16)...)
		b[len(b)-1] = byte(i + 1)
		if err := os.WriteFile(filepath.Join(src, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cache := filepath.Join(dir, "cache")
	if _, err := pipeline.Compress(context.Background(), src, pipeline.CompressOptions{Output: cache, NoSync: true}); err != nil {
		t.Fatal(err)
	}
	c, err := shardcache.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.PickSource("")
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(c, s, 2, nil)
	var te *shardcache.TensorError
	if !errors.Is(err, ErrDuplicateName) || !errors.As(err, &te) || te.Tensor != "w" || !strings.Contains(err.Error(), "a.safetensors") {
		t.Errorf("a name in two shards: %v", err)
	}
}
