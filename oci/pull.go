package oci

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"golang.org/x/sys/unix"

	"github.com/splitzip/splitzip/s3store"
	"github.com/splitzip/splitzip/shardcache"
)

// maxIndexBytes bounds the index blob a pull reads into memory, as Open
// bounds an index file.
const maxIndexBytes = 1 << 30

// commitEvery is how many bytes a pull fetches between commits of what
// it has: an interrupted pull resumes from the last one.
const commitEvery = 256 << 20

// PullResult says what a pull moved.
type PullResult struct {
	Ref    string `json:"ref"`
	Digest string `json:"digest"` // the manifest's
	Cache  string `json:"cache"`
	// Blobs and Bytes: the artifact's object files and packs.
	Blobs int    `json:"blobs"`
	Bytes uint64 `json:"bytes"`
	// Fetched and FetchedBytes: those the cache lacked, downloaded.
	Fetched      int      `json:"fetched_blobs"`
	FetchedBytes uint64   `json:"fetched_bytes"`
	Sources      []string `json:"sources"`
	// Replaced lists the sources the cache recorded, at the same paths,
	// as other checkpoints: the pulled ones replace them (a cache knows
	// one checkpoint a path), and gc frees what only they used.
	Replaced []string `json:"replaced,omitempty"`
	// Mended lists the files and pack members the cache held that were
	// cut short or damaged, fetched again and replaced.
	Mended []shardcache.Mend `json:"mended,omitempty"`
}

// Pull adds the cache artifact at ref to the cache in dir (made if dir is
// absent or empty): the files the cache lacks are downloaded, each
// checked against the manifest's size and digest as it streams, and the
// artifact's sources are recorded last, at their PulledRoot unless
// o.KeepRoots. An interrupted pull leaves a cache without them; pulling
// again fetches only what is still missing.
func Pull(ctx context.Context, ref, dir string, o Options) (PullResult, error) {
	src, err := o.source(ctx, ref, false)
	if err != nil {
		return PullResult{}, err
	}
	art, err := readArtifact(ctx, src, "pull")
	if err != nil {
		return PullResult{}, err
	}
	ix, files, members, layers := art.ix, art.files, art.members, art.layers
	abs, err := filepath.Abs(dir)
	if err != nil {
		return PullResult{}, err
	}
	// other is where the cache may record each checkpoint already, in the
	// other form (the pusher's root, or PulledRoot): that record goes.
	other := make([]string, len(ix.Sources))
	for i := range ix.Sources {
		s := &ix.Sources[i]
		pulled := shardcache.PulledRoot(abs, s.Root)
		if o.KeepRoots {
			other[i] = pulled
		} else {
			other[i], s.Root = s.Root, pulled
		}
	}
	res := PullResult{Ref: src.String(), Digest: art.digest.String(), Cache: dir, Blobs: len(files)}
	for _, k := range files {
		res.Bytes += ix.Objects[k].Size
	}
	for _, s := range ix.Sources {
		res.Sources = append(res.Sources, s.Path())
	}

	w, err := shardcache.Create(dir)
	if err != nil {
		if (errors.Is(err, syscall.EROFS) || errors.Is(err, fs.ErrPermission)) && pulledAlready(ctx, dir, ix, files, layers) {
			// Nothing to write: the artifact is here whole already.
			return res, nil
		}
		return PullResult{}, err
	}
	defer w.Close()
	w.SetPackMax(0) // files arrive whole, packs as packs
	w.SetNoSync(o.NoSync)
	w.SetPayloadCheck(o.Check)
	var todo []shardcache.Key
	have := w.Cache()
	if files, err = otherForms(have.Index(), ix, files); err != nil {
		return PullResult{}, fmt.Errorf("pull %s into %s: %w", src, dir, err)
	}
	damaged := map[shardcache.Key]error{}
	for _, k := range files {
		// A file in place whose bytes are the blob is kept, recorded in
		// the index or not (a pull killed before its first commit leaves
		// such files, which its pin kept from gc).
		same, bad := sameBlob(have, k, layers[k])
		if same {
			if err := w.Adopt(ix, k, members[k]); err != nil {
				return PullResult{}, err
			}
			continue
		}
		if held(w, k, members[k]) {
			// A pack whose members this cache holds already, in packs of
			// its own (gc rewrote the pack, which held a member that
			// another artifact brought too): nothing to fetch.
			continue
		}
		// Absent, or a copy here that is not the blob (damaged): fetched,
		// and the copy replaced.
		if bad != nil {
			damaged[k] = bad
		}
		todo = append(todo, k)
		res.Fetched++
		res.FetchedBytes += ix.Objects[k].Size
	}
	if err := roomFor(dir, res.FetchedBytes); err != nil {
		if o.Temporary {
			return PullResult{}, fmt.Errorf("pull %s into a temporary folder (%s): %w (--local-cache DIR on a disk with room keeps what a pull fetched)", src, filepath.Dir(dir), err)
		}
		return PullResult{}, fmt.Errorf("pull %s: %w", src, err)
	}
	// Until the sources are recorded, no checkpoint uses what arrives: a
	// pin keeps it from gc for a pull run again to resume from.
	pin := "pull-" + strings.ReplaceAll(art.digest.String(), ":", "-")
	if len(todo) > 0 {
		keys := append([]shardcache.Key(nil), files...)
		for _, k := range files {
			keys = append(keys, members[k]...)
		}
		if err := w.Pin(pin, fmt.Sprintf("an unfinished pull of %s (%s)", src, art.digest), keys); err != nil {
			return PullResult{}, err
		}
	}
	p := o.progress()
	p.Start("pull", res.FetchedBytes)
	err = fetchAll(ctx, src, w, ix, todo, members, layers, o.jobs(), p)
	p.Finish()
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EFBIG) {
		if o.Temporary {
			err = fmt.Errorf("pull %s into a temporary folder (%s): %w (the artifact holds %d bytes, %d of them to fetch; --local-cache DIR on a disk with room keeps what a pull fetched, and a run again fetches only the rest)", src, filepath.Dir(dir), err, res.Bytes, res.FetchedBytes)
		} else {
			err = fmt.Errorf("pull %s: %w (the artifact holds %d bytes, %d of them to fetch; what arrived whole is kept, so a pull run again with more room fetches only the rest, and `splitzip gc --unfinished %s` removes what this pull kept)", src, err, res.Bytes, res.FetchedBytes, dir)
		}
	} else if cut(err) && !o.Temporary {
		err = fmt.Errorf("%w (what arrived whole is kept: the pull run again fetches only the rest)", err)
	}
	if errors.Is(err, ErrBlob) {
		err = fmt.Errorf("pull %s: %w (where a pull again fails the same way, the store's copy is damaged, which a push does not mend: it does not read again the blobs a store has; %s)", src, err, src.mend())
	}
	if err != nil {
		// What arrived whole is kept for the next pull (recorded without
		// the artifact's sources).
		if cerr := w.Commit(); cerr != nil {
			return PullResult{}, errors.Join(err, cerr)
		}
		return PullResult{}, err
	}
	for i := range ix.Sources {
		if w.Replaces(&ix.Sources[i]) {
			res.Replaced = append(res.Replaced, ix.Sources[i].Path())
		}
		w.ForgetCopy(other[i], &ix.Sources[i])
	}
	w.AddSources(ix)
	if err := w.Commit(); err != nil {
		return PullResult{}, err
	}
	// A member Has found damaged inside a pack file found damaged is the
	// same damage: the pack is named, not each member again.
	inDamaged := map[shardcache.Key]bool{}
	for k := range damaged {
		for _, m := range members[k] {
			inDamaged[m] = true
		}
	}
	for k, err := range w.Mended() {
		if !inDamaged[k] {
			damaged[k] = err
		}
	}
	res.Mended = shardcache.Mends(damaged)
	// Its own pin, or an interrupted run's of the same artifact.
	if err := w.Unpin(pin); err != nil {
		return PullResult{}, err
	}
	return res, nil
}

// otherForms reconciles the artifact's index ix with the cache's index
// have where the cache holds the bytes of one of ix's objects in another
// form (another kind, or a payload of other bytes: a fixed payload here
// and an entropy one there, a raw copy and a payload of tensors of two
// dtypes). A key names one object in a cache, and the cache's stays: the
// artifact's tensors of those bytes take its form, and such a file of
// ix's own is not fetched (it would replace the cache's, whose records
// then name another form; the pull did that before). A shard header, gap
// or index file of those bytes must be raw: where the cache's object is a
// payload the pull is refused. It returns files less those not fetched.
func otherForms(have, ix *shardcache.Index, files []shardcache.Key) ([]shardcache.Key, error) {
	other := map[shardcache.Key]*shardcache.Object{}
	for k, o := range ix.Objects {
		if lo, ok := have.Objects[k]; ok && o.Kind != shardcache.KindPack && (lo.Kind != o.Kind || lo.Size != o.Size || lo.Checksum != o.Checksum) {
			other[k] = lo
		}
	}
	if len(other) == 0 {
		return files, nil
	}
	raw := func(k shardcache.Key, what string) error {
		if lo, ok := other[k]; ok && lo.Kind != shardcache.KindRaw {
			return fmt.Errorf("%w: the bytes of %s (%s) are %s here, where they must be raw, and a key names one object in a cache; use another cache", shardcache.ErrOtherForm, what, k, shardcache.KindWords(lo.Kind))
		}
		return nil
	}
	for i := range ix.Sources {
		s := &ix.Sources[i]
		if s.Index != nil {
			if err := raw(s.Index.Key, "the checkpoint's index file "+s.Index.Name); err != nil {
				return nil, err
			}
		}
		for j := range s.Shards {
			sh := &s.Shards[j]
			if err := raw(sh.Header.Key, "the header of "+sh.Name); err != nil {
				return nil, err
			}
			for _, g := range sh.Gaps {
				if err := raw(g.Key, "a gap of "+sh.Name); err != nil {
					return nil, err
				}
			}
			for t := range sh.Tensors {
				tn := &sh.Tensors[t]
				lo, ok := other[tn.Key]
				if !ok {
					continue
				}
				tn.Stored, tn.CopyStored = shardcache.StoredAs(lo.Kind), true
			}
		}
	}
	var keep []shardcache.Key
	for _, k := range files {
		if _, ok := other[k]; !ok {
			keep = append(keep, k)
		}
	}
	return keep, nil
}

// held reports whether w holds every one of members of the pack k (none:
// false) in another file than k, each checked as Writer.Has checks what
// an earlier run stored. It asks about every one, so that those found
// damaged are known to Adopt, which records the fetched pack's copies of
// them in their place. Members held in k itself are not held elsewhere:
// k, not the blob (sameBlob said so), is fetched again.
func held(w *shardcache.Writer, k shardcache.Key, members []shardcache.Key) bool {
	all := len(members) > 0
	for _, m := range members {
		if o, ok := w.Has(m); !ok || o.Pack == k {
			all = false
		}
	}
	return all
}

// sameBlob reports whether the cache's file of key k holds the bytes of
// the layer d (its sha256): a file kept from before is trusted only when
// it does, so a damaged copy is fetched again rather than kept. A file of
// another size is not read. bad says what is wrong with a file in place
// that is not the blob (ErrObjectCorrupt); an absent or unreadable file
// is fetched without one.
func sameBlob(c *shardcache.Cache, k shardcache.Key, d v1.Descriptor) (same bool, bad error) {
	path, err := c.FilePath(k)
	if err != nil {
		return false, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return false, nil
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false, nil
	}
	if st.Size() != d.Size {
		return false, fmt.Errorf("%s: %w: %d bytes, the artifact's blob %d", path, shardcache.ErrObjectCorrupt, st.Size(), d.Size)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return false, nil
	}
	if got := hex.EncodeToString(h.Sum(nil)); d.Digest.Algorithm != "sha256" || got != d.Digest.Hex {
		return false, fmt.Errorf("%s: %w: sha256:%s, the artifact's blob %s", path, shardcache.ErrObjectCorrupt, got, d.Digest)
	}
	return true, nil
}

// pulledAlready reports whether the cache at dir, which this process may
// not write, holds the artifact of ix whole: each of its files with the
// bytes of its blob, and each of its checkpoints recorded as ix records
// it (a pull done before, to be done again where nothing may be written).
func pulledAlready(ctx context.Context, dir string, ix *shardcache.Index, files []shardcache.Key, layers map[shardcache.Key]v1.Descriptor) bool {
	c, err := shardcache.OpenContext(ctx, dir)
	if err != nil {
		return false
	}
	defer c.Close()
	// Files the cache holds in another form are its own (Pull's
	// otherForms; review 70c: a read-only cache so pulled never counted).
	if files, err = otherForms(c.Index(), ix, files); err != nil {
		return false
	}
	for _, k := range files {
		if same, _ := sameBlob(c, k, layers[k]); !same {
			return false
		}
	}
	for i := range ix.Sources {
		if !c.Records(&ix.Sources[i]) {
			return false
		}
	}
	return true
}

// artifactOf is a cache artifact's manifest digest, index and layers,
// checked against one another.
type artifactOf struct {
	digest  v1.Hash
	ix      *shardcache.Index
	files   []shardcache.Key                    // the index's object files and packs
	members map[shardcache.Key][]shardcache.Key // a pack's members
	layers  map[shardcache.Key]v1.Descriptor    // the blob of each file
}

// readArtifact reads the manifest at src and the index it names, and
// checks that every file of the index is a layer of its size and every
// layer a file of the index; op ("pull") starts its errors.
func readArtifact(ctx context.Context, src source, op string) (*artifactOf, error) {
	raw, digest, err := src.manifest()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, src, err)
	}
	var m manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%s %s: %w: %v", op, src, ErrNotArtifact, err)
	}
	if m.Config.MediaType != IndexMediaType {
		what := fmt.Sprintf("config media type %q", m.Config.MediaType)
		if m.Config.MediaType == "" {
			// An image index or a manifest list: no config at all.
			what = fmt.Sprintf("a manifest of media type %q, without a config", m.MediaType)
		}
		return nil, fmt.Errorf("%s %s: %w: %s", op, src, ErrNotArtifact, what)
	}
	if m.Config.Size < 0 || m.Config.Size > maxIndexBytes {
		return nil, fmt.Errorf("%s %s: %w: an index of %d bytes", op, src, ErrBlob, m.Config.Size)
	}
	var buf bytes.Buffer
	if err := fetch(ctx, src, m.Config, &buf); err != nil {
		return nil, err
	}
	ix, err := shardcache.ParseIndex(buf.Bytes(), src.String()+" (index)")
	if err != nil {
		return nil, err
	}
	if err := ix.LoadStats(); err != nil {
		return nil, err
	}
	a := &artifactOf{digest: digest, ix: ix, layers: map[shardcache.Key]v1.Descriptor{}}
	a.files, a.members = ix.Files()
	for _, l := range m.Layers {
		k := shardcache.Key(l.Annotations[KeyAnnotation])
		o, ok := ix.Objects[k]
		switch {
		case l.MediaType != ObjectMediaType:
			return nil, fmt.Errorf("%s %s: %w: a layer of media type %q", op, src, ErrNotArtifact, l.MediaType)
		case !ok || o.Pack != "":
			return nil, fmt.Errorf("%s %s: %w: layer %s names object %q, not a file of the index", op, src, ErrBlob, l.Digest, k)
		case uint64(l.Size) != o.Size || l.Size < 0:
			return nil, fmt.Errorf("%s %s: %w: layer %s is %d bytes, the index says %d for %s", op, src, ErrBlob, l.Digest, l.Size, o.Size, k)
		}
		a.layers[k] = l
	}
	for _, k := range a.files {
		if _, ok := a.layers[k]; !ok {
			return nil, fmt.Errorf("%s %s: %w: no layer holds object %s", op, src, ErrBlob, k)
		}
	}
	return a, nil
}

// fetchAll downloads files into the cache, jobs at a time, committing
// what it has every commitEvery bytes.
func fetchAll(ctx context.Context, src source, w *shardcache.Writer, ix *shardcache.Index, todo []shardcache.Key, members map[shardcache.Key][]shardcache.Key,
	layers map[shardcache.Key]v1.Descriptor, jobs int, p Progress) error {
	var next atomic.Int64
	var mu sync.Mutex
	var first error
	var since uint64
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for range min(jobs, len(todo)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(todo) {
					return
				}
				if err := ctx.Err(); err != nil {
					fail(err)
					return
				}
				mu.Lock()
				stop := first != nil
				mu.Unlock()
				if stop {
					return
				}
				k := todo[i]
				if err := fetchFile(ctx, src, w, ix, k, members[k], layers[k], p); err != nil {
					fail(err)
					return
				}
				mu.Lock()
				since += ix.Objects[k].Size
				commit := since >= commitEvery
				if commit {
					since = 0
				}
				mu.Unlock()
				if commit {
					if err := w.Commit(); err != nil {
						fail(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	return first
}

// fetchFile downloads one file into the cache and records it.
func fetchFile(ctx context.Context, src source, w *shardcache.Writer, ix *shardcache.Index, k shardcache.Key, members []shardcache.Key, d v1.Descriptor, p Progress) error {
	of, err := w.NewObject()
	if err != nil {
		return err
	}
	if err := fetch(ctx, src, d, progressWriter{of, p}); err != nil {
		of.Abort()
		return fmt.Errorf("object %s: %w", k, err)
	}
	if err := of.Commit(k, ix.Objects[k]); err != nil {
		return err
	}
	return w.Adopt(ix, k, members)
}

type progressWriter struct {
	w io.Writer
	p Progress
}

func (pw progressWriter) Write(b []byte) (int, error) {
	n, err := pw.w.Write(b)
	pw.p.Add(uint64(n))
	if err != nil {
		err = writeError{err}
	}
	return n, err
}

// cut reports whether err is a transfer the network broke off or left
// waiting (not a refusal, a name that does not resolve or a certificate
// that does not verify), which a run again may get past.
func cut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// roomFor returns an error wrapping syscall.ENOSPC when the file system of
// dir reports less room free for its user than n bytes, before a pull
// fetches them (it would fail on the way; a file system that reports no
// room at all, as some network ones do, is given the benefit of the doubt).
func roomFor(dir string, n uint64) error {
	var st unix.Statfs_t
	if n == 0 || unix.Statfs(dir, &st) != nil {
		return nil
	}
	free := st.Bavail * uint64(st.Bsize)
	if free == 0 || free >= n {
		return nil
	}
	return fmt.Errorf("%s: %w: %d bytes to fetch, %d free (nothing was fetched)", dir, syscall.ENOSPC, n, free)
}

// writeError is an error writing a blob into the cache, which resuming
// the download does not mend.
type writeError struct{ error }

func (e writeError) Unwrap() error { return e.error }

// resumeTries is how many times in a row a pull asks again for the rest
// of a blob whose body broke off (a connection cut, a proxy that gave up)
// before it brought resumeProgress bytes, each time from the bytes that
// arrived; a body that brought as many starts the count again, so a link
// that drops every few megabytes still delivers a blob of gigabytes,
// and one that drops after a few bytes fails it after a few requests.
const (
	resumeTries    = 3
	resumeProgress = 64 << 10
)

// pause waits before the try after fails failed ones in a row: none
// after a try that brought bytes (0), else 0.25 s, doubling to 2 s (a
// server gone for a few seconds is waited for), or until ctx ends.
func pause(ctx context.Context, fails int) error {
	if fails == 0 {
		return ctx.Err()
	}
	return sleep(ctx, min(250*time.Millisecond<<(fails-1), 2*time.Second))
}

// sleep waits d, or until ctx ends (its error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// source is where a pull reads an artifact: a registry's repository or
// an OCI image layout in an S3 bucket.
type source interface {
	// manifest returns the artifact's manifest and its digest.
	manifest() ([]byte, v1.Hash, error)
	// open returns the rest of blob d from off on (a fetch's), which the
	// source may read ahead in parts.
	open(d v1.Descriptor, off int64) (io.ReadCloser, error)
	// get returns n bytes of blob d from off on by one request, made
	// under ctx: a remote cache's read, which sizes and counts its own
	// requests and stops the parts of a read when one fails.
	get(ctx context.Context, d v1.Descriptor, off, n int64) (io.ReadCloser, error)
	// String names the reference in errors and results.
	String() string
	// mend says how to replace a blob of the store that does not match
	// its digest (a push skips blobs the store has, unread).
	mend() string
}

// source returns the source ref names: an s3:// layout or a registry,
// whose requests, forPush, ask for the push scope (Options.pushScope: the
// look a writer takes before it pushes).
func (o Options) source(ctx context.Context, ref string, forPush bool) (source, error) {
	if s3store.IsURL(ref) {
		return o.layout(ctx, ref)
	}
	r, err := o.parse(ref)
	if err != nil {
		return nil, err
	}
	opts := o.remote(ctx)
	if forPush {
		rt, err := o.pushScope(ctx, r.Context())
		if err != nil {
			return nil, err
		}
		opts = append(opts, remote.WithTransport(rt))
	}
	// One puller for every request: it keeps the registry's transport
	// and token, where a call of remote.Layer a blob would set them up
	// again.
	pl, err := remote.NewPuller(opts...)
	if err != nil {
		return nil, err
	}
	return &repository{ctx: ctx, pl: pl, r: r, o: o}, nil
}

// copyBuffers hold fetch's copy buffers: 1 MiB, so that a blob is written
// into the cache in few system calls (io.Copy's 32 KiB made writes a
// quarter of a pull's CPU time).
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// fetch streams blob d into dst, checking its size and sha256 digest as
// it goes. A body that breaks off is resumed from where it stopped
// (resumeTries).
func fetch(ctx context.Context, src source, d v1.Descriptor, dst io.Writer) error {
	if d.Digest.Algorithm != "sha256" {
		return fmt.Errorf("%w: blob %s: digest algorithm %q", ErrBlob, d.Digest, d.Digest.Algorithm)
	}
	body, err := src.open(d, 0)
	if err != nil {
		return fmt.Errorf("blob %s: %w", d.Digest, err)
	}
	h := sha256.New()
	buf := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(buf)
	var n int64
	for fails := 0; ; {
		m, err := io.CopyBuffer(io.MultiWriter(dst, h), io.LimitReader(body, d.Size+1-n), *buf)
		body.Close()
		n += m
		if err == nil {
			break
		}
		if fails++; m >= resumeProgress {
			fails = 0
		}
		var we writeError
		if errors.As(err, &we) || ctx.Err() != nil || fails > resumeTries || n >= d.Size {
			return fmt.Errorf("blob %s: %w", d.Digest, err)
		}
		// The rest, after a pause; a request that fails (a server gone
		// for a moment) is a try too.
		for body = nil; body == nil; {
			if err := pause(ctx, fails); err != nil {
				return fmt.Errorf("blob %s: resuming at byte %d: %w", d.Digest, n, err)
			}
			if body, err = src.open(d, n); err != nil {
				if fails++; fails > resumeTries {
					return fmt.Errorf("blob %s: resuming at byte %d: %w", d.Digest, n, err)
				}
			}
		}
	}
	switch {
	case n != d.Size:
		return fmt.Errorf("%w: blob %s: %d bytes, the manifest says %d", ErrBlob, d.Digest, n, d.Size)
	case hex.EncodeToString(h.Sum(nil)) != d.Digest.Hex:
		return fmt.Errorf("%w: blob %s: its bytes hash to sha256:%x", ErrBlob, d.Digest, h.Sum(nil))
	}
	return nil
}

// repository reads one pull's repository: its manifest through the
// registry client's puller, and blobs by GETs of their own (with a Range
// for the rest of a body that broke off) through a transport
// authenticated for the repository, made on first use, that retries as
// the client does.
type repository struct {
	ctx  context.Context
	pl   *remote.Puller
	r    name.Reference
	o    Options
	once sync.Once
	rt   http.RoundTripper
	err  error
}

func (b *repository) String() string { return b.r.String() }

func (b *repository) mend() string {
	return "delete that blob from the registry (DELETE /v2/" + b.r.Context().RepositoryStr() + "/blobs/DIGEST where deletes are enabled, or from its storage, then its garbage collection) and push again"
}

func (b *repository) manifest() ([]byte, v1.Hash, error) {
	desc, err := b.pl.Get(b.ctx, b.r)
	if err != nil {
		return nil, v1.Hash{}, err
	}
	return desc.Manifest, desc.Digest, nil
}

// open returns the rest of blob d from off on, by a GET of its own rather
// than the client's layer reader, which would hash every byte a second
// time (fetch hashes them, over resumed bodies too).
func (b *repository) open(d v1.Descriptor, off int64) (io.ReadCloser, error) {
	return b.get(b.ctx, d, off, d.Size-off)
}

// get is open's GET, made under ctx: a registry's blob GET is one
// request either way.
func (b *repository) get(ctx context.Context, d v1.Descriptor, off, n int64) (io.ReadCloser, error) {
	repo := b.r.Context()
	b.once.Do(func() {
		auth, err := authn.Resolve(b.ctx, b.o.keychain(), repo)
		if err != nil {
			b.err = err
			return
		}
		base := b.o.transport()
		// Retried as the client's own requests are (remote.WithRetryStatusCodes).
		base = transport.NewRetry(base, transport.WithRetryStatusCodes(retryStatusCodes...))
		b.rt, b.err = transport.NewWithContext(b.ctx, repo.Registry, auth, base, []string{repo.Scope(transport.PullScope)})
	})
	if b.err != nil {
		return nil, b.err
	}
	u := url.URL{Scheme: repo.Scheme(), Host: repo.RegistryStr(), Path: "/v2/" + repo.RepositoryStr() + "/blobs/" + d.Digest.String()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if off > 0 || n < d.Size {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+n-1)) // closed: some registries take no open range
	}
	resp, err := (&http.Client{Transport: b.rt}).Do(req)
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusPartialContent:
		return resp.Body, nil
	case http.StatusOK: // the registry ignored the range: skip what arrived
		if _, err := io.CopyN(io.Discard, resp.Body, off); err != nil {
			resp.Body.Close()
			return nil, err
		}
		return struct {
			io.Reader
			io.Closer
		}{io.LimitReader(resp.Body, n), resp.Body}, nil
	}
	defer resp.Body.Close()
	// The registry's error (its status, code and message), as the
	// client's own requests report it.
	if err := transport.CheckError(resp, http.StatusOK, http.StatusPartialContent); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("GET %s: %s", u.Redacted(), resp.Status)
}
