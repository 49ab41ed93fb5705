package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/splitzip/splitzip/s3store"
)

// An S3 prefix holds caches as an OCI image layout (image-spec's
// image-layout.md): the file oci-layout, an index.json whose manifests
// are tagged by their org.opencontainers.image.ref.name annotation, and
// every blob at blobs/sha256/HEX. Blobs are shared by every artifact
// under the prefix, so a fine-tune beside its base stores and moves only
// what it changed, as in a registry; and a copy of the prefix is a
// layout that OCI tools (oras --oci-layout, skopeo) read.
const (
	layoutMarker = "oci-layout"
	layoutIndex  = "index.json"
	// RefAnnotation tags a manifest in a layout's index.
	RefAnnotation = "org.opencontainers.image.ref.name"
	// DefaultTag is the tag of a reference that names none.
	DefaultTag = "latest"
	// maxManifestBytes bounds a manifest a pull reads (registries take
	// at most 4 MiB).
	maxManifestBytes = 4 << 20
	// maxLayoutIndexBytes bounds a layout's index.json.
	maxLayoutIndexBytes = 64 << 20
	// tagTries bounds the rereads of index.json when another writer
	// changed it between a push's read and its conditional write.
	tagTries = 8
	// tagBackoff is how much longer, at most, a push waits after each
	// round it lost (a random wait: 0-5 ms, then 0-10 ms, ...).
	tagBackoff = 5 * time.Millisecond
)

// ErrNoTag: the layout's index has no manifest of the tag.
var ErrNoTag = errors.New("no such tag")

// layoutRef is s3://bucket/prefix[:tag|@sha256:HEX].
type layoutRef struct {
	url    s3store.URL
	tag    string
	digest v1.Hash // set instead of tag
}

func parseLayoutRef(s string) (layoutRef, error) {
	var r layoutRef
	base, rest := s, ""
	slash := strings.LastIndex(s, "/")
	if i := strings.LastIndexAny(s, ":@"); i > slash && i > len(s3store.Scheme) {
		base, rest = s[:i], s[i:]
		if at := strings.Index(base[slash+1:], "@"); at >= 0 { // name@sha256:HEX
			base, rest = s[:slash+1+at], s[slash+1+at:]
		}
	}
	if strings.ContainsAny(base[len(s3store.Scheme):], ":@") {
		return r, fmt.Errorf("%s: a ':' or '@' before the tag or digest: %w", s, ErrLayoutRef)
	}
	u, err := s3store.ParseURL(base)
	if err != nil {
		return r, err
	}
	r.url = u
	switch {
	case rest == "":
		r.tag = DefaultTag
	case rest[0] == '@':
		h, err := v1.NewHash(rest[1:])
		if err != nil || h.Algorithm != "sha256" {
			return r, fmt.Errorf("%s: a digest is sha256: and 64 hexadecimal digits: %w", s, ErrLayoutRef)
		}
		r.digest = h
	default:
		r.tag = rest[1:]
		if !validTag(r.tag) {
			return r, fmt.Errorf("%s: a tag has 1 to 128 letters, digits, '_', '.' and '-', not first '.' or '-': %w", s, ErrLayoutRef)
		}
	}
	if u.Prefix == "" {
		return r, fmt.Errorf("%w: %s: name a prefix under the bucket (s3://bucket/prefix)", s3store.ErrURL, s)
	}
	return r, nil
}

// validTag holds tags to the distribution spec's [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}.
func validTag(t string) bool {
	if len(t) == 0 || len(t) > 128 || t[0] == '.' || t[0] == '-' {
		return false
	}
	for _, c := range t {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

func (r layoutRef) String() string {
	if r.tag != "" {
		return r.url.String() + ":" + r.tag
	}
	return r.url.String() + "@" + r.digest.String()
}

// layout is an OCI image layout under an S3 prefix.
type layout struct {
	ctx context.Context
	st  *s3store.Store
	ref layoutRef
}

func (o Options) layout(ctx context.Context, ref string) (*layout, error) {
	r, err := parseLayoutRef(ref)
	if err != nil {
		return nil, err
	}
	st, err := s3store.New(ctx, r.url, o.S3)
	if err != nil {
		return nil, err
	}
	return &layout{ctx: ctx, st: st, ref: r}, nil
}

func (l *layout) String() string { return l.ref.String() }

func (l *layout) mend() string {
	return "delete that blob's object (" + l.ref.url.String() + "/blobs/sha256/HEX) and push again"
}

func blobName(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

// index reads the layout's index.json and its ETag; a layout without one
// has an empty index and no ETag.
func (l *layout) index() (v1.IndexManifest, string, error) {
	raw, etag, err := l.st.ReadAll(l.ctx, layoutIndex, maxLayoutIndexBytes)
	if errors.Is(err, s3store.ErrNotFound) {
		return v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}, "", nil
	}
	if err != nil {
		return v1.IndexManifest{}, "", err
	}
	var ix v1.IndexManifest
	if err := json.Unmarshal(raw, &ix); err != nil {
		return v1.IndexManifest{}, "", fmt.Errorf("%s/%s: %w: %v", l.ref.url, layoutIndex, ErrNotArtifact, err)
	}
	return ix, etag, nil
}

// manifest finds the manifest of the reference's tag (or digest) and
// reads it, checking its digest.
func (l *layout) manifest() ([]byte, v1.Hash, error) {
	var d v1.Descriptor
	if l.ref.tag != "" {
		ix, etag, err := l.index()
		if err != nil {
			return nil, v1.Hash{}, err
		}
		found := false
		for _, m := range ix.Manifests {
			if m.Annotations[RefAnnotation] == l.ref.tag {
				d, found = m, true
			}
		}
		if !found {
			if etag == "" {
				return nil, v1.Hash{}, fmt.Errorf("%w %q: %s holds no %s", ErrNoTag, l.ref.tag, l.ref.url, layoutIndex)
			}
			return nil, v1.Hash{}, fmt.Errorf("%w %q in %s/%s", ErrNoTag, l.ref.tag, l.ref.url, layoutIndex)
		}
	} else {
		size, _, err := l.st.Stat(l.ctx, blobName(l.ref.digest))
		if err != nil {
			return nil, v1.Hash{}, err
		}
		d = v1.Descriptor{Digest: l.ref.digest, Size: size}
	}
	if d.Size < 0 || d.Size > maxManifestBytes {
		return nil, v1.Hash{}, fmt.Errorf("%w: a manifest of %d bytes", ErrBlob, d.Size)
	}
	var buf bytes.Buffer
	if err := fetch(l.ctx, l, d, &buf); err != nil {
		return nil, v1.Hash{}, err
	}
	return buf.Bytes(), d.Digest, nil
}

// open reads the rest of a blob (a pull's) by ranged GETs read ahead
// (s3store's Open).
func (l *layout) open(d v1.Descriptor, off int64) (io.ReadCloser, error) {
	return l.st.Open(l.ctx, blobName(d.Digest), off, d.Size), nil
}

// get reads n bytes of a blob from off by one GET under ctx (a remote
// cache's read, whose timing its part sizes learn from).
func (l *layout) get(ctx context.Context, d v1.Descriptor, off, n int64) (io.ReadCloser, error) {
	return l.st.Range(ctx, blobName(d.Digest), off, n)
}

// push writes the artifact's blobs the layout lacks (jobs at a time),
// then its config and manifest, then tags it in index.json.
func (l *layout) push(a *artifact, jobs int, sent *atomic.Uint64, opened *atomic.Int64, p Progress) (v1.Hash, error) {
	var layers []*fileLayer
	for _, fl := range a.layers {
		layers = append(layers, fl)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error // the first blob's failure; the rest start no more
	more := 0       // blobs that failed too (most often the same way)
	for range min(jobs, len(layers)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				mu.Lock()
				stop := first != nil
				mu.Unlock()
				if i >= len(layers) || stop || l.ctx.Err() != nil {
					return
				}
				if err := l.putFile(layers[i], sent, opened, p); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					} else {
						more++
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	switch {
	case l.ctx.Err() != nil:
		return v1.Hash{}, l.ctx.Err() // the uploads' errors are its
	case first != nil && more > 0:
		return v1.Hash{}, fmt.Errorf("%w (and %d more blobs failed, uploaded at the same time)", first, more)
	case first != nil:
		return v1.Hash{}, first
	}
	cd, err := blobDescriptor(a.config)
	if err != nil {
		return v1.Hash{}, err
	}
	md, err := blobDescriptor(a.manifest)
	if err != nil {
		return v1.Hash{}, err
	}
	for _, b := range []struct {
		d v1.Descriptor
		b []byte
	}{{cd, a.config}, {md, a.manifest}} {
		if err := l.putBytes(b.d, b.b); err != nil {
			return v1.Hash{}, err
		}
	}
	md.MediaType, md.ArtifactType = types.OCIManifestSchema1, ArtifactType
	return md.Digest, l.tag(md)
}

// putFile uploads a file's blob unless the layout holds it: blobs are
// named by their digest, and every pull checks it.
func (l *layout) putFile(fl *fileLayer, sent *atomic.Uint64, opened *atomic.Int64, p Progress) error {
	name := blobName(fl.digest)
	if size, _, err := l.st.Stat(l.ctx, name); err == nil && size == fl.size {
		return nil
	} else if err != nil && !errors.Is(err, s3store.ErrNotFound) {
		return err
	}
	f, err := os.Open(fl.path)
	if err != nil {
		return err
	}
	defer f.Close()
	opened.Add(1)
	return l.st.Write(l.ctx, name, f, fl.size, func(n int64) {
		sent.Add(uint64(n))
		p.Add(uint64(n))
	})
}

func (l *layout) putBytes(d v1.Descriptor, b []byte) error {
	name := blobName(d.Digest)
	if size, _, err := l.st.Stat(l.ctx, name); err == nil && size == d.Size {
		return nil
	}
	return l.st.Put(l.ctx, name, b, s3store.Cond{})
}

// tag points the reference's tag at manifest md in index.json (written
// with oci-layout when the layout is new), by a conditional write over
// the index read, so that pushes of two tags at once both land.
func (l *layout) tag(md v1.Descriptor) error {
	if l.ref.tag == "" {
		return nil // pushed by digest: untagged, found by digest
	}
	md.Annotations = map[string]string{RefAnnotation: l.ref.tag}
	for try := range tagTries {
		ix, etag, err := l.index()
		if err != nil {
			return err
		}
		kept := ix.Manifests[:0]
		for _, m := range ix.Manifests {
			if m.Annotations[RefAnnotation] != l.ref.tag {
				kept = append(kept, m)
			}
		}
		ix.Manifests = append(kept, md)
		raw, err := json.Marshal(ix)
		if err != nil {
			return err
		}
		cond := s3store.Cond{IfMatch: etag, IfAbsent: etag == ""}
		if etag == "" {
			if err := l.st.Put(l.ctx, layoutMarker, []byte(`{"imageLayoutVersion":"1.0.0"}`), s3store.Cond{}); err != nil {
				return err
			}
		}
		err = l.st.Put(l.ctx, layoutIndex, raw, cond)
		if !errors.Is(err, s3store.ErrChanged) {
			return err
		}
		// Another writer won the round: wait a random while, up to
		// tagBackoff more each round, so that writers racing for the
		// index spread out instead of colliding again.
		if err := sleep(l.ctx, rand.N(time.Duration(try+1)*tagBackoff)); err != nil {
			return err
		}
	}
	// The store's answer each time: its precondition failed (another
	// writer, or a store that answers so for an object removed behind
	// its metadata's back).
	return fmt.Errorf("%s/%s: %w: %d conditional writes in a row refused (another writer's pushes, or a store whose metadata is out of step with its objects)", l.ref.url, layoutIndex, s3store.ErrChanged, tagTries)
}

// blobDescriptor is the size and sha256 digest of b.
func blobDescriptor(b []byte) (v1.Descriptor, error) {
	h, size, err := v1.SHA256(bytes.NewReader(b))
	return v1.Descriptor{Digest: h, Size: size}, err
}
