package pipeline

import (
	"sort"
	"strings"

	"github.com/splitzip/splitzip/shardcache"
)

// TensorReport describes one tensor for inspect.
type TensorReport struct {
	Source          string   `json:"source"`
	Shard           string   `json:"shard"`
	Name            string   `json:"name"`
	DType           string   `json:"dtype"`
	Shape           []uint64 `json:"shape"`
	Values          uint64   `json:"values"`
	Stored          string   `json:"stored"`
	Reason          string   `json:"reason,omitempty"`
	RawBytes        uint64   `json:"raw_bytes"`
	StoredBytes     uint64   `json:"stored_bytes"`
	BitsPerValue    float64  `json:"bits_per_value"`
	Coverage        float64  `json:"codebook_coverage"`
	EscapeRate      float64  `json:"escape_rate"`
	ExponentEntropy float64  `json:"exponent_entropy"`
	RawChunks       uint64   `json:"raw_chunks"`
	Codebook        []int    `json:"codebook,omitempty"`
	Key             string   `json:"key"`
}

// SourceReport sums one source.
type SourceReport struct {
	Root   string `json:"root"`
	Shards int    `json:"shards"`
	Totals Totals `json:"totals"`
}

// InspectResult is what inspect reports; docs/splitzip.md documents it as
// the --json schema.
type InspectResult struct {
	Cache       string         `json:"cache"`
	Sources     []SourceReport `json:"sources"`
	Totals      Totals         `json:"totals"`
	Objects     int            `json:"objects"`      // stored objects, packed or not (packs are not counted)
	ObjectBytes uint64         `json:"object_bytes"` // what the cache holds on disk, shared objects once
	// Files is how many object files the cache has: packs, and objects
	// stored in a file of their own.
	Files int                  `json:"object_files"`
	Packs shardcache.PackStats `json:"packs"`
	// BF16BoundBits is the bits per value an ideal coder of each BF16
	// tensor's exponents would store (8 for sign and mantissa, plus the
	// exponents' entropy), over the BF16 tensors whose exponent statistics
	// the cache records (all but those found stored raw before); zero
	// when there are none.
	BF16BoundBits float64        `json:"bf16_entropy_bound_bits"`
	Tensors       []TensorReport `json:"tensors,omitempty"`
}

// Inspect summarizes a cache; with tensors it lists every tensor.
func Inspect(dir string, tensors bool) (*InspectResult, error) {
	c, err := shardcache.Open(dir)
	if err != nil {
		return nil, err
	}
	ix := c.Index()
	res := &InspectResult{Cache: dir, Sources: []SourceReport{}, Packs: ix.Packs()}
	for _, o := range ix.Objects {
		if o.Kind != shardcache.KindPack {
			res.Objects++
		}
		if o.Pack == "" { // a file of its own
			res.Files++
			res.ObjectBytes += o.Size
		}
	}
	var boundBits, boundValues float64
	for _, s := range ix.Sources {
		sr := SourceReport{Root: s.Root, Shards: len(s.Shards)}
		for _, sh := range s.Shards {
			for _, t := range sh.Tensors {
				r := report(ix, &s, &sh, &t)
				if r.DType == "BF16" && !strings.HasPrefix(r.Reason, "dtype") && r.Reason != "stored raw before" {
					boundBits += float64(r.Values) * (8 + r.ExponentEntropy)
					boundValues += float64(r.Values)
				}
				add(&sr.Totals, &r)
				add(&res.Totals, &r)
				if tensors {
					res.Tensors = append(res.Tensors, r)
				}
			}
		}
		res.Sources = append(res.Sources, sr)
	}
	if boundValues > 0 {
		res.BF16BoundBits = boundBits / boundValues
	}
	sort.SliceStable(res.Tensors, func(i, j int) bool { return res.Tensors[i].RawBytes > res.Tensors[j].RawBytes })
	return res, nil
}

func report(ix *shardcache.Index, s *shardcache.Source, sh *shardcache.Shard, t *shardcache.Tensor) TensorReport {
	r := TensorReport{Source: s.Root, Shard: sh.Name, Name: t.Name, DType: t.DType, Shape: t.Shape,
		Stored: t.Stored, Reason: t.Reason, RawBytes: t.Size, StoredBytes: t.Size, Key: string(t.Key)}
	r.Values = 1
	for _, d := range t.Shape {
		r.Values *= d
	}
	r.Coverage, r.ExponentEntropy = t.Coverage, t.Entropy
	if o := ix.Objects[t.Key]; o != nil && o.Kind == shardcache.KindSplitZip {
		r.StoredBytes = o.Size
		r.Coverage, r.EscapeRate, r.ExponentEntropy = o.Coverage, o.EscapeRate, o.Entropy
		r.RawChunks, r.Codebook = o.RawChunks, o.Codebook
	}
	if r.Values > 0 {
		r.BitsPerValue = 8 * float64(r.StoredBytes) / float64(r.Values)
	}
	return r
}

func add(t *Totals, r *TensorReport) {
	t.Tensors++
	t.RawBytes += r.RawBytes
	t.StoredBytes += r.StoredBytes
	if r.Stored == shardcache.StoredSplitZip {
		t.CompressedTensors++
	}
	if r.DType == "BF16" {
		t.BF16Tensors++
		t.BF16RawBytes += r.RawBytes
		t.BF16StoredBytes += r.StoredBytes
	}
}
