package gpu

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/splitzip/splitzip/gpu/cuda"
)

// traceWords is SZ_TRACE_WORDS: the words a block of a kernel built with
// SZ_TRACE writes after the launch's control words.
const traceWords = 8

// The words of a block's trace record, in order (decode.cu, SZ_TRACE).
var traceFields = []string{"entry", "set-up done", "first stage full", "no ticket left", "consumers done", "exit"}

// DecodeTrace is what the blocks of the last fixed-rate decode launch
// recorded, from a kernel built with -DSZ_TRACE and a decoder made with
// SPLITZIP_DECODE_TRACE set: for each block, %globaltimer stamps in ns
// (entry, set-up done, first stage full, no ticket left, consumers done,
// exit) and the chunks its consumers decoded. (The kernel's comment also
// names a first ticket in the last word, which it does not write: the
// word is 0.)
type DecodeTrace struct {
	Blocks [][traceWords]uint64
}

// Trace returns the trace of the launches on s since the last call (the
// last launch's, where they had the same grid), or nil when the decoder
// was made without SPLITZIP_DECODE_TRACE; it clears the records.
func (d *Decoder) Trace(s cuda.Stream) (*DecodeTrace, error) {
	if d.traceWords == 0 {
		return nil, nil
	}
	b := make([]byte, 8*d.traceWords)
	if err := d.ctx.CopyDtoHAsync(b, d.ctrl+ctrlBytes, s); err != nil {
		return nil, err
	}
	if err := d.ctx.MemsetD8Async(d.ctrl+ctrlBytes, 0, uint64(len(b)), s); err != nil {
		return nil, err
	}
	if err := d.ctx.StreamSynchronize(s); err != nil {
		return nil, err
	}
	t := &DecodeTrace{}
	for i := 0; i+traceWords <= d.traceWords; i += traceWords {
		var r [traceWords]uint64
		for j := range r {
			r[j] = binary.LittleEndian.Uint64(b[8*(i+j):])
		}
		if r[0] != 0 {
			t.Blocks = append(t.Blocks, r)
		}
	}
	return t, nil
}

// String summarizes the trace: for each stamp, the earliest block, the
// 10th percentile, the median, the 90th percentile and the latest, in µs
// after the earliest entry, and the same of the blocks' chunk counts.
func (t *DecodeTrace) String() string {
	if t == nil || len(t.Blocks) == 0 {
		return "no trace"
	}
	t0 := t.Blocks[0][0]
	for _, r := range t.Blocks {
		t0 = min(t0, r[0])
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d blocks", len(t.Blocks))
	for f, name := range traceFields {
		v := make([]float64, 0, len(t.Blocks))
		for _, r := range t.Blocks {
			if r[f] >= t0 {
				v = append(v, float64(r[f]-t0)/1e3)
			}
		}
		if len(v) == 0 {
			continue
		}
		slices.Sort(v)
		k := len(v) - 1
		fmt.Fprintf(&sb, "; %s %.2f/%.2f/%.2f/%.2f/%.2f", name, v[0], v[k/10], v[k/2], v[k-k/10], v[k])
	}
	n := make([]uint64, len(t.Blocks))
	for i, r := range t.Blocks {
		n[i] = r[6]
	}
	slices.Sort(n)
	k := len(n) - 1
	fmt.Fprintf(&sb, "; chunks %d/%d/%d/%d/%d", n[0], n[k/10], n[k/2], n[k-k/10], n[k])
	return sb.String()
}
