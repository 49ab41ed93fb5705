package transport

// Reading payload objects: whole into a buffer (read), and in pieces that
// are checksummed where they land (readChecked); small ones are staged by
// the packer. The checks themselves are package payload's.

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/payload"
	"github.com/splitzip/splitzip/shardcache"
)

// readPiece is the unit of parallel payload reads from local files.
const readPiece = 8 << 20

// remotePiece is that unit for a remote cache (shardcache.OpenRemote):
// each piece is one read of the remote file (ranged GETs of the part size
// package oci picks, in parallel: two of 8 MiB on loopback), and a piece
// costs a goroutine, a checksum call, a copy and an event.
// Streaming an 8 GiB Llama shape from a loopback S3 server on the H100
// host (2026-12-06, runs 2-3, raw bytes a second): 8 MiB pieces gave
// fixed 14.2-14.7 GB/s and entropy 14.7-16.5; 16 MiB pieces with 16
// readers and 1 GiB of staging 19.2-20.5 and 21.9-22.2; 32 MiB pieces
// no more (16.4-16.6 and 18.4-20.5 with 8 readers), and in 256 MiB of
// staging too few to keep the link busy (7.5-11.3).
const remotePiece = 16 << 20

// pieceBytes is the unit of parallel payload reads from c.
func pieceBytes(c *shardcache.Cache) uint64 {
	if c != nil && c.Remote() {
		return remotePiece
	}
	return readPiece
}

// piecesPerReader is how many staging pieces the payload ring holds per
// reader: beyond the one a reader fills, the others hold copies still in
// flight, so a reader rarely waits for the device to free one. On the
// H200, 4 loaded a 12-layer MoE (2,391 payloads of 1.1-2.2 MB) at
// 37.4-40.5 GB/s where 2 gave 36.1-37.0 (smaller pieces, more of them,
// did no better).
const piecesPerReader = 4

// crcStep is the unit in which a piece is read and checksummed: small
// enough that the checksum reads bytes still in the core's cache, not a
// second time from memory (host memory bandwidth bounds cold loads).
const crcStep = 512 << 10

// readChecked reads q from f at offset off, crcStep at a time (a remote
// object's in one read, checksummed as it lands: readStretches), and
// returns the checksum of q as a piece of its payload, with the time
// spent reading and checksumming.
func readChecked(f io.ReaderAt, q []byte, off uint64) (sum uint32, read, verify time.Duration, err error) {
	step := crcStep
	if r, ok := f.(interface{ Remote() bool }); ok && r.Remote() {
		if sr, ok := f.(stretchReaderAt); ok {
			return readStretches(sr, q, off)
		}
		step = max(len(q), 1) // one ranged GET a piece: a request costs a round trip
	}
	for o := 0; o < len(q); o += step {
		sub := q[o:min(o+step, len(q))]
		t0 := time.Now()
		if _, err := f.ReadAt(sub, int64(off)+int64(o)); err != nil {
			return 0, 0, 0, err
		}
		t1 := time.Now()
		c := codec.PieceChecksum(sub, off+uint64(o))
		if o == 0 {
			sum = c
		} else {
			sum = codec.CombineChecksums(sum, c, uint64(len(sub)))
		}
		read += t1.Sub(t0)
		verify += time.Since(t1)
	}
	return sum, read, verify, nil
}

// stretchReaderAt reads an object telling of its bytes as they land
// (shardcache.ObjectBytes).
type stretchReaderAt interface {
	ReadAtStretches(p []byte, off int64, stretches shardcache.Stretches) error
}

// stretch is one stretch of a piece read by readStretches: where it
// starts, the bytes checksummed so far and their checksum, and the time
// that took.
type stretch struct {
	off, n uint64
	sum    uint32
	verify time.Duration
}

// readStretches is readChecked of a remote object, in one read (a
// request costs a round trip) whose stretches, read in parallel, are
// checksummed span by span as they land, while the bytes are in the
// core's cache; the stretches' checksums are then folded in order. A
// reader whose stretches do not tile q exactly has q checksummed again,
// whole (wholeChecks counts those). The checksum time returned is summed
// over the stretches, the read time is the read's wall time less the
// longest stretch's checksum time.
func readStretches(f stretchReaderAt, q []byte, off uint64) (sum uint32, read, verify time.Duration, err error) {
	var mu sync.Mutex
	var got []*stretch
	t0 := time.Now()
	err = f.ReadAtStretches(q, int64(off), func(at int64) func([]byte) {
		r := &stretch{off: uint64(at)}
		mu.Lock()
		got = append(got, r)
		mu.Unlock()
		return func(s []byte) {
			t := time.Now()
			r.sum = codec.UpdatePieceChecksum(r.sum, s, r.off+r.n)
			r.n += uint64(len(s))
			r.verify += time.Since(t)
		}
	})
	total := time.Since(t0)
	if err != nil {
		return 0, 0, 0, err
	}
	slices.SortFunc(got, func(a, b *stretch) int { return cmp.Compare(a.off, b.off) })
	at, tiled, longest := off, 0, time.Duration(0)
	for _, r := range got {
		if r.off != at {
			break
		}
		sum = codec.CombineChecksums(sum, r.sum, r.n)
		at += r.n
		verify += r.verify
		longest = max(longest, r.verify)
		tiled++
	}
	if at != off+uint64(len(q)) || tiled != len(got) {
		wholeChecks.Add(1)
		t := time.Now()
		sum = codec.PieceChecksum(q, off)
		return sum, total, time.Since(t), nil
	}
	return sum, max(total-longest, 0), verify, nil
}

// wholeChecks counts the pieces readStretches checksummed again whole,
// their stretches not tiling them: a reader that breaks its contract
// costs only speed, so tests look here.
var wholeChecks atomic.Int64

// read loads a payload object into buf, in pieces read and checksummed in
// parallel, and verifies header and checksum.
func (z *Payloads) read(key shardcache.Key, buf []byte) (*held, error) {
	t0 := time.Now()
	loc, o, err := z.cache.Locate(key)
	if err != nil {
		return nil, err
	}
	if o.Size > uint64(len(buf)) {
		return nil, ErrTooLarge
	}
	f, err := z.objects.Open(loc)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := buf[:o.Size]
	sums := codec.NewPieceSums(o.Size, z.piece)
	n := sums.Pieces()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		z.io <- struct{}{}
		wg.Go(func() {
			defer func() { <-z.io }()
			off, size := sums.Span(i)
			sum, _, _, err := readChecked(f, b[off:off+size], off)
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", f.Name(), err)
				return
			}
			sums.Set(i, sum)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	t1 := time.Now()
	p := &held{buf: b}
	if p.h, err = payload.CheckBytes(payloadKind(o), b, sums.Sum(), 0); err != nil {
		err = fmt.Errorf("%s: %w", f.Name(), err)
	}
	z.mu.Lock()
	z.stats.Read += t1.Sub(t0)
	z.stats.Verify += time.Since(t1)
	z.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return p, nil
}

// payloadKind is the kind of payload an object of the cache holds (0 for
// an object that holds none: raw bytes, a pack).
func payloadKind(o *shardcache.Object) payload.Kind {
	switch o.Kind {
	case shardcache.KindEntropy:
		return payload.KindEntropy
	case shardcache.KindFixed:
		return payload.KindFixed
	}
	return 0
}
