// Package costmodel predicts what loading a tensor costs on a host, by how
// it is stored (raw, a fixed-codec payload, an entropy payload), and picks
// the cheapest: the per-tensor codec choice of `splitzip compress --codec
// cost`.
//
// The model is two numbers a kind: a fixed cost a tensor (the host's work
// to look it up, read, check, stage and launch it, which dominates for
// small tensors) and a rate in raw bytes a second (what the bytes cost on
// the way to the device, decode included, which dominates for large
// ones). Entropy payloads of at most SmallBytes are packed, and decoded
// by one batch launch a pack (on the host where loads say so), with their
// own pair; so do raw tensors and fixed payloads of at most SmallBytes,
// whose neighbours share reads and staging (a linear fit over small and
// large tensors charged a tiny raw one three to five times what it costs,
// and a tiny fixed one a sixth). A Profile holds the pairs of one host: measured on
// it (internal/calibrate) or, failing that, Default's H200 numbers.
package costmodel

import (
	"errors"
	"fmt"
	"math"
)

// Kind is how a tensor is stored in a cache.
type Kind int

// Kinds, in the order Choose prefers them at equal cost (fewest bytes
// last, so that a tie goes to the smaller).
const (
	Raw Kind = iota
	Fixed
	Entropy
)

func (k Kind) String() string {
	switch k {
	case Raw:
		return "raw"
	case Fixed:
		return "fixed"
	case Entropy:
		return "entropy"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Cost is what one kind of tensor costs: Tensor seconds each, plus its raw
// bytes at Rate bytes a second.
type Cost struct {
	Tensor float64 `json:"tensor_s"`
	Rate   float64 `json:"rate_bytes_s"`
}

// Time is the predicted seconds of a tensor of size raw bytes.
func (c Cost) Time(size uint64) float64 { return c.Tensor + float64(size)/c.Rate }

// Profile is the cost model of one host: what a first load from the page
// cache costs a tensor of each kind.
type Profile struct {
	Version      int    `json:"version"`
	Host         string `json:"host"`          // Fingerprint of the host it was measured on
	Device       string `json:"device"`        // the engine the loads used: the GPU's name, or "cpu"
	Measured     string `json:"measured"`      // RFC 3339, or "default"
	Raw          Cost   `json:"raw"`           // raw tensors above SmallBytes (from the source or the cache)
	RawSmall     Cost   `json:"raw_small"`     // raw tensors of at most SmallBytes (Raw in profiles written before it)
	Fixed        Cost   `json:"fixed"`         // fixed-codec payloads above SmallBytes
	FixedSmall   Cost   `json:"fixed_small"`   // fixed-codec payloads of at most SmallBytes (Fixed in profiles written before it)
	Entropy      Cost   `json:"entropy"`       // entropy payloads above SmallBytes
	EntropySmall Cost   `json:"entropy_small"` // entropy payloads of at most SmallBytes
	SmallBytes   uint64 `json:"small_bytes"`   // the largest tensor with the small costs (transport.DefaultSmallBytes)
	// Decoders is the revision of the decoders the costs were measured
	// with (Decoders when measured by this build).
	Decoders int `json:"decoders"`
}

// Version is the Profile layout this package writes.
const Version = 1

// Decoders is the revision of this build's decoders, raised whenever a
// change moves what a kind of tensor costs to load: a profile measured
// with another revision is measured again (Lookup). 4: raw tensors and
// fixed payloads of at most SmallBytes have pairs of their own
// (2026-12-07; profiles of revision 3 priced them as large ones). 3: small entropy
// payloads are packed and decoded on the device, one batch launch a pack
// (2026-12-06), not on the host; 2: local loads pack
// tensors stored in up to 2 MiB (load.DefaultSmallBytes, 2026-12-06:
// first loads of 256 KiB to 2 MiB tensors 1.4-1.7x faster); 1: small entropy
// payloads decoded in place in the packer's staging, with tables built
// only for the chunks that use them (2026-12-06: their host decode two
// to ten times faster); 0: profiles written before this field.
const Decoders = 4

// ErrProfile is returned for a profile that cannot be used.
var ErrProfile = errors.New("costmodel: bad profile")

// ErrStale reports a profile measured with other decoders than this
// build's (Profile.Decoders): it is not used, and calibrate makes a new
// one. Lookup's error wraps it beside fs.ErrNotExist.
var ErrStale = errors.New("costmodel: profile measured with other decoders")

// ErrNoDir is Dir's error where the environment names no user cache
// folder (neither XDG_CACHE_HOME nor HOME set, or a relative one).
var ErrNoDir = errors.New("costmodel: no folder to keep cost models in")

// Default is the model `splitzip calibrate` measured on the lent H200
// (16 host cores, the CUDA engine) on 2026-12-04, rounded: what
// SPLITZIP_PROFILE=default uses. There a fixed payload pays for itself
// from about 94 KB, and small entropy payloads, then decoded on the host,
// never do. Its small entropy cost predates Decoders 1 and 3 (it
// overstates what they cost now); the H200 was not lent to measure it
// again; neither were its small raw and fixed costs, which are its raw
// and fixed costs here.
func Default() *Profile {
	return &Profile{
		Version: Version, Host: "default", Device: "NVIDIA H200", Measured: "default", Decoders: Decoders,
		Raw:          Cost{Tensor: 0.88e-6, Rate: 36.0e9},
		RawSmall:     Cost{Tensor: 0.88e-6, Rate: 36.0e9},
		Fixed:        Cost{Tensor: 1.20e-6, Rate: 41.0e9},
		FixedSmall:   Cost{Tensor: 1.20e-6, Rate: 41.0e9},
		Entropy:      Cost{Tensor: 1.20e-6, Rate: 42.9e9},
		EntropySmall: Cost{Tensor: 7.8e-6, Rate: 3.1e9},
		SmallBytes:   256 << 10,
	}
}

// Check returns ErrProfile unless p is of this Version, every cost a
// tensor from 0 to a minute, every rate from a byte to an exabyte a
// second (what no host measures is a damaged or hand-made file: a time a
// tensor of 1e300 s printed as a 300-digit prediction), and SmallBytes
// positive.
func (p *Profile) Check() error {
	if p.Version != Version {
		return fmt.Errorf("%w: version %d, want %d", ErrProfile, p.Version, Version)
	}
	if p.SmallBytes == 0 {
		return fmt.Errorf("%w: small_bytes 0", ErrProfile)
	}
	for _, c := range []struct {
		name string
		c    Cost
	}{{"raw", p.Raw}, {"raw_small", p.RawSmall}, {"fixed", p.Fixed}, {"fixed_small", p.FixedSmall}, {"entropy", p.Entropy}, {"entropy_small", p.EntropySmall}} {
		if !(c.c.Tensor >= 0 && c.c.Tensor <= MaxTensorCost) || !(c.c.Rate >= 1 && c.c.Rate <= MaxRate) {
			return fmt.Errorf("%w: %s cost %g s a tensor at %g bytes/s", ErrProfile, c.name, c.c.Tensor, c.c.Rate)
		}
	}
	return nil
}

// MaxTensorCost and MaxRate bound a profile's costs (Check).
const (
	MaxTensorCost = 60   // seconds a tensor
	MaxRate       = 1e18 // bytes a second
)

// Time is the predicted seconds to load a tensor of size raw bytes stored
// as kind.
func (p *Profile) Time(k Kind, size uint64) float64 {
	return p.Pair(k, size <= p.SmallBytes).Time(size)
}

// Pair is the cost of kind k for tensors of at most SmallBytes (small)
// or larger ones.
func (p *Profile) Pair(k Kind, small bool) Cost {
	switch {
	case k == Fixed && small:
		return p.FixedSmall
	case k == Fixed:
		return p.Fixed
	case k == Entropy && small:
		return p.EntropySmall
	case k == Entropy:
		return p.Entropy
	case small:
		return p.RawSmall
	}
	return p.Raw
}

// Choice is what Choose picked and why: the predicted seconds of each
// kind it weighed (NaN for one it could not use).
type Choice struct {
	Kind  Kind
	Times [3]float64
}

// ReasonPrefix starts the reason the index records for a tensor the
// model kept raw (Choice.Reason).
const ReasonPrefix = "cost model: "

// Reason says why a tensor stays raw, for the index.
func (c Choice) Reason() string {
	s := fmt.Sprintf("%sraw %.2f µs", ReasonPrefix, c.Times[Raw]*1e6)
	for _, k := range []Kind{Fixed, Entropy} {
		if !math.IsNaN(c.Times[k]) {
			s += fmt.Sprintf(", %s %.2f µs", k, c.Times[k]*1e6)
		}
	}
	return s
}

// Choose picks the kind of a tensor of size raw bytes that loads fastest,
// among raw and those allowed (the codecs that apply to its dtype and
// passed their gates). A kind within 1% of the fastest that stores fewer
// bytes wins over it.
func (p *Profile) Choose(size uint64, fixed, entropy bool) Choice {
	c := Choice{Kind: Raw, Times: [3]float64{p.Time(Raw, size), math.NaN(), math.NaN()}}
	if fixed {
		c.Times[Fixed] = p.Time(Fixed, size)
	}
	if entropy {
		c.Times[Entropy] = p.Time(Entropy, size)
	}
	best := c.Times[Raw]
	for _, k := range []Kind{Fixed, Entropy} {
		if !math.IsNaN(c.Times[k]) && c.Times[k] < best {
			best = c.Times[k]
		}
	}
	for _, k := range []Kind{Entropy, Fixed, Raw} {
		if !math.IsNaN(c.Times[k]) && c.Times[k] <= best*1.01 {
			c.Kind = k
			break
		}
	}
	return c
}
