package load

import (
	"context"
	"os"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/splitzip/splitzip/engine/hostengine"
	"github.com/splitzip/splitzip/internal/fixture"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/pipeline"
)

// TestPiecesAndSlotsNoDeadlock: payloads of several staging pieces
// (read a piece a goroutine) beside payloads of one, two readers, loaded
// over and over. A reader that held a staging piece while it waited for
// a read token, beside readers that held tokens while they waited for
// pieces, hung such loads (this 256 MiB checkpoint on a 2-core host,
// about one load in two: ten runs catch it all but once in a thousand).
// A hung run fails the test with every goroutine's stack.
func TestPiecesAndSlotsNoDeadlock(t *testing.T) {
	c, src := fixture.Compressed(t, synth.Config{Bytes: 256 << 20, Shards: 1, Seed: 3}, pipeline.CompressOptions{})
	eng := hostengine.New(2)
	l, err := Open(eng, c, src, Options{Readers: 2})
	if err != nil {
		t.Fatal(err)
	}
	// Closed only when no run hangs: freeing the staging under a hung
	// one would crash it.
	for i := range 10 {
		done := make(chan error, 1)
		go func() {
			_, err := l.Run(context.Background())
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("run %d: %v", i, err)
			}
		case <-time.After(60 * time.Second):
			pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
			t.Fatalf("run %d of the load hung (every goroutine's stack above)", i)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	eng.Close()
}
