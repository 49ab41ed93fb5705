package pipeline

import (
	"fmt"
	"io"
	"sync"

	"github.com/splitzip/splitzip/codec/payload"
	"github.com/splitzip/splitzip/shardcache"
)

// checkPiece is the bytes CheckStoredPayload reads at a time.
const checkPiece = 1 << 20

var checkBufs = sync.Pool{New: func() any { b := make([]byte, max(checkPiece, payload.HeadBytes)); return &b }}

// CheckStoredPayload is the shardcache.PayloadCheck of compress and gc:
// the payload object o, which r reads, parsed and checked as a load
// checks it (payload.CheckFrom: head, checksum, the checksum the index
// records, the size it decodes to), and of the codec its record names.
// Wrong bytes match shardcache.ErrObjectCorrupt; an error reading them is
// returned as it is. It reads a piece at a time, so a payload of any size
// costs one piece of memory.
func CheckStoredPayload(o *shardcache.Object, r io.ReaderAt) error {
	bp := checkBufs.Get().(*[]byte)
	defer checkBufs.Put(bp)
	rr := &readErrs{r: r}
	k, err := payload.CheckFrom(rr, o.Size, o.RawSize, o.Checksum, *bp)
	switch {
	case rr.err != nil:
		return rr.err
	case err != nil:
		return fmt.Errorf("%w: %w", shardcache.ErrObjectCorrupt, err)
	}
	want := payload.KindFixed
	if o.Kind == shardcache.KindEntropy {
		want = payload.KindEntropy
	}
	if k != want {
		return fmt.Errorf("%w: a %s payload, where the index records a %s object", shardcache.ErrObjectCorrupt, k, o.Kind)
	}
	return nil
}

// readErrs is a reader that remembers its first error other than the
// end of its bytes (which, read short, are a payload cut short).
type readErrs struct {
	r   io.ReaderAt
	err error
}

func (r *readErrs) ReadAt(p []byte, off int64) (int, error) {
	n, err := r.r.ReadAt(p, off)
	if err != nil && err != io.EOF && r.err == nil {
		r.err = err
	}
	return n, err
}
