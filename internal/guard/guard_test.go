package guard

import "testing"

func TestRun(t *testing.T) {
	if _, over := Run(8, func(d []byte) { copy(d, "12345678") }); over {
		t.Error("a write inside the destination reported as an overrun")
	}
	if _, over := Run(8, func(d []byte) { d[:9][8] = 0 }); !over {
		t.Error("a write past the destination not reported")
	}
}
