package shardcache

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"
)

// Rehash reads the shard file at path, a copy of sh's file (its size and
// names matching, its modification time perhaps not), and checks that
// every region of it (header, tensors, gaps) hashes to the key sh records:
// a copy that lost its modification time on the way (scp, rsync without
// -t, a download) is proved to hold the same bytes, so that its new time
// may be recorded (Writer.Restamp). A region that differs is
// ErrSourceChanged, naming it. It returns the file's modification time.
func Rehash(ctx context.Context, sh *Shard, path string) (time.Time, error) {
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return time.Time{}, err
	}
	if uint64(st.Size()) != sh.Size {
		return time.Time{}, fmt.Errorf("%s: %w (size %d; compressed from size %d)", path, ErrSourceChanged, st.Size(), sh.Size)
	}
	h := NewHasher()
	buf := make([]byte, 1<<20)
	check := func(what string, r Region) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		h.Reset()
		if _, err := io.CopyBuffer(h, io.NewSectionReader(f, int64(r.Offset), int64(r.Size)), buf); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if KeyFromSum([32]byte(h.Sum(nil))) != r.Key {
			return fmt.Errorf("%s: %w: %s (bytes %d to %d) differs from what was compressed", path, ErrSourceChanged, what, r.Offset, r.Offset+r.Size)
		}
		return nil
	}
	if err := check("the header", sh.Header); err != nil {
		return time.Time{}, err
	}
	for _, t := range sh.Tensors {
		if err := check(fmt.Sprintf("tensor %q", t.Name), Region{Offset: t.Offset, Size: t.Size, Key: t.Key}); err != nil {
			return time.Time{}, err
		}
	}
	for _, g := range sh.Gaps {
		if err := check("a gap between tensors", g); err != nil {
			return time.Time{}, err
		}
	}
	return st.ModTime(), nil
}

// Restamp records new modification times for shards of the checkpoint
// that path names (Index.SourceFor), by shard name: copies Rehash proved
// to hold the bytes the index records. It takes effect with Commit.
func (w *Writer) Restamp(path string, times map[string]time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, err := w.ix.SourceFor(path)
	if err != nil {
		return fmt.Errorf("%s: %w", w.dir, err)
	}
	src := &w.ix.Sources[at]
	for i := range src.Shards {
		if t, ok := times[src.Shards[i].Name]; ok {
			src.Shards[i].ModTime = t
		}
	}
	return nil
}
