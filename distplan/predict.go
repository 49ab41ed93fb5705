package distplan

import (
	"github.com/splitzip/splitzip/costmodel"
	"github.com/splitzip/splitzip/shardcache"
)

// Prediction is what a host's cost model predicts of a plan's reads from
// the page cache: each rank's reads take the sum of their tensors' costs
// by the path each takes (raw, fixed, entropy), the ranks read at once,
// and the node is ready when its slowest rank is. What ranks receive
// from each other is not in it (the model has no peer link).
type Prediction struct {
	Host    string  `json:"host"`     // the profile's fingerprint
	Seconds float64 `json:"seconds"`  // the slowest rank's, as stored
	Raw     float64 `json:"raw_s"`    // the slowest rank's, every tensor raw
	Slowest int     `json:"slowest"`  // that rank, as stored
	PerRank []Paths `json:"per_rank"` // each rank's reads by path
	Profile string  `json:"measured"` // when the profile was measured, or "default"
}

// Paths counts one rank's reads by the path they take, with their
// predicted seconds.
type Paths struct {
	Raw     int     `json:"raw"`
	Fixed   int     `json:"fixed"`
	Entropy int     `json:"entropy"`
	Seconds float64 `json:"seconds"` // as stored
	RawS    float64 `json:"raw_s"`   // every tensor raw
}

// Predict fills p.Predicted from prof. A stored object read once for
// several tensors (equal contents) costs once.
func (p *Plan) Predict(prof *costmodel.Profile) {
	pr := &Prediction{Host: prof.Host, Profile: prof.Measured, PerRank: make([]Paths, p.Ranks)}
	seen := make(map[int]bool, len(p.Tensors))
	for i := range p.Tensors {
		t := &p.Tensors[i]
		if seen[t.unit] {
			continue
		}
		seen[t.unit] = true
		r := &pr.PerRank[t.Reader]
		k := costKind(t.Stored)
		switch k {
		case costmodel.Fixed:
			r.Fixed++
		case costmodel.Entropy:
			r.Entropy++
		default:
			r.Raw++
		}
		r.Seconds += prof.Time(k, t.Size)
		r.RawS += prof.Time(costmodel.Raw, t.Size)
	}
	for i, r := range pr.PerRank {
		if r.Seconds > pr.Seconds {
			pr.Seconds, pr.Slowest = r.Seconds, i
		}
		pr.Raw = max(pr.Raw, r.RawS)
	}
	p.Predicted = pr
}

// costKind is the cost model's kind of a tensor stored as stored
// (shardcache.Stored*): a payload's codec, else raw.
func costKind(stored string) costmodel.Kind {
	switch stored {
	case shardcache.StoredFixed:
		return costmodel.Fixed
	case shardcache.StoredEntropy:
		return costmodel.Entropy
	}
	return costmodel.Raw
}
