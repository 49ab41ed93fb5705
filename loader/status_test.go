package loader

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/gpu"
	"github.com/splitzip/splitzip/gpu/cuda"
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
