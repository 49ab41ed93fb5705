// Package distplan plans a load of one cached checkpoint onto several
// ranks (GPUs of one node): which rank reads each stored object from disk,
// once per node, and which bytes each rank receives, under a
// tensor-parallel placement of every tensor: replicated on every rank, or
// sharded along a dimension into one part a rank.
//
// Reads are shared out by stored bytes (the largest first, each to the
// rank with the fewest bytes so far), so every rank's host reads about
// 1/N of the node's bytes. A replicated tensor goes from its reader to
// every other rank whole (a broadcast of its stored bytes, compressed
// when it is a payload). A tensor sharded along dimension 0 is a
// contiguous range of values a rank: the rank receives the payload chunks
// that cover its range (a chunk is 16,384 values) and decodes them; a
// raw tensor's part is its byte range. Sharded along another dimension,
// a rank's part is strided: it receives the whole payload, decodes it and
// keeps its columns (or, raw, its rows' pieces). The plan is data; the
// runtime that moves the bytes is elsewhere.
package distplan

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/safetensors"
	"github.com/splitzip/splitzip/shardcache"
)

// ErrPlan reports a placement that cannot be planned: a rule that does
// not parse, a dimension the tensor does not have or that does not split
// evenly.
var ErrPlan = errors.New("cannot plan")

// ErrDuplicateName reports a checkpoint whose shards both hold a tensor
// of one name: ranks place tensors by name, and a load of it is refused
// (vmm.ErrDuplicateName) as this plan is.
var ErrDuplicateName = errors.New("tensor name in two shards")

// Placement is where a tensor's values go: every rank (Shard false), or
// one part a rank along dimension Dim.
type Placement struct {
	Shard bool `json:"shard"`
	Dim   int  `json:"dim,omitempty"`
}

// MarshalJSON writes "dim" for every sharded placement, dimension 0
// included (omitempty alone dropped it), and none for a replicated one.
func (p Placement) MarshalJSON() ([]byte, error) {
	if !p.Shard {
		return []byte(`{"shard":false}`), nil
	}
	return []byte(`{"shard":true,"dim":` + strconv.Itoa(p.Dim) + `}`), nil
}

// String is "replicate" or "shard:D".
func (p Placement) String() string {
	if !p.Shard {
		return "replicate"
	}
	return "shard:" + strconv.Itoa(p.Dim)
}

// Rule places the tensors whose names match Pattern (path.Match syntax,
// `*` matching within a dot-separated name too).
type Rule struct {
	Pattern   string
	Placement Placement
}

// ParseRules parses "PATTERN=replicate|shard:D,..." (the first matching
// rule wins; tensors no rule matches are replicated), as vLLM's loaders
// place column-parallel weights (shard:0) and row-parallel ones (shard:1).
func ParseRules(s string) ([]Rule, error) {
	var rules []Rule
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		pat, what, ok := strings.Cut(f, "=")
		pat, what = strings.TrimSpace(pat), strings.TrimSpace(what)
		if !ok || pat == "" {
			return nil, fmt.Errorf("%w: rule %q: want PATTERN=replicate or PATTERN=shard:DIM", ErrPlan, f)
		}
		if _, err := path.Match(pat, ""); err != nil {
			return nil, fmt.Errorf("%w: rule %q: %v", ErrPlan, f, err)
		}
		r := Rule{Pattern: pat}
		switch {
		case what == "replicate":
		case strings.HasPrefix(what, "shard:"):
			d, err := strconv.Atoi(strings.TrimPrefix(what, "shard:"))
			if err != nil || d < 0 {
				return nil, fmt.Errorf("%w: rule %q: dimension %q: want a whole number from 0 (shard:0 splits the first)", ErrPlan, f, strings.TrimPrefix(what, "shard:"))
			}
			r.Placement.Shard, r.Placement.Dim = true, d
		default:
			return nil, fmt.Errorf("%w: rule %q: %q is neither replicate nor shard:DIM", ErrPlan, f, what)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// place returns the placement of the first rule matching name, a tensor
// of dims dimensions. A wildcard rule (*, ?, [...]) that shards along a
// dimension the tensor lacks (a scalar under "*=shard:0") does not match
// it, so that the next rule, or replication, places it; a rule naming
// the tensor outright does, and New refuses the plan.
func place(rules []Rule, name string, dims int) Placement {
	for _, r := range rules {
		if ok, _ := path.Match(r.Pattern, name); ok {
			if r.Placement.Shard && r.Placement.Dim >= dims && strings.ContainsAny(r.Pattern, "*?[") {
				continue
			}
			return r.Placement
		}
	}
	return Placement{}
}

// Part is what one rank receives of a tensor.
type Part struct {
	Rank int `json:"rank"`
	// Values is the rank's range of values along dimension 0 ([0, n) when
	// replicated); for another dimension, Index is its index range along
	// that dimension.
	Values [2]uint64 `json:"values,omitempty"`
	Index  [2]uint64 `json:"index,omitempty"`
	// Chunks is the payload chunk range a dimension-0 part decodes (none
	// for raw tensors); Whole says the rank decodes the whole payload and
	// keeps its part.
	Chunks [2]uint64 `json:"chunks,omitempty"`
	Whole  bool      `json:"whole,omitempty"`
	// Wire is the stored bytes the rank receives from the reader (0 for
	// the reader itself; for a dimension-0 part of a payload, its chunks'
	// share of the payload's bytes, an estimate: chunks differ in size),
	// Bytes the raw bytes of its part.
	Wire  uint64 `json:"wire_bytes"`
	Bytes uint64 `json:"bytes"`
}

// Tensor is one tensor's plan.
type Tensor struct {
	Name string `json:"name"`
	// Key is the tensor's content key (its raw bytes' BLAKE3), so that
	// plans of checkpoints whose tensors differ differ too.
	Key       shardcache.Key `json:"key,omitempty"`
	DType     string         `json:"dtype"`
	Shape     []uint64       `json:"shape"`
	Stored    string         `json:"stored"` // shardcache.Stored*
	Size      uint64         `json:"size"`   // raw bytes
	Object    uint64         `json:"object_bytes"`
	Reader    int            `json:"reader"`
	Placement Placement      `json:"placement"`
	Parts     []Part         `json:"parts"`
	unit      int            // the read it is part of (Predict counts each once)
}

// Rank sums what one rank does.
type Rank struct {
	Read     uint64 `json:"read_bytes"`     // stored bytes it reads from disk
	Objects  int    `json:"objects"`        // objects and raw slices it reads
	Received uint64 `json:"received_bytes"` // stored bytes it receives from others
	Sent     uint64 `json:"sent_bytes"`     // stored bytes it sends
	Bytes    uint64 `json:"bytes"`          // raw bytes it ends with
}

// Plan is a load of a checkpoint onto Ranks ranks.
type Plan struct {
	Ranks   int      `json:"ranks"`
	Tensors []Tensor `json:"tensors"`
	PerRank []Rank   `json:"per_rank"`
	Read    uint64   `json:"read_bytes"` // stored bytes the node reads, each object once
	// Unmatched are the rules' patterns that match no tensor's name (a
	// mistyped rule places nothing).
	Unmatched []string `json:"unmatched_rules,omitempty"`
	// Shadowed are the rules' patterns that match tensors, all of them
	// placed by earlier rules (the first matching rule wins): such a
	// rule places nothing either.
	Shadowed []string `json:"shadowed_rules,omitempty"`
	// Predicted is a cost model's prediction of the reads (Predict).
	Predicted *Prediction `json:"predicted,omitempty"`
}

// unit is one read: a stored object, or a raw tensor's source slice.
type unit struct {
	n       int // its place in the order units were found
	id      string
	bytes   uint64
	tensors []int
}

// MaxRanks is the most ranks New plans for: a node's GPUs, with room to
// spare (a plan holds a table of every tensor for each rank).
const MaxRanks = 1024

// New plans the load of src (a checkpoint of cache c) onto ranks ranks
// (1 to MaxRanks) under rules.
func New(c *shardcache.Cache, src *shardcache.Source, ranks int, rules []Rule) (*Plan, error) {
	if ranks < 1 || ranks > MaxRanks {
		return nil, fmt.Errorf("%w: %d ranks (1 to %d: the GPUs of one node)", ErrPlan, ranks, MaxRanks)
	}
	if err := checkSources(c, src); err != nil {
		return nil, err
	}
	p := &Plan{Ranks: ranks, PerRank: make([]Rank, ranks), Tensors: []Tensor{}}
	units := map[string]*unit{}
	var order []string
	first := map[string]string{} // a tensor name's first shard
	for _, sh := range src.Shards {
		for _, t := range sh.Tensors {
			if prev, dup := first[t.Name]; dup {
				return nil, &shardcache.TensorError{Tensor: t.Name, File: filepath.Join(src.Root, sh.Name),
					Err: fmt.Errorf("%w: also in %s (ranks, like a load, take tensors by name)", ErrDuplicateName, prev)}
			}
			first[t.Name] = filepath.Join(src.Root, sh.Name)
			tp := Tensor{Name: t.Name, Key: t.Key, DType: t.DType, Shape: t.Shape, Stored: t.Stored, Size: t.Size, Object: t.Size,
				Placement: place(rules, t.Name, len(t.Shape))}
			id := fmt.Sprintf("slice %s@%d", sh.Name, t.Offset)
			if t.Stored == shardcache.StoredFixed || t.Stored == shardcache.StoredEntropy {
				o, err := c.Lookup(t.Key)
				if err != nil {
					return nil, &shardcache.TensorError{Tensor: t.Name, Err: err}
				}
				tp.Object, id = o.Size, "object "+string(t.Key)
			}
			u := units[id]
			if u == nil {
				u = &unit{n: len(units), id: id, bytes: tp.Object}
				units[id] = u
				order = append(order, id)
			}
			u.tensors = append(u.tensors, len(p.Tensors))
			tp.unit = u.n
			p.Tensors = append(p.Tensors, tp)
		}
	}
	if err := p.checkRules(rules); err != nil {
		return nil, err
	}
	// Readers: the largest unit first, to the rank that has read least.
	sort.SliceStable(order, func(i, j int) bool { return units[order[i]].bytes > units[order[j]].bytes })
	for _, id := range order {
		u := units[id]
		r := 0
		for k := range p.PerRank {
			if p.PerRank[k].Read < p.PerRank[r].Read {
				r = k
			}
		}
		p.PerRank[r].Read += u.bytes
		p.PerRank[r].Objects++
		p.Read += u.bytes
		for _, i := range u.tensors {
			p.Tensors[i].Reader = r
		}
	}
	for i := range p.Tensors {
		if err := p.parts(&p.Tensors[i]); err != nil {
			return nil, err
		}
		t := &p.Tensors[i]
		for _, pt := range t.Parts {
			p.PerRank[pt.Rank].Received += pt.Wire
			p.PerRank[t.Reader].Sent += pt.Wire
			p.PerRank[pt.Rank].Bytes += pt.Bytes
		}
	}
	return p, nil
}

// checkRules records the rules' patterns that match no tensor's name
// (Unmatched), and those whose every tensor an earlier rule places
// (Shadowed), and refuses a wildcard rule that shards along a dimension
// none of the tensors left to it (matched by no earlier rule) has: it
// shards nothing, a mistyped dimension most likely, that would replicate
// them all. (A rule naming a tensor outright is refused for that tensor,
// by parts.)
func (p *Plan) checkRules(rules []Rule) error {
	taken := make([]bool, len(p.Tensors)) // placed by an earlier rule
	for _, r := range rules {
		matched, left, most := 0, 0, -1 // most: the most dimensions among those left
		var widest *Tensor
		for i := range p.Tensors {
			t := &p.Tensors[i]
			if ok, _ := path.Match(r.Pattern, t.Name); !ok {
				continue
			}
			matched++
			if taken[i] {
				continue
			}
			left++
			if len(t.Shape) > most {
				most, widest = len(t.Shape), t
			}
			if !r.Placement.Shard || r.Placement.Dim < len(t.Shape) {
				taken[i] = true // this rule places it
			}
		}
		switch {
		case matched == 0:
			p.Unmatched = append(p.Unmatched, r.Pattern)
		case left == 0:
			p.Shadowed = append(p.Shadowed, r.Pattern)
		case r.Placement.Shard && left > 0 && r.Placement.Dim >= most && strings.ContainsAny(r.Pattern, "*?["):
			return fmt.Errorf("%w: rule %s=%s shards nothing: none of the %d tensors left to it has dimension %d (dimensions count from 0; %s has shape %v)",
				ErrPlan, r.Pattern, r.Placement, left, r.Placement.Dim, widest.Name, widest.Shape)
		}
	}
	return nil
}

// parts fills t.Parts from its placement.
func (p *Plan) parts(t *Tensor) error {
	payload := t.Stored == shardcache.StoredFixed || t.Stored == shardcache.StoredEntropy
	wire := func(r int, b uint64) uint64 {
		if r == t.Reader {
			return 0
		}
		return b
	}
	if !t.Placement.Shard {
		n := values(t)
		for r := range p.Ranks {
			t.Parts = append(t.Parts, Part{Rank: r, Values: [2]uint64{0, n}, Wire: wire(r, t.Object), Bytes: t.Size})
		}
		return nil
	}
	d := t.Placement.Dim
	if d >= len(t.Shape) {
		return tensorError(t, fmt.Errorf("%w: shard:%d of a tensor of %d dimensions", ErrPlan, d, len(t.Shape)))
	}
	if t.Shape[d]%uint64(p.Ranks) != 0 {
		return tensorError(t, fmt.Errorf("%w: dimension %d of %d does not split into %d parts", ErrPlan, d, t.Shape[d], p.Ranks))
	}
	n := values(t)
	per := t.Shape[d] / uint64(p.Ranks) // indices a rank along d
	for r := range p.Ranks {
		pt := Part{Rank: r, Bytes: t.Size / uint64(p.Ranks)}
		lo, hi := uint64(r)*per, uint64(r+1)*per
		if d == 0 {
			inner := uint64(1)
			if t.Shape[0] > 0 {
				inner = n / t.Shape[0]
			}
			pt.Values = [2]uint64{lo * inner, hi * inner}
			if payload {
				c0, c1 := pt.Values[0]/codec.ChunkValues, (pt.Values[1]+codec.ChunkValues-1)/codec.ChunkValues
				pt.Chunks = [2]uint64{c0, c1}
				chunks := (n + codec.ChunkValues - 1) / codec.ChunkValues
				pt.Wire = wire(r, t.Object*(c1-c0)/max(1, chunks))
			} else {
				pt.Wire = wire(r, pt.Bytes)
			}
		} else {
			pt.Index = [2]uint64{lo, hi}
			pt.Whole = payload
			if payload {
				pt.Wire = wire(r, t.Object)
			} else {
				pt.Wire = wire(r, pt.Bytes)
			}
		}
		t.Parts = append(t.Parts, pt)
	}
	return nil
}

// values returns a tensor's number of values.
func values(t *Tensor) uint64 {
	if bits, ok := safetensors.DTypeBits(t.DType); ok && bits > 0 {
		return t.Size * 8 / bits
	}
	return t.Size
}

// tensorError is err about t, naming it for callers that report the
// tensor apart from the text (splitzip --json's "tensor").
func tensorError(t *Tensor, err error) error {
	return &shardcache.TensorError{Tensor: t.Name, Err: err}
}

// checkSources refuses a plan the load it is for would fail: a source
// shard that changed since it was compressed, or one that is gone while
// some of its tensors' bytes are only in it (load refused such a
// checkpoint; plan assigned readers to the missing bytes, trial 71).
func checkSources(c *shardcache.Cache, src *shardcache.Source) error {
	for i := range src.Shards {
		sh := &src.Shards[i]
		if _, err := c.CheckShard(sh, filepath.Join(src.Root, sh.Name)); err != nil {
			return err
		}
	}
	return nil
}
