package pipeline

import (
	"fmt"
	"io"
	"sort"
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
// It reads a piece at a time, so a payload of any size costs one piece of
// memory.
func CheckStoredPayload(_ shardcache.Key, o *shardcache.Object, r io.ReaderAt) error {
	bp := checkBufs.Get().(*[]byte)
	defer checkBufs.Put(bp)
	k, err := payload.CheckFrom(r, o.Size, o.RawSize, o.Checksum, *bp)
	if err != nil {
		return err
	}
	want := map[string]payload.Kind{shardcache.KindFixed: payload.KindFixed, shardcache.KindEntropy: payload.KindEntropy}[o.Kind]
	if k != want {
		return fmt.Errorf("a %s payload, where the index records a %s object", k, o.Kind)
	}
	return nil
}

// Mended is an object an earlier run stored that compress found missing,
// cut short or damaged, and stored again.
type Mended struct {
	Key   shardcache.Key `json:"key"`
	Error string         `json:"error"` // what was wrong with it
}

// mended lists w's mended objects by key.
func mended(w *shardcache.Writer) []Mended {
	var ms []Mended
	for k, err := range w.Mended() {
		ms = append(ms, Mended{Key: k, Error: err.Error()})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Key < ms[j].Key })
	return ms
}
