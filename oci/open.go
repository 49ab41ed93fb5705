package oci

import (
	"context"
	"fmt"
	"io"

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
	src, err := o.source(ctx, ref)
	if err != nil {
		return nil, err
	}
	art, err := readArtifact(ctx, src, "open")
	if err != nil {
		return nil, err
	}
	return shardcache.OpenRemote(art.ix, src.String(), &remoteFiles{ctx: ctx, src: src, layers: art.layers}), nil
}

// remoteFiles reads a remote cache's files as ranges of their blobs.
type remoteFiles struct {
	ctx    context.Context
	src    source
	layers map[shardcache.Key]v1.Descriptor
}

// ReadFileAt reads len(p) bytes of file key at off by a ranged GET,
// asking again from where a body broke off, up to resumeTries times.
func (r *remoteFiles) ReadFileAt(key shardcache.Key, p []byte, off int64) error {
	d, ok := r.layers[key]
	switch {
	case !ok:
		return fmt.Errorf("%s: %w: no layer holds %s", r.src, ErrBlob, key)
	case off < 0 || off+int64(len(p)) > d.Size:
		return fmt.Errorf("%s: blob %s: bytes [%d, %d) past its %d", r.src, d.Digest, off, off+int64(len(p)), d.Size)
	}
	var got int
	for try := 0; ; try++ {
		body, err := r.src.open(d, off+int64(got), int64(len(p)-got))
		if err != nil {
			return fmt.Errorf("%s: blob %s: %w", r.src, d.Digest, err)
		}
		n, err := io.ReadFull(body, p[got:])
		body.Close()
		got += n
		switch {
		case err == nil:
			return nil
		case r.ctx.Err() != nil || try == resumeTries:
			return fmt.Errorf("%s: blob %s: %d of %d bytes at %d: %w", r.src, d.Digest, got, len(p), off, err)
		}
	}
}
