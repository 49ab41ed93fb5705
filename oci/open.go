package oci

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/splitzip/splitzip/shardcache"
)

// Open opens the cache artifact at ref (a registry reference or an
// s3:// layout) in place: its manifest and index are read and checked
// against each other, and a load's reads of its object files and packs
// become ranged GETs of their blobs, with no local copy. Digests cannot
// be checked on ranges: what a load reads is checked as a local cache's
// is (payload checksums); `verify` of the reference checks every digest.
func Open(ctx context.Context, ref string, o Options) (*shardcache.Cache, error) {
	src, err := o.source(ctx, ref, false)
	if err != nil {
		return nil, err
	}
	art, err := readArtifact(ctx, src, "open")
	if err != nil {
		return nil, err
	}
	return shardcache.OpenRemote(art.ix, src.String(), &remoteFiles{ctx: ctx, src: src, layers: art.layers, gets: make(chan struct{}, maxRangeGETs)}), nil
}

// remoteFiles reads a remote cache's files as ranges of their blobs.
type remoteFiles struct {
	ctx    context.Context
	src    source
	layers map[shardcache.Key]v1.Descriptor
	cost   rangeCost
	gets   chan struct{} // a slot each ranged GET in flight holds
}

// ReadFileAt reads len(p) bytes of file key at off: by one ranged GET, or,
// for a read of more than the part size rangeCost picks, by parts read in
// parallel.
func (r *remoteFiles) ReadFileAt(key shardcache.Key, p []byte, off int64) error {
	return r.ReadFileStretches(key, p, off, nil)
}

// ReadFileStretches is ReadFileAt telling stretches (if set) of each part
// as it arrives, a span of at most spanBytes at a time
// (shardcache.StretchFiles).
func (r *remoteFiles) ReadFileStretches(key shardcache.Key, p []byte, off int64, stretches shardcache.Stretches) error {
	d, ok := r.layers[key]
	switch {
	case !ok:
		return fmt.Errorf("%s: %w: no layer holds %s", r.src, ErrBlob, key)
	case off < 0 || off+int64(len(p)) > d.Size:
		return fmt.Errorf("%s: blob %s: bytes [%d, %d) past its %d", r.src, d.Digest, off, off+int64(len(p)), d.Size)
	}
	parts := splitRange(int64(len(p)), r.cost.part())
	if len(parts) == 1 {
		return r.readRange(r.ctx, d, p, off, stretches)
	}
	// The first part to fail stops the others: their bytes are of no use.
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	var at int64
	for _, n := range parts {
		q, o := p[at:at+n], off+at
		at += n
		wg.Go(func() {
			if err := r.readRange(ctx, d, q, o, stretches); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		})
	}
	wg.Wait()
	return first
}

// readRange reads len(p) bytes of blob d at off by one ranged GET, asking
// again from where a body broke off (resumeTries), and tells
// rangeCost what an unbroken one cost (the time its spans took not
// counted); stretches, if set, is told of the bytes as one stretch, the
// GETs that resume it included.
func (r *remoteFiles) readRange(ctx context.Context, d v1.Descriptor, p []byte, off int64, stretches shardcache.Stretches) error {
	select {
	case r.gets <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%s: blob %s: %w", r.src, d.Digest, ctx.Err())
	}
	defer func() { <-r.gets }()
	var span func([]byte)
	if stretches != nil && len(p) > 0 {
		span = stretches(off)
	}
	var got int
	for try, fails := 0, 0; ; try++ {
		t0 := time.Now()
		body, err := r.src.get(ctx, d, off+int64(got), int64(len(p)-got))
		if err != nil {
			// A request that fails (a server gone for a moment) is a try.
			if fails++; ctx.Err() != nil || fails > resumeTries {
				return fmt.Errorf("%s: blob %s: %w", r.src, d.Digest, err)
			}
			if err := pause(ctx, fails); err != nil {
				return fmt.Errorf("%s: blob %s: %w", r.src, d.Digest, err)
			}
			continue
		}
		t1 := time.Now()
		n, spent, err := readSpans(body, p[got:], span)
		body.Close()
		if err == nil && try == 0 {
			r.cost.observe(t1.Sub(t0), int64(n), time.Since(t1)-spent)
		}
		got += n
		if fails++; n >= resumeProgress {
			fails = 0
		}
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil || fails > resumeTries:
			return fmt.Errorf("%s: blob %s: %d of %d bytes at %d: %w", r.src, d.Digest, got, len(p), off, err)
		}
		if err := pause(ctx, fails); err != nil {
			return fmt.Errorf("%s: blob %s: %w", r.src, d.Digest, err)
		}
	}
}

// spanBytes is the most readSpans hands over at a time: small enough to
// be in the core's cache still. Checksummed after the whole 16 MiB piece
// had arrived, a streamed load's pieces ran at about 6 GB/s a core on the
// H100 host (a CPU profile, 2026-12-06), read back from memory that the
// loopback copies kept busy. Smaller than transport's crcStep (512 KiB, a
// pread from the page cache) so that a span and the socket's next bytes
// fit a core's L2; the size was not tuned.
const spanBytes = 128 << 10

// readSpans reads len(p) bytes of r into p as io.ReadFull does, giving
// span (if set) each span of at most spanBytes as soon as it is in p, and
// returns the time span took.
func readSpans(r io.Reader, p []byte, span func([]byte)) (int, time.Duration, error) {
	if span == nil {
		n, err := io.ReadFull(r, p)
		return n, 0, err
	}
	got := 0
	var spent time.Duration
	for got < len(p) {
		n, err := io.ReadFull(r, p[got:min(got+spanBytes, len(p))])
		if n > 0 {
			t := time.Now()
			span(p[got : got+n])
			spent += time.Since(t)
		}
		got += n
		switch {
		case err == io.EOF && got > 0:
			return got, spent, io.ErrUnexpectedEOF
		case err != nil:
			return got, spent, err
		}
	}
	return got, spent, nil
}
