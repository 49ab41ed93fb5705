package cudaengine

import (
	"errors"
	"testing"

	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/internal/enginetest"
)

// TestConformance runs the engine conformance suite on GPU 0, with
// decodes in their upload stream and on decode streams beside them, or
// skips with the reason where there is no driver.
func TestConformance(t *testing.T) {
	requireDriver(t)
	for _, ds := range []bool{false, true} {
		t.Run(map[bool]string{false: "InStream", true: "DecodeStreams"}[ds], func(t *testing.T) {
			enginetest.Run(t, func(t *testing.T) engine.Engine {
				e, err := newEngine(0, 2, ds)
				if err != nil {
					t.Fatal(err)
				}
				return e
			})
		})
	}
}

// requireDriver skips t, with the reason, where there is no driver.
func requireDriver(t *testing.T) {
	t.Helper()
	if _, err := cuda.Open(); errors.Is(err, cuda.ErrNoDriver) {
		t.Skipf("no GPU: %v", err)
	}
}
