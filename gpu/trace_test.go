package gpu

import (
	"strings"
	"testing"
)

func TestDecodeTraceString(t *testing.T) {
	if got := (*DecodeTrace)(nil).String(); got != "no trace" {
		t.Errorf("nil trace: %q", got)
	}
	tr := &DecodeTrace{}
	for i := range uint64(11) {
		base := uint64(1_000_000) + 10*i // entries 10 ns apart
		tr.Blocks = append(tr.Blocks, [traceWords]uint64{base, base + 800, base + 2000, base + 200_000, base + 230_000 + 1000*i, base + 230_000 + 1000*i, 50 + i})
	}
	got := tr.String()
	for _, want := range []string{"11 blocks", "entry 0.00/0.01/0.05/0.09/0.10", "consumers done 230.00/231.01/235.05/239.09/240.10", "chunks 50/51/55/59/60"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
}
