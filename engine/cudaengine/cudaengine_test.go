package cudaengine

import (
	"errors"
	"testing"

	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/engine/enginetest"
	"github.com/splitzip/splitzip/gpu/cuda"
)

// TestConformance runs the engine conformance suite on GPU 0, or skips
// with the reason where there is no driver.
func TestConformance(t *testing.T) {
	if _, err := cuda.Open(); errors.Is(err, cuda.ErrNoDriver) {
		t.Skipf("no GPU: %v", err)
	}
	enginetest.Run(t, func(t *testing.T) engine.Engine {
		e, err := New(0, 2)
		if err != nil {
			t.Fatal(err)
		}
		return e
	})
}
