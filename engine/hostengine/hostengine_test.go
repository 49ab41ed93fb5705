package hostengine

import (
	"testing"

	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/internal/enginetest"
)

func TestConformance(t *testing.T) {
	t.Run("InStream", func(t *testing.T) { conformance(t) })
	t.Run("DecodeStreams", func(t *testing.T) { conformance(t, WithDecodeStreams()) })
}

func conformance(t *testing.T, opts ...Option) {
	enginetest.Run(t, func(t *testing.T) engine.Engine {
		e := New(2, opts...)
		t.Cleanup(func() {
			if n := e.PinnedBytes(); n != 0 {
				t.Errorf("%d pinned bytes not freed", n)
			}
			if n := e.ReservedRanges(); n != 0 {
				t.Errorf("%d ranges not released", n)
			}
		})
		return e
	})
}
