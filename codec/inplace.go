package codec

import "fmt"

// computeReaders fills in each chunk's reader range and checks the in-place
// invariant: every byte that chunk d reads (its entry and its data) lies
// below the end of chunk d's own output, 2*min((d+1)*C, n). Then every chunk
// that reads a byte in chunk c's output range has an index of at least c, so
// decoding chunks in descending order, each waiting only for the readers of
// its own output range, never waits in a cycle. The group table, read by
// every chunk, lies inside chunk 0's output range, so chunk 0 waits for all
// chunks and its reader fields are zero.
func computeReaders(h *Header, l1 []uint64, ents []entry) error {
	lo, span, err := readers(h, l1, ents)
	if err != nil {
		return err
	}
	for c := range ents {
		ents[c].ReadLo, ents[c].ReadSpan = lo[c], span[c]
	}
	return nil
}

// readers returns each chunk's reader range as the format defines it, or an
// error matching ErrNotInPlace.
func readers(h *Header, l1 []uint64, ents []entry) (lo []uint32, span []uint16, err error) {
	N := uint64(len(ents))
	C := uint64(h.ChunkValues)
	dataEnd := func(d uint64) uint64 {
		return ents[d].Offset + chunkLen(h.chunkCount(d), ents[d].Escapes)
	}
	entryPos := func(d uint64) uint64 {
		g, j := h.group(d)
		return l1[g] + EntrySize*j
	}
	outEnd := func(d uint64) uint64 { return 2 * min((d+1)*C, h.Values) }
	for d := range N {
		if end := dataEnd(d); end > outEnd(d) {
			return nil, nil, fmt.Errorf("%w: chunk %d reads up to byte %d, past its output end %d", ErrNotInPlace, d, end, outEnd(d))
		}
	}
	lo = make([]uint32, N)
	span = make([]uint16, N)
	// Both the entries and the data of successive chunks lie at increasing
	// offsets, so the chunks reading a range form two contiguous runs;
	// sweep them with four cursors.
	var dFirst, dLast, eFirst, eLast uint64
	for c := uint64(1); c < N; c++ {
		a, b := 2*c*C, outEnd(c)
		for dFirst < N && dataEnd(dFirst) <= a {
			dFirst++
		}
		for dLast < N && ents[dLast].Offset < b {
			dLast++
		}
		for eFirst < N && entryPos(eFirst)+EntrySize <= a {
			eFirst++
		}
		for eLast < N && entryPos(eLast) < b {
			eLast++
		}
		// Runs are [dFirst, dLast) and [eFirst, eLast); take their hull.
		first, last := N, uint64(0) // last is exclusive
		if dFirst < dLast {
			first, last = dFirst, dLast
		}
		if eFirst < eLast {
			first, last = min(first, eFirst), max(last, eLast)
		}
		if first == c {
			first++
		}
		if first >= last {
			continue
		}
		if first < c {
			return nil, nil, fmt.Errorf("%w: chunk %d reads bytes in chunk %d's output", ErrNotInPlace, first, c)
		}
		if last-first > 0xFFFF || first > 0xFFFFFFFF {
			return nil, nil, fmt.Errorf("%w: chunk %d has %d readers", ErrNotInPlace, c, last-first)
		}
		lo[c], span[c] = uint32(first), uint16(last-first)
	}
	return lo, span, nil
}
