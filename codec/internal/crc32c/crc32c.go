// Package crc32c computes CRC-32C (Castagnoli), the checksum of
// splitzip's payloads, as hash/crc32 does, and faster where the processor
// folds the data faster with carry-less multiplication (PCLMULQDQ) than
// hash/crc32 runs three CRC32 instructions side by side: 64 bytes a step
// in four 128-bit lanes, the lanes then folded into one and that reduced
// with the CRC32 instruction; with AVX-512 and VPCLMULQDQ, 256 bytes a
// step in sixteen lanes of four registers. Which way a process uses is
// measured once, on its first long input, and a folding kept only where
// it takes at most 85% of hash/crc32's time: on the 2-core AMD EPYC
// (family 23) development machine the narrow folding ran 7.0-7.8 GB/s
// against hash/crc32's 4.1-4.2 (docs/PERF.md). Where the CRC32
// instruction issues every cycle the narrow folding and hash/crc32 may be
// even (the H200's Xeon host: 10-18 GB/s each on 7 MiB); the wide one ran
// 19-26 GB/s there.
package crc32c

import (
	"hash/crc32"
	"sync"
	"sync/atomic"
	"time"
)

// table is hash/crc32's Castagnoli table.
var table = crc32.MakeTable(crc32.Castagnoli)

// foldMin is the shortest input the folding takes: below it hash/crc32
// is as fast.
const foldMin = 256

// How long inputs are checksummed: not measured yet, folded (64 bytes a
// step), folded wide (256 bytes a step, AVX-512), or by hash/crc32.
const (
	undecided int32 = iota
	folded
	foldedWide
	tabled
)

var (
	choice  atomic.Int32 // folded, foldedWide or tabled once measured (tests set it)
	measure sync.Once
)

// Update returns the CRC-32C of p appended to data whose CRC-32C is crc,
// as crc32.Update(crc, crc32.MakeTable(crc32.Castagnoli), p) does.
func Update(crc uint32, p []byte) uint32 {
	if !canFold || len(p) < foldMin {
		return crc32.Update(crc, table, p)
	}
	c := choice.Load()
	if c == undecided {
		measure.Do(pick)
		c = choice.Load()
	}
	if c == tabled || c == foldedWide && !canFoldWide {
		return crc32.Update(crc, table, p)
	}
	return fold(crc, p, c == foldedWide)
}

// Checksum returns the CRC-32C of p.
func Checksum(p []byte) uint32 { return Update(0, p) }

// fold is Update by folding: whole 64-byte blocks folded from the raw
// state (crc32.Update's state is the CRC inverted), the rest by
// hash/crc32.
func fold(crc uint32, p []byte, wide bool) uint32 {
	n := len(p) &^ 63
	r := foldRaw(^crc, p[:n], wide)
	return crc32.Update(^r, table, p[n:])
}

// pickSink keeps pick's timed calls from being optimized away.
var pickSink uint32

// pick times each way the processor has on 64 KiB, the best of five runs
// each, and keeps the fastest folding when it takes at most 85% of
// hash/crc32's time (all give the same checksums, so a wrong pick costs
// only speed).
func pick() {
	buf := make([]byte, 64<<10)
	for i := range buf {
		buf[i] = byte(i * 131)
	}
	best := func(f func()) time.Duration {
		b := time.Duration(1 << 62)
		for range 5 {
			t := time.Now()
			f()
			b = min(b, time.Since(t))
		}
		return b
	}
	var sink uint32
	tt := best(func() { sink ^= crc32.Update(0, table, buf) })
	c, tc := tabled, tt*85/100
	if tf := best(func() { sink ^= fold(0, buf, false) }); tf <= tc {
		c, tc = folded, tf
	}
	if canFoldWide {
		if tw := best(func() { sink ^= fold(0, buf, true) }); tw <= tc {
			c = foldedWide
		}
	}
	pickSink = sink
	choice.CompareAndSwap(undecided, c)
}
