package shardcache

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"time"
)

// Rehash reads the shard file at path, a copy of sh's file (its size and
// names matching, its modification time perhaps not), and checks that
// every region of it (header, tensors, gaps) hashes to the key sh records:
// a copy that lost its modification time on the way (scp, rsync without
// -t, a download) is proved to hold the same bytes, so that its new time
// may be recorded (Writer.Restamp). A region that differs is
// ErrSourceChanged, naming it; so is a file changed or replaced while it
// was read. Regions that do not tile the file are ErrIndexCorrupt. It
// returns the file's modification time.
func Rehash(ctx context.Context, sh *Shard, path string) (time.Time, error) {
	regions, err := tiling(sh)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", path, err)
	}
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}, err
	}
	defer f.Close()
	before, err := f.Stat()
	if err != nil {
		return time.Time{}, err
	}
	if uint64(before.Size()) != sh.Size {
		return time.Time{}, fmt.Errorf("%s: %w (size %d; compressed from size %d)", path, ErrSourceChanged, before.Size(), sh.Size)
	}
	h := NewHasher()
	buf := make([]byte, 1<<20)
	for _, r := range regions {
		if err := ctx.Err(); err != nil {
			return time.Time{}, err
		}
		h.Reset()
		if _, err := io.CopyBuffer(h, io.NewSectionReader(f, int64(r.Offset), int64(r.Size)), buf); err != nil {
			return time.Time{}, fmt.Errorf("%s: %w", path, err)
		}
		if KeyFromSum([32]byte(h.Sum(nil))) != r.Key {
			if r.tensor != "" {
				// A tensor's: the error carries its name as a field too
				// (relocate --json's tensor).
				return time.Time{}, &TensorError{Tensor: r.tensor, File: path, Named: true,
					Err: fmt.Errorf("%s: %w: bytes %d to %d differ from what was compressed", path, ErrSourceChanged, r.Offset, r.Offset+r.Size)}
			}
			return time.Time{}, fmt.Errorf("%s: %w: %s (bytes %d to %d) differs from what was compressed", path, ErrSourceChanged, r.what, r.Offset, r.Offset+r.Size)
		}
	}
	// The bytes hashed are the file's at path only if it was neither
	// written nor replaced meanwhile.
	after, err := f.Stat()
	if err != nil {
		return time.Time{}, err
	}
	now, err := os.Stat(path)
	if err != nil {
		return time.Time{}, err
	}
	if !os.SameFile(before, now) || after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime()) {
		return time.Time{}, fmt.Errorf("%s: %w while it was re-hashed", path, ErrSourceChanged)
	}
	return before.ModTime(), nil
}

// region is a byte range of a shard with its content key, named.
type region struct {
	Region
	what   string
	tensor string // the tensor's name, for a tensor's region
}

// tiling returns sh's regions (header, tensors, gaps) in file order,
// checked to cover its size exactly, each byte once.
func tiling(sh *Shard) ([]region, error) {
	rs := []region{{Region: sh.Header, what: "the header"}}
	for _, t := range sh.Tensors {
		rs = append(rs, region{Region{Offset: t.Offset, Size: t.Size, Key: t.Key}, fmt.Sprintf("tensor %q", t.Name), t.Name})
	}
	for _, g := range sh.Gaps {
		rs = append(rs, region{Region: g, what: "a gap between tensors"})
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].Offset < rs[j].Offset })
	var at uint64
	for _, r := range rs {
		if r.Offset != at {
			return nil, fmt.Errorf("%w: shard %s: its regions leave bytes %d to %d unaccounted for (or overlap there)", ErrIndexCorrupt, sh.Name, min(at, r.Offset), max(at, r.Offset))
		}
		at += r.Size
	}
	if at != sh.Size {
		return nil, fmt.Errorf("%w: shard %s: its regions end at %d, the file at %d", ErrIndexCorrupt, sh.Name, at, sh.Size)
	}
	return rs, nil
}

// Stamp is a shard's new modification time (Writer.Restamp), with the
// fingerprint of the record Rehash checked it against.
type Stamp struct {
	Fingerprint string
	ModTime     time.Time
}

// Restamp records new modification times for shards of the checkpoint
// that path names (Index.SourceFor), by shard name: copies Rehash proved
// to hold the bytes the index records. A shard whose record no longer has
// the fingerprint it was checked against (the index changed meanwhile) is
// ErrSourceChanged, and nothing is stamped. It takes effect with Commit.
func (w *Writer) Restamp(path string, stamps map[string]Stamp) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, err := w.ix.SourceFor(path)
	if err != nil {
		return fmt.Errorf("%s: %w", w.dir, err)
	}
	src := &w.ix.Sources[at]
	for _, sh := range src.Shards {
		if s, ok := stamps[sh.Name]; ok && s.Fingerprint != sh.Fingerprint {
			return fmt.Errorf("%s: shard %s: %w: its record changed while it was re-hashed; run relocate again", w.dir, sh.Name, ErrSourceChanged)
		}
	}
	for i := range src.Shards {
		if s, ok := stamps[src.Shards[i].Name]; ok {
			src.Shards[i].ModTime = s.ModTime
		}
	}
	return nil
}
