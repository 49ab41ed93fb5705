package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/splitzip/splitzip/s3store"
	"github.com/splitzip/splitzip/shardcache"
)

// PushResult says what a push moved.
type PushResult struct {
	Ref    string `json:"ref"`    // the reference pushed to
	Digest string `json:"digest"` // the manifest's digest
	// Blobs and Bytes: the artifact's object files and packs and their
	// bytes, as Pull and Stat count them (the index, the manifest's
	// config, is not counted).
	Blobs int    `json:"blobs"`
	Bytes uint64 `json:"bytes"`
	// Uploaded and UploadedBytes: the blobs the registry lacked, which
	// this push sent (a retried upload counts its bytes again).
	Uploaded      int    `json:"uploaded_blobs"`
	UploadedBytes uint64 `json:"uploaded_bytes"`
}

// CheckRef checks a reference's form, as Push and Pull take it (a
// registry reference, or an s3:// layout), without reaching it:
// ErrReference or s3store.ErrURL.
func (o Options) CheckRef(ref string) error {
	if s3store.IsURL(ref) {
		_, err := parseLayoutRef(ref)
		return err
	}
	_, err := o.parse(ref)
	return err
}

// Push makes the cache in dir an OCI artifact at ref. The cache must not
// need its sources (compress --self-contained): a pulled copy loads and
// decompresses on its own. Blobs the registry holds already (by digest)
// are not sent again.
func Push(ctx context.Context, dir, ref string, o Options) (PushResult, error) {
	var (
		r      name.Reference
		lay    *layout
		err    error
		target string
	)
	if s3store.IsURL(ref) {
		if lay, err = o.layout(ctx, ref); err != nil {
			return PushResult{}, err
		}
		target = lay.String()
	} else {
		if r, err = o.parse(ref); err != nil {
			return PushResult{}, err
		}
		target = r.String()
	}
	c, err := shardcache.OpenContext(ctx, dir)
	if err != nil {
		return PushResult{}, err
	}
	defer c.Close()
	if err := pushable(c, dir); err != nil {
		return PushResult{}, err
	}
	config, err := os.ReadFile(filepath.Join(dir, shardcache.IndexName))
	if err != nil {
		return PushResult{}, err
	}
	files, _ := c.Index().Files()
	res := PushResult{Ref: target, Blobs: len(files)}
	p := o.progress()
	var sent atomic.Uint64
	var opened atomic.Int64
	layers, err := hashFiles(ctx, c, files, o.jobs(), &sent, &opened, p)
	if err != nil {
		return PushResult{}, err
	}
	for _, l := range layers {
		res.Bytes += uint64(l.size)
	}
	art, err := newArtifact(config, layers)
	if err != nil {
		return PushResult{}, err
	}
	p.Start("push", res.Bytes)
	var d v1.Hash
	if lay != nil {
		d, err = lay.push(art, o.jobs(), &sent, &opened, p)
	} else {
		d, err = art.write(r, o.remote(ctx))
	}
	p.Finish()
	if err != nil {
		return PushResult{}, fmt.Errorf("push %s: %w", target, err)
	}
	res.Digest = d.String()
	res.Uploaded, res.UploadedBytes = int(opened.Load()), sent.Load()
	return res, nil
}

// fileLayer is an object file or pack of a cache as a layer blob: its
// digest computed before the push, its bytes read from the file when the
// registry lacks them.
type fileLayer struct {
	key    shardcache.Key
	path   string
	size   int64
	digest v1.Hash
	sent   *atomic.Uint64 // bytes read for uploads, all layers
	opened *atomic.Int64  // uploads started, all layers
	p      Progress
}

func (l *fileLayer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *fileLayer) Size() (int64, error)                { return l.size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error) { return ObjectMediaType, nil }

// Compressed opens the file; the registry verifies its digest, so a file
// changed since it was hashed fails the push.
func (l *fileLayer) Compressed() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, err
	}
	l.opened.Add(1)
	return &countingFile{f: f, l: l}, nil
}

// countingFile counts what is read of a file (not embedding *os.File,
// whose WriteTo would let io.Copy read around Read).
type countingFile struct {
	f *os.File
	l *fileLayer
}

func (f *countingFile) Close() error { return f.f.Close() }

func (f *countingFile) Read(b []byte) (int, error) {
	n, err := f.f.Read(b)
	f.l.sent.Add(uint64(n))
	f.l.p.Add(uint64(n))
	return n, err
}

// hashFiles returns a layer for each file, its sha256 computed by jobs
// goroutines, each file's size checked against the index.
func hashFiles(ctx context.Context, c *shardcache.Cache, files []shardcache.Key, jobs int, sent *atomic.Uint64, opened *atomic.Int64, p Progress) ([]*fileLayer, error) {
	layers := make([]*fileLayer, len(files))
	errs := make([]error, len(files))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(jobs, len(files)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(files) || ctx.Err() != nil {
					return
				}
				layers[i], errs[i] = hashFile(c, files[i])
				if layers[i] != nil {
					layers[i].sent, layers[i].opened, layers[i].p = sent, opened, p
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return layers, nil
}

func hashFile(c *shardcache.Cache, key shardcache.Key) (*fileLayer, error) {
	path, err := c.FilePath(key)
	if err != nil {
		return nil, err
	}
	o, err := c.Lookup(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if uint64(n) != o.Size {
		return nil, fmt.Errorf("%s: %w: %d bytes, the index says %d", path, shardcache.ErrObjectCorrupt, n, o.Size)
	}
	return &fileLayer{key: key, path: path, size: n, digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}}, nil
}

// artifact is the image core a push writes: the manifest, the index as
// its config, the files as its layers.
type artifact struct {
	config   []byte
	manifest []byte
	layers   map[v1.Hash]*fileLayer
}

func newArtifact(config []byte, layers []*fileLayer) (*artifact, error) {
	sum := sha256.Sum256(config)
	m := manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  ArtifactType,
		Config: v1.Descriptor{MediaType: IndexMediaType, Size: int64(len(config)),
			Digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}},
		Layers: make([]v1.Descriptor, 0, len(layers)),
	}
	a := &artifact{config: config, layers: map[v1.Hash]*fileLayer{}}
	for _, l := range layers {
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: ObjectMediaType, Size: l.size, Digest: l.digest,
			Annotations: map[string]string{KeyAnnotation: string(l.key)}})
		a.layers[l.digest] = l // files of equal bytes are one blob
	}
	var err error
	a.manifest, err = json.Marshal(m)
	return a, err
}

// write pushes the artifact to a registry and returns its digest.
func (a *artifact) write(r name.Reference, opts []remote.Option) (v1.Hash, error) {
	img, err := partial.CompressedToImage(a)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := remote.Write(r, img, opts...); err != nil {
		return v1.Hash{}, err
	}
	return img.Digest()
}

func (a *artifact) RawConfigFile() ([]byte, error)      { return a.config, nil }
func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *artifact) RawManifest() ([]byte, error)        { return a.manifest, nil }

func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if l, ok := a.layers[h]; ok {
		return l, nil
	}
	return nil, fmt.Errorf("%w: no layer %s", ErrBlob, h)
}

// CheckPushable opens the cache in dir and refuses what Push would refuse
// of it before any request: an index read from its backup, or a cache
// that is not self-contained. A caller checks it first so that a cache
// push cannot take is not reported as the registry's failure while the
// registry is unreachable (trial 71).
func CheckPushable(ctx context.Context, dir string) error {
	c, err := shardcache.OpenContext(ctx, dir)
	if err != nil {
		return err
	}
	defer c.Close()
	return pushable(c, dir)
}

// pushable is CheckPushable's check of the open cache c in dir.
func pushable(c *shardcache.Cache, dir string) error {
	if err := c.Damaged(); err != nil {
		// Read from its backup: the file pushed would be the damaged one.
		return fmt.Errorf("%w (the cache was read from its backup, %s: run splitzip gc %s, which writes the index again from it, then push)", err, shardcache.BackupName, dir)
	}
	if err := c.CheckSelfContained(); err != nil {
		return fmt.Errorf("%s: %w (compress it with --self-contained to push it)", dir, err)
	}
	return nil
}
