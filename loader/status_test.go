package loader

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/gpu"
	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/internal/cachetest"
	"github.com/splitzip/splitzip/internal/fixture"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/transport"
)

// TestStatusOf: the C ABI's statuses agree with the error model's kinds:
// corrupt entropy payloads are corrupt (as fixed payloads always were),
// a truncated source is a changed source, a bad option is invalid, and
// the statuses of old stay.
func TestStatusOf(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("tensor %q: %w", "w", err) }
	for _, c := range []struct {
		name string
		err  error
		want Status
	}{
		{"nil", nil, StatusOK},
		{"invalid", wrap(ErrInvalid), StatusInvalid},
		{"not found", wrap(ErrNotFound), StatusNotFound},
		{"too small", wrap(ErrTooSmall), StatusTooSmall},
		{"source changed", wrap(shardcache.ErrSourceChanged), StatusSourceChanged},
		{"source truncated", wrap(&transport.Error{Tensor: "w", Err: transport.ErrShortRead}), StatusSourceChanged},
		{"checksum", wrap(codec.ErrChecksum), StatusCorrupt},
		{"entropy payload", wrap(entropy.ErrPayload), StatusCorrupt},
		{"entropy stream", wrap(entropy.ErrStream), StatusCorrupt},
		{"object corrupt", wrap(shardcache.ErrObjectCorrupt), StatusCorrupt},
		{"gpu kernel", wrap(gpu.ErrKernel), StatusCorrupt},
		{"not a cache", wrap(shardcache.ErrNotCache), StatusCorrupt},
		{"index version", wrap(shardcache.ErrVersion), StatusCorrupt},
		{"bad transport option", wrap(transport.ErrOption), StatusInvalid},
		{"no driver", wrap(cuda.ErrNoDriver), StatusNoGPU},
		{"cuda call", wrap(&cuda.Error{Call: "cuMemAlloc", Code: 2}), StatusCUDA},
		{"missing file", &fs.PathError{Op: "open", Path: "/x", Err: syscall.ENOENT}, StatusIO},
		{"disk full", wrap(syscall.ENOSPC), StatusIO},
		{"unknown", errors.New("x"), StatusIO},
	} {
		if got := StatusOf(c.err); got != c.want {
			t.Errorf("%s: StatusOf(%v) = %d, want %d", c.name, c.err, got, c.want)
		}
	}
}

// TestFileOf: the file an error of the loader is about, as
// sz_last_error_file reports it: a damaged payload's object file (its
// pack's, without the member's range) whether it was decoded or read
// stored, an object file gone, a source shard gone; none for an error
// about no file.
func TestFileOf(t *testing.T) {
	// A folder with a space: the file is the error's field, not read out
	// of its text.
	c, _ := fixture.Compressed(t, synth.Config{Bytes: 2 << 20, Shards: 2, Seed: 9}, pipeline.CompressOptions{Output: filepath.Join(t.TempDir(), "My Models", "cache")})
	l, err := Open(c.Dir(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var fixed, raw *Tensor
	for i := range l.Tensors() {
		tn := &l.Tensors()[i]
		switch {
		case tn.rec.Stored == shardcache.StoredFixed && fixed == nil:
			fixed = tn
		case tn.rec.Stored == shardcache.StoredRaw && raw == nil && tn.Size > 0:
			raw = tn
		}
	}
	if fixed == nil || raw == nil {
		t.Fatal("the fixture has no fixed payload or no raw tensor")
	}
	loc, _, err := c.Locate(fixed.Key)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(loc.Path, filepath.Join(c.Dir(), "objects")+string(filepath.Separator)) {
		t.Fatalf("object %s lies outside %s/objects", loc.Path, c.Dir())
	}
	buf := make([]byte, fixed.Size)
	restore := cachetest.Flip(t, c, fixed.Key, int64(fixed.Stored)/2, 0x40)
	errHost := l.ReadHost(fixed.Index, buf)
	_, errStored := l.ReadStored(fixed.Index, buf)
	restore()
	for what, err := range map[string]error{"ReadHost": errHost, "ReadStored": errStored} {
		if StatusOf(err) != StatusCorrupt || FileOf(err) != loc.Path {
			t.Errorf("%s of a damaged payload: %v (status %d), file %q; want corrupt in %s", what, err, StatusOf(err), FileOf(err), loc.Path)
		}
	}
	if err := l.ReadHost(fixed.Index, buf[:1]); StatusOf(err) != StatusTooSmall || FileOf(err) != "" {
		t.Errorf("a buffer too small: %v, file %q; want no file", err, FileOf(err))
	}
	if _, err := l.FindName("no.such.tensor"); FileOf(err) != "" {
		t.Errorf("a missing tensor: %v, file %q; want no file", err, FileOf(err))
	}

	if err := os.Rename(raw.Shard, raw.Shard+".moved"); err != nil {
		t.Fatal(err)
	}
	err = l.ReadHost(raw.Index, make([]byte, raw.Size))
	os.Rename(raw.Shard+".moved", raw.Shard)
	if StatusOf(err) != StatusSourceChanged || FileOf(err) != raw.Shard {
		t.Errorf("a raw tensor of a missing shard: %v (status %d), file %q; want source changed in %s", err, StatusOf(err), FileOf(err), raw.Shard)
	}
	// The whole source folder gone: the shard's path names no folder.
	root := filepath.Dir(raw.Shard)
	if err := os.Rename(root, root+".moved"); err != nil {
		t.Fatal(err)
	}
	err = l.ReadHost(raw.Index, make([]byte, raw.Size))
	os.Rename(root+".moved", root)
	if StatusOf(err) != StatusSourceChanged || FileOf(err) != raw.Shard || strings.Count(err.Error(), raw.Name) != 1 {
		t.Errorf("a raw tensor of a source folder gone: %v (status %d), file %q; want source changed in %s, the tensor named once", err, StatusOf(err), FileOf(err), raw.Shard)
	}

	cachetest.Remove(t, c, fixed.Key)
	if err := l.ReadHost(fixed.Index, buf); StatusOf(err) != StatusCorrupt || FileOf(err) != loc.Path {
		t.Errorf("a payload whose file is gone: %v (status %d), file %q; want corrupt in %s", err, StatusOf(err), FileOf(err), loc.Path)
	}
}

// TestRawCopyChecked: a tensor read from its raw copy in the cache (a
// self-contained cache whose source is gone) is checked against the
// copy's CRC-32C, which compress records: a damaged copy is corrupt,
// naming its file, never returned; an intact one reads back.
func TestRawCopyChecked(t *testing.T) {
	c, src := fixture.Compressed(t, synth.Config{Bytes: 1 << 20, Shards: 1, Seed: 13}, pipeline.CompressOptions{SelfContained: true})
	raw := fixture.RawCopy(t, src)
	if o, err := c.Lookup(raw.Key); err != nil || o.Checksum == 0 {
		t.Fatalf("the raw copy's record has no checksum: %+v, %v", o, err)
	}
	shard := filepath.Join(src.Root, src.Shards[0].Name)
	if err := os.Rename(shard, shard+".away"); err != nil {
		t.Fatal(err)
	}
	defer os.Rename(shard+".away", shard)
	l, err := Open(c.Dir(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	i, err := l.FindName(raw.Name)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, raw.Size)
	if err := l.ReadHost(i, want); err != nil {
		t.Fatalf("an intact raw copy: %v", err)
	}
	loc, _, _ := c.Locate(raw.Key)
	restore := cachetest.Flip(t, c, raw.Key, int64(raw.Size)/2, 0x08)
	defer restore()
	got := make([]byte, raw.Size)
	err = l.ReadHost(i, got)
	if StatusOf(err) != StatusCorrupt || FileOf(err) != loc.Path {
		t.Fatalf("a damaged raw copy: %v (status %d), file %q; want corrupt in %s", err, StatusOf(err), FileOf(err), loc.Path)
	}
	if _, err := l.ReadStored(i, got); StatusOf(err) != StatusCorrupt {
		t.Fatalf("a damaged raw copy read stored: %v", err)
	}
	// A copy that is gone: damaged too, not a missing input file.
	restore()
	if err := os.Rename(loc.Path, loc.Path+".away"); err != nil {
		t.Fatal(err)
	}
	defer os.Rename(loc.Path+".away", loc.Path)
	l2, err := Open(c.Dir(), "") // l keeps the file it read open
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if err := l2.ReadHost(i, got); StatusOf(err) != StatusCorrupt || FileOf(err) != loc.Path {
		t.Fatalf("a raw copy that is gone: %v (status %d), file %q; want corrupt in %s", err, StatusOf(err), FileOf(err), loc.Path)
	}
}
