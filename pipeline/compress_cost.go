package pipeline

// --codec cost: the kind of each tensor (raw, fixed, entropy) from the
// cost model, after the first pass.

import (
	"fmt"
	"strings"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/costmodel"
	"github.com/splitzip/splitzip/safetensors"
	"github.com/splitzip/splitzip/shardcache"
)

// compressByCost stores t as the kind the cost model predicts loads
// fastest among raw and the payloads whose first-pass estimates pass the
// gate (fixed: a BF16 tensor; entropy: one with entropy fields, counts).
// A payload that fails the gate once written leaves the tensor raw, with
// the reason.
func (tc *tensorCompressor) compressByCost(r *sourceReader, t *safetensors.Tensor, rec *shardcache.Tensor, hist *codec.Histogram, counts []*entropy.Counts, crc1 uint32, fixed bool, kept *bool) error {
	gate := (1 - tc.opts.MinSaving) * float64(t.Size())
	// Why no payload was weighed, where none passed its gate: in the
	// words of the codecs' own gates, not the model's (it chose nothing).
	var gated []string
	fixedOK := false
	if fixed {
		// A BF16 tensor's coverage statistics, for inspect, whatever it
		// is stored as (an entropy payload clears them).
		cb := codec.NewCodebook(hist)
		rec.Coverage, rec.Entropy = cb.Coverage(hist), hist.Entropy()
		n := t.Size() / 2
		est := fixedEstimate(hist, cb, n)
		fixedOK = n > 0 && est <= gate
		gated = append(gated, fmt.Sprintf("a fixed payload of about %.0f bytes saves at most %.1f%%", est, 100*(1-est/float64(max(t.Size(), 1)))))
	}
	entropyOK := false
	if len(counts) > 0 {
		k, est, err := smallestEstimate(counts)
		if err != nil {
			return err
		}
		entropyOK = k >= 0 && est < t.Size() && float64(est) <= gate
		if k >= 0 {
			gated = append(gated, fmt.Sprintf("an entropy payload of about %d bytes saves %.1f%%", est, 100*(1-float64(est)/float64(max(t.Size(), 1)))))
		}
	}
	ch := tc.opts.Cost.Choose(t.Size(), fixedOK, entropyOK)
	switch ch.Kind {
	case costmodel.Fixed:
		ok, read, reason, err := tc.fixedPayload(r, t, rec, hist, crc1)
		if err != nil || ok {
			return err
		}
		if !read {
			tc.opts.Progress.Add(t.Size())
		}
		rec.Reason = "fixed: " + reason
	case costmodel.Entropy:
		ok, reason, err := tc.entropyPayload(r, t, rec, counts, crc1, true)
		if err != nil || ok {
			return err
		}
		rec.Reason = "entropy: " + reason
	default:
		tc.opts.Progress.Add(t.Size())
		rec.Reason = ch.Reason()
		switch {
		case fixedOK || entropyOK:
		case t.Size() == 0:
			rec.Reason = "no values to code"
		case len(gated) > 0:
			rec.Reason = fmt.Sprintf("no payload passes the gate (%.1f%% saved): %s", 100*tc.opts.MinSaving, strings.Join(gated, "; "))
		}
	}
	return tc.storeRaw(r, t, rec, kept)
}
