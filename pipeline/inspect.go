package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/costmodel"
	"github.com/splitzip/splitzip/shardcache"
)

// TensorReport describes one tensor for inspect.
type TensorReport struct {
	Source       string   `json:"source"`
	Shard        string   `json:"shard"`
	Name         string   `json:"name"`
	DType        string   `json:"dtype"`
	Shape        []uint64 `json:"shape"`
	Values       uint64   `json:"values"`
	Stored       string   `json:"stored"`
	Reason       string   `json:"reason,omitempty"`
	RawBytes     uint64   `json:"raw_bytes"`
	StoredBytes  uint64   `json:"stored_bytes"`
	BitsPerValue float64  `json:"bits_per_value"`
	// Coverage and EscapeRate are the fixed codec's codebook's, for a
	// fixed payload or a BF16 tensor left raw that compress measured
	// (CodebookMeasured); the JSON leaves them out elsewhere.
	Coverage   float64 `json:"codebook_coverage"`
	EscapeRate float64 `json:"escape_rate"`
	// ExponentEntropy is nil where the cache records no statistics of
	// the tensor (a dtype no codec measures, a tensor stored raw before).
	ExponentEntropy *float64 `json:"exponent_entropy,omitempty"`
	RawChunks       uint64   `json:"raw_chunks"`
	Codebook        []int    `json:"codebook,omitempty"`
	// Field is what an entropy payload codes ("BF16 exponent", "F8_E4M3
	// byte"); BoundBits the bits per value an ideal coder of that field
	// (or, for BF16, of the exponent) would store with the other bits
	// kept as they are, when the cache records the statistics.
	Field     string  `json:"field,omitempty"`
	BoundBits float64 `json:"entropy_bound_bits,omitempty"`
	// InPlace says an entropy payload decodes in place (its flag).
	InPlace bool   `json:"in_place,omitempty"`
	Key     string `json:"key"`
}

// DTypeReport sums the tensors of one dtype: what they take raw and
// stored, and the entropy bound over those with statistics.
type DTypeReport struct {
	DType          string  `json:"dtype"`
	Tensors        int     `json:"tensors"`
	Fixed          int     `json:"splitzip_tensors"` // fixed-codec payloads (the JSON key of earlier releases)
	Entropy        int     `json:"entropy_tensors"`
	EntropyInPlace int     `json:"entropy_in_place"` // of them, decodable in place
	Values         uint64  `json:"values"`
	RawBytes       uint64  `json:"raw_bytes"`
	StoredBytes    uint64  `json:"stored_bytes"`
	BitsPerValue   float64 `json:"bits_per_value"`
	BoundBits      float64 `json:"entropy_bound_bits,omitempty"`
	// BoundShare is the share of Values the bound covers, where not all
	// (tensors left raw without statistics: under --codec cost, or found
	// stored raw before); a bound over a few norms says little of the
	// dtype.
	BoundShare float64 `json:"entropy_bound_share,omitempty"`
	// EntropyBits is where the bits of the dtype's entropy payloads go
	// (InspectOptions.Bits).
	EntropyBits *EntropyBits `json:"entropy_bits,omitempty"`
	boundBits   float64      // summed over boundValues
	boundValues float64
}

// EntropyBits is where the bits of entropy payloads go, in bits (see
// entropy.Breakdown), beside the entropy bound of the same tensors.
type EntropyBits struct {
	entropy.Breakdown
	// BoundBits is the entropy bound of these tensors' values, in bits a
	// value: the field's entropy and the bits kept as they are.
	BoundBits float64 `json:"entropy_bound_bits"`
	// OtherBits is the bits a value the format keeps as they are (the
	// least Kept can be), averaged over the values.
	OtherBits float64 `json:"other_bits_per_value"`
	bound     float64
	other     float64
}

// InspectOptions says what Inspect reports beyond the totals.
type InspectOptions struct {
	// Tensors lists every tensor.
	Tensors bool
	// Bits reads every entropy payload's head, chunk index and chunk
	// headers to say where its bits go (DTypeReport.EntropyBits).
	Bits bool
	// Cost, when set, predicts a load of each source from the page cache
	// in a warm process by this cost model (SourceReport.Predicted; their sum,
	// InspectResult.Predicted).
	Cost *costmodel.Profile
}

// Predicted is what a cost model predicts a load of a cache's sources
// from the page cache takes in a process that has loaded before (the
// fastest of repeated loads, which calibrate fits): as stored, and with every tensor
// raw, in seconds.
type Predicted struct {
	Host   string  `json:"host"` // the profile's fingerprint
	Stored float64 `json:"stored_s"`
	Raw    float64 `json:"raw_s"`
}

// SourceReport sums one source.
type SourceReport struct {
	Root string `json:"root"`
	// Checkpoint is the path that names the checkpoint (--source takes
	// it): its index file, its one shard, or its folder (Source.Path).
	Checkpoint string `json:"checkpoint"`
	Shards     int    `json:"shards"`
	// SelfContained says the cache holds every byte of the checkpoint
	// (its tensors as payloads or raw copies; headers, gaps and index
	// files always): it verifies, restores and loads without its source.
	SelfContained bool   `json:"self_contained"`
	Totals        Totals `json:"totals"`
	// Predicted is a first load of this checkpoint by the cost model
	// (InspectOptions.Cost): a load is of one checkpoint.
	Predicted *Predicted `json:"predicted,omitempty"`
}

// InspectResult is what inspect reports; docs/DESIGN.md documents it as
// the --json schema.
type InspectResult struct {
	Cache string `json:"cache"`
	// IndexDamaged is the error of the cache's index where the cache was
	// read from the index's backup (shardcache.BackupName).
	IndexDamaged string `json:"index_damaged,omitempty"`
	// StrayFiles and StrayBytes are the files of objects/ and tmp/ that
	// no checkpoint or pin uses (killed runs', or an uncommitted
	// writer's), which gc removes.
	StrayFiles  int            `json:"stray_files"`
	StrayBytes  uint64         `json:"stray_bytes"`
	Sources     []SourceReport `json:"sources"`
	Totals      Totals         `json:"totals"`
	Objects     int            `json:"objects"`      // stored objects, packed or not (packs are not counted)
	ObjectBytes uint64         `json:"object_bytes"` // what the cache holds on disk, shared objects once
	// SharedTensors and SharedBytes are the tensors, and their stored
	// bytes, whose object another tensor before them (of the same
	// checkpoint or another: a fine-tune and its base) has too: the
	// totals count those bytes again, the cache holds them once.
	SharedTensors int    `json:"shared_tensors"`
	SharedBytes   uint64 `json:"shared_bytes"`
	// Files is how many object files the cache has: packs, and objects
	// stored in a file of their own.
	Files int                  `json:"object_files"`
	Packs shardcache.PackStats `json:"packs"`
	// BF16BoundBits is the bits per value an ideal coder of each BF16
	// tensor's exponents would store (8 for sign and mantissa, plus the
	// exponents' entropy), over the BF16 tensors whose exponent statistics
	// the cache records (all but those found stored raw before); absent
	// when there are none.
	BF16BoundBits float64 `json:"bf16_entropy_bound_bits,omitempty"`
	// DTypes sums each dtype, the largest first.
	DTypes    []DTypeReport  `json:"dtypes"`
	Tensors   []TensorReport `json:"tensors,omitempty"`
	Predicted *Predicted     `json:"predicted,omitempty"` // with InspectOptions.Cost
}

// Inspect summarizes a cache, and reports what opt asks for; its wait
// for a gc that holds the cache ends with ctx.
func Inspect(ctx context.Context, dir string, opt InspectOptions) (*InspectResult, error) {
	c, err := shardcache.OpenContext(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.RequireCheckpoint(); err != nil {
		return nil, err
	}
	ix := c.Index()
	if err := ix.LoadStats(); err != nil {
		return nil, err
	}
	res := &InspectResult{Cache: dir, Sources: []SourceReport{}, Packs: ix.Packs()}
	if err := c.Damaged(); err != nil {
		res.IndexDamaged = err.Error()
	}
	// A count it cannot make (a damaged pin, a folder it may not read)
	// is left out, not the inspection: gc says what stops it.
	if files, bytes, err := c.Strays(); err == nil {
		res.StrayFiles, res.StrayBytes = files, bytes
	}
	if opt.Cost != nil {
		res.Predicted = &Predicted{Host: opt.Cost.Host}
	}
	for _, o := range ix.Objects {
		if o.Kind != shardcache.KindPack {
			res.Objects++
		}
		if o.Pack == "" { // a file of its own
			res.Files++
			res.ObjectBytes += o.Size
		}
	}
	dtypes := map[string]*DTypeReport{}
	explained := map[shardcache.Key]entropy.Breakdown{}
	seen := map[shardcache.Key]bool{}
	for _, s := range ix.Sources {
		sr := SourceReport{Root: s.Root, Checkpoint: s.Path(), Shards: len(s.Shards), SelfContained: true}
		if opt.Cost != nil {
			sr.Predicted = &Predicted{Host: opt.Cost.Host}
		}
		for _, sh := range s.Shards {
			sr.SelfContained = sr.SelfContained && sh.AllInCache()
			for _, t := range sh.Tensors {
				r := report(ix, &s, &sh, &t)
				d := dtypes[r.DType]
				if d == nil {
					d = &DTypeReport{DType: r.DType}
					dtypes[r.DType] = d
				}
				d.add(&r)
				if opt.Bits && t.Stored == shardcache.StoredEntropy {
					if err := d.explain(c, t.Key, &r, explained); err != nil {
						return nil, fmt.Errorf("%s: tensor %q of %s: %w", dir, t.Name, sh.Name, err)
					}
				}
				add(&sr.Totals, &r)
				add(&res.Totals, &r)
				// A raw tensor not copied is read from its own files,
				// whatever object another tensor has.
				if o := ix.Objects[t.Key]; o != nil && (t.Stored != shardcache.StoredRaw || t.CopyStored) {
					if seen[t.Key] {
						res.SharedTensors++
						res.SharedBytes += o.Size
					}
					seen[t.Key] = true
				}
				if p := res.Predicted; p != nil {
					kind := map[string]costmodel.Kind{shardcache.StoredFixed: costmodel.Fixed, shardcache.StoredEntropy: costmodel.Entropy}[r.Stored]
					stored, raw := opt.Cost.Time(kind, r.RawBytes), opt.Cost.Time(costmodel.Raw, r.RawBytes)
					p.Stored, p.Raw = p.Stored+stored, p.Raw+raw
					sr.Predicted.Stored, sr.Predicted.Raw = sr.Predicted.Stored+stored, sr.Predicted.Raw+raw
				}
				if opt.Tensors {
					res.Tensors = append(res.Tensors, r)
				}
			}
		}
		res.Sources = append(res.Sources, sr)
	}
	res.DTypes = []DTypeReport{}
	for _, d := range dtypes {
		if d.Values > 0 {
			d.BitsPerValue = 8 * float64(d.StoredBytes) / float64(d.Values)
		}
		if d.boundValues > 0 {
			d.BoundBits = d.boundBits / d.boundValues
			if d.boundValues < float64(d.Values) {
				d.BoundShare = d.boundValues / float64(d.Values)
			}
		}
		if e := d.EntropyBits; e != nil && e.Values > 0 {
			e.BoundBits, e.OtherBits = e.bound/float64(e.Values), e.other/float64(e.Values)
		}
		if d.DType == "BF16" {
			res.BF16BoundBits = d.BoundBits
		}
		res.DTypes = append(res.DTypes, *d)
	}
	sort.Slice(res.DTypes, func(i, j int) bool {
		a, b := res.DTypes[i], res.DTypes[j]
		return a.RawBytes > b.RawBytes || a.RawBytes == b.RawBytes && a.DType < b.DType
	})
	sort.SliceStable(res.Tensors, func(i, j int) bool { return res.Tensors[i].RawBytes > res.Tensors[j].RawBytes })
	return res, nil
}

// CodebookMeasured says r's Coverage and EscapeRate mean something: a
// fixed payload's, or a BF16 tensor's left raw that compress measured;
// not an entropy payload's (every exponent coded) or a tensor's never
// measured (other dtypes left raw, one found stored raw before).
func (r *TensorReport) CodebookMeasured() bool {
	return r.Stored == shardcache.StoredFixed || r.Stored == shardcache.StoredRaw && r.Coverage > 0
}

// MarshalJSON leaves out codebook_coverage and escape_rate where they
// mean nothing (CodebookMeasured): a 0 there read as no value covered.
func (r TensorReport) MarshalJSON() ([]byte, error) {
	type plain TensorReport // without this method
	out := struct {
		plain
		Coverage   *float64 `json:"codebook_coverage,omitempty"`
		EscapeRate *float64 `json:"escape_rate,omitempty"`
	}{plain: plain(r)}
	if r.CodebookMeasured() {
		out.Coverage, out.EscapeRate = &r.Coverage, &r.EscapeRate
	}
	return json.Marshal(out)
}

func report(ix *shardcache.Index, s *shardcache.Source, sh *shardcache.Shard, t *shardcache.Tensor) TensorReport {
	r := TensorReport{Source: s.Root, Shard: sh.Name, Name: t.Name, DType: t.DType, Shape: t.Shape,
		Stored: t.Stored, Reason: t.Reason, RawBytes: t.Size, StoredBytes: t.Size, Key: string(t.Key)}
	r.Values = 1
	for _, d := range t.Shape {
		r.Values *= d
	}
	// A tensor left raw has statistics where compress measured it (a
	// BF16 tensor's coverage is then above zero).
	r.Coverage = t.Coverage
	if t.Coverage > 0 {
		r.ExponentEntropy = &t.Entropy
	}
	o := ix.Objects[t.Key]
	switch {
	case t.Stored == shardcache.StoredFixed && o != nil:
		r.StoredBytes = o.Size
		r.Coverage, r.EscapeRate, r.ExponentEntropy = o.Coverage, o.EscapeRate, &o.Entropy
		r.RawChunks, r.Codebook = o.RawChunks, o.Codebook
	case t.Stored == shardcache.StoredEntropy && o != nil:
		r.StoredBytes, r.Field, r.ExponentEntropy, r.InPlace = o.Size, o.Field, &o.Entropy, o.InPlace
		if f, ok := entropy.FieldNamed(o.Field); ok {
			r.BoundBits = float64(f.Other()) + o.Entropy
		}
	}
	// A BF16 tensor's exponent statistics, payload or not, bound what an
	// ideal exponent coder stores (a tensor found stored raw before, or
	// never measured, has none).
	if r.DType == "BF16" && r.Field == "" && r.Coverage > 0 && r.Values > 0 && r.ExponentEntropy != nil {
		r.BoundBits = 8 + *r.ExponentEntropy
	}
	// A tensor left raw records its coverage alone: the rest escapes.
	if t.Stored == shardcache.StoredRaw && r.Coverage > 0 {
		r.EscapeRate = 1 - r.Coverage
	}
	if r.Values > 0 {
		r.BitsPerValue = 8 * float64(r.StoredBytes) / float64(r.Values)
	}
	return r
}

// explain adds where the bits of tensor r's entropy payload (object key)
// go to d, reading the payload once for all the tensors that share it.
func (d *DTypeReport) explain(c *shardcache.Cache, key shardcache.Key, r *TensorReport, done map[shardcache.Key]entropy.Breakdown) error {
	b, ok := done[key]
	if !ok {
		f, o, err := c.OpenObject(key)
		if err != nil {
			return err
		}
		b, err = entropy.Explain(f, o.Size)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", f.Name(), err)
		}
		done[key] = b
	}
	if d.EntropyBits == nil {
		d.EntropyBits = &EntropyBits{}
	}
	e := d.EntropyBits
	e.Add(b)
	e.bound += r.BoundBits * float64(b.Values)
	if f, ok := entropy.FieldNamed(r.Field); ok {
		e.other += float64(f.Other()) * float64(b.Values)
	}
	return nil
}

func (d *DTypeReport) add(r *TensorReport) {
	d.Tensors++
	d.Values += r.Values
	d.RawBytes += r.RawBytes
	d.StoredBytes += r.StoredBytes
	switch r.Stored {
	case shardcache.StoredFixed:
		d.Fixed++
	case shardcache.StoredEntropy:
		d.Entropy++
		if r.InPlace {
			d.EntropyInPlace++
		}
	}
	if r.BoundBits > 0 {
		d.boundBits += r.BoundBits * float64(r.Values)
		d.boundValues += float64(r.Values)
	}
}

func add(t *Totals, r *TensorReport) {
	t.Tensors++
	t.RawBytes += r.RawBytes
	t.StoredBytes += r.StoredBytes
	switch r.Stored {
	case shardcache.StoredFixed:
		t.CompressedTensors++
	case shardcache.StoredEntropy:
		t.CompressedTensors++
		t.EntropyTensors++
	}
	if r.DType == "BF16" {
		t.BF16Tensors++
		t.BF16RawBytes += r.RawBytes
		t.BF16StoredBytes += r.StoredBytes
	}
	t.costRaw(r.Reason, r.RawBytes)
}
