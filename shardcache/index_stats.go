package shardcache

import (
	"errors"
	"fmt"

	"lukechampine.com/blake3"
)

// statsSection is a version 5 index's statistics section as opening the
// cache left it: its bytes, unchecked, and what of the body LoadStats
// needs to walk the records in the body's order.
type statsSection struct {
	file   string   // the index file, for errors
	offset int64    // of b in the file, for errors
	sum    [32]byte // the BLAKE3-256 the section's head gives
	b      []byte   // the section after its head: tables and records
	// table is the body's object table; inline has bit i set when the
	// body's i-th tensor record holds its object; tensors counts the
	// tensor records.
	table   []Object
	inline  []uint64
	tensors int
	err     error // what LoadStats found, returned again
}

// errIndexChanged reports a LoadStats after the index was changed: its
// records no longer follow the body the statistics were written beside.
var errIndexChanged = errors.New("shardcache: the index was changed before its statistics were loaded (LoadStats)")

// LoadStats decodes the statistics of an index read from version 5
// (ObjectStats and TensorStats), which opening a cache leaves in their
// section undecoded because loads never need them, after checking the
// section's hash. inspect and verify call it, Create calls it before a
// writer changes the index, and writing an index calls it so that the
// statistics are never dropped. It does nothing for an index of another
// version (the statistics were in its body), one written without
// statistics, or one whose statistics are loaded. A corrupt section is
// an *IndexError naming the index file; the statistics then stay zero,
// and every later call returns the same error, so that an index with
// them is never written without them. LoadStats must come before the
// index is changed, and is not safe for concurrent use.
func (ix *Index) LoadStats() error {
	st := ix.stats
	if st == nil {
		return nil
	}
	if st.err != nil {
		return st.err
	}
	tensors := 0
	for i := range ix.Sources {
		for j := range ix.Sources[i].Shards {
			tensors += len(ix.Sources[i].Shards[j].Tensors)
		}
	}
	if tensors != st.tensors {
		return errIndexChanged
	}
	if blake3.Sum256(st.b) != st.sum {
		st.err = &IndexError{st.file, -1, "statistics checksum mismatch"}
		return st.err
	}
	d := &indexDecoder{file: st.file, base: st.offset, b: st.b, version: statsIndexVersion}
	d.strings()
	d.codebooks()
	for i := range st.table {
		d.objectStats(&st.table[i])
	}
	n := 0
	for i := range ix.Sources {
		for j := range ix.Sources[i].Shards {
			sh := &ix.Sources[i].Shards[j]
			for k := range sh.Tensors {
				t := &sh.Tensors[k]
				d.tensorStats(t)
				if st.inline[n/64]>>(n%64)&1 != 0 {
					o := ix.Objects[t.Key]
					if o == nil {
						ix.clearStats()
						return errIndexChanged
					}
					d.objectStats(o)
				}
				n++
			}
		}
	}
	if d.err == nil && d.left() != 0 {
		d.fail("%d bytes after the last record", d.left())
	}
	if d.err == nil {
		for k, o := range ix.Objects {
			if err := o.checkStats(k); err != nil {
				d.err = &IndexError{st.file, -1, fmt.Sprintf("statistics: %v", err)}
				break
			}
		}
	}
	if d.err != nil {
		ix.clearStats()
		st.err = d.err
		return st.err
	}
	ix.stats = nil
	return nil
}

// clearStats sets every statistic of ix to zero.
func (ix *Index) clearStats() {
	for _, o := range ix.Objects {
		o.ObjectStats = ObjectStats{}
	}
	for i := range ix.Sources {
		for j := range ix.Sources[i].Shards {
			sh := &ix.Sources[i].Shards[j]
			for k := range sh.Tensors {
				sh.Tensors[k].TensorStats = TensorStats{}
			}
		}
	}
}
