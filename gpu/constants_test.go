package gpu

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"unsafe"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/scatter"
)

// TestKernelConstants: the constants the launchers mirror have the values
// the kernel sources define, so a change on one side that the other
// misses fails here, without a GPU, rather than as wrong buffers on one.
func TestKernelConstants(t *testing.T) {
	defs := func(file string) map[string]string {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, d := range regexp.MustCompile(`(?m)^#define (\w+) ([^/\n]*?)\s*(?://.*)?$`).FindAllStringSubmatch(string(src), -1) {
			m[d[1]] = d[2]
		}
		return m
	}
	num := func(m map[string]string, name string) int {
		t.Helper()
		v, err := strconv.ParseUint(regexp.MustCompile(`u$`).ReplaceAllString(m[name], ""), 0, 32)
		if err != nil {
			t.Fatalf("#define %s %q: %v", name, m[name], err)
		}
		return int(v)
	}
	ez := defs("entropy.cu")
	for _, c := range []struct {
		name string
		want int
	}{
		{"EZ_CHUNK", codec.ChunkValues}, {"EZ_MAXLEN", entropy.MaxLen}, {"EZ_OVERHEAD", entropyOverhead},
		{"EZ_RING", entropyRing}, {"EZ_ERR_INDEX", errEntropyIndex}, {"EZ_ERR_STREAM", errEntropyStream},
	} {
		if got := num(ez, c.name); got != c.want {
			t.Errorf("entropy.cu: %s is %d, the launcher's %d", c.name, got, c.want)
		}
	}
	// EBParams: three u64, three u32, padded to 8 bytes.
	if n := unsafe.Sizeof(entropyBatchParams{}); n != 40 {
		t.Errorf("entropyBatchParams is %d bytes, struct EBParams 40", n)
	}
	if got := num(ez, "EZB_ENTRY"); got != scatter.EntropyEntryBytes {
		t.Errorf("entropy.cu: EZB_ENTRY is %d, scatter's descriptors %d bytes", got, scatter.EntropyEntryBytes)
	}
	if got := num(ez, "EZB_UNIT"); got != scatter.EntropyUnitChunks {
		t.Errorf("entropy.cu: EZB_UNIT is %d, scatter's units %d chunks", got, scatter.EntropyUnitChunks)
	}
	if ez["EZ_BATCH_ROWS"] != "(2 * EZ_STEPS + 2)" || 2*num(ez, "EZ_STEPS")+2 != entropyBatchRows {
		t.Errorf("entropy.cu: EZ_BATCH_ROWS %q with EZ_STEPS %s, the launcher's %d", ez["EZ_BATCH_ROWS"], ez["EZ_STEPS"], entropyBatchRows)
	}
	if ez["EZ_PAIR_BATCH_ROWS"] != "(4 * EZ_PAIR_STEPS + 4)" || 4*num(ez, "EZ_PAIR_STEPS")+4 != entropyPairBatchRows {
		t.Errorf("entropy.cu: EZ_PAIR_BATCH_ROWS %q with EZ_PAIR_STEPS %s, the launcher's %d", ez["EZ_PAIR_BATCH_ROWS"], ez["EZ_PAIR_STEPS"], entropyPairBatchRows)
	}
	// ez_oring, as entropy.cu computes it.
	for fi, f := range entropy.Fields {
		ob := f.Other()
		for _, pairs := range []bool{false, true} {
			rows := entropyBatchRows
			if pairs {
				rows = entropyPairBatchRows
			}
			need, r := num(ez, "EZ_LANES")*rows*ob/8+32, 16
			for r < need {
				r <<= 1
			}
			if ob == 0 {
				r = 0
			}
			if got := entropyORing(fi, pairs); got != r || r&(r-1) != 0 {
				t.Errorf("%s, pairs %v: other-bits ring %d, the kernel's %d", f.Name(), pairs, got, r)
			}
		}
		if s := entropySlot(fi); ob > 0 && (s%16 != 0 || s < uint64(codec.ChunkValues*ob/8)+32) {
			t.Errorf("%s: a slot of %d bytes", f.Name(), s)
		}
	}
	sz := defs("decode.cu")
	for _, c := range []struct {
		name string
		want int
	}{
		{"SZ_CHUNK", codec.ChunkValues}, {"SZ_THREADS", threads}, {"SZ_ERR_TABLE", errTable}, {"SZ_ERR_ESCAPE", errEscape},
		{"SZ_ERR_READERS", errReaders}, {"SZ_ERR_ORDER", errOrder}, {"SZ_ERR_ITEM", errItem}, {"SZ_RAW_UNIT", scatter.RawUnit},
		{"SZ_MAX_STAGES", maxStages}, {"SZ_CTRL_TICKETS", ctrlTickets}, {"SZ_CTRL_READS", ctrlReads},
		{"SZ_CTRL_BYTES", ctrlBytes}, {"SZ_TRACE_WORDS", traceWords},
	} {
		if got := num(sz, c.name); got != c.want {
			t.Errorf("decode.cu: %s is %d, the launcher's %d", c.name, got, c.want)
		}
	}
	gz := defs("gemv.cu")
	for _, c := range []struct {
		name string
		want int
	}{
		{"GZ_CHUNK", codec.ChunkValues}, {"GZ_HEADER", codec.HeaderSize}, {"GZ_FIRST_GROUP", codec.MinGroupChunks},
		{"GZ_RAW", codec.RawEscapes}, {"GZ_WARPS", gemvWarps}, {"GZ_TILE", gemvTile}, {"GZ_GROUP", GemvColumns}, {"GZ_ERR_TABLE", errTable}, {"GZ_ERR_ESCAPE", errEscape},
	} {
		if got := num(gz, c.name); got != c.want {
			t.Errorf("gemv.cu: %s is %d, the launcher's %d", c.name, got, c.want)
		}
	}
	// The splits the launcher takes are the kernels gemv.cu builds, and
	// each fits the warps an SM the launcher counts on.
	src, err := os.ReadFile("gemv.cu")
	if err != nil {
		t.Fatal(err)
	}
	var splits []string
	for _, m := range regexp.MustCompile(`(?m)^\s+GZ_KERNELS_W\(B, (\w+), (\w*)\)`).FindAllStringSubmatch(string(src), -1) {
		w := m[1]
		if w == "GZ_WARPS" {
			w = gz["GZ_WARPS"]
		}
		splits = append(splits, w+":"+m[2])
	}
	var want []string
	for _, sp := range gemvSplits {
		want = append(want, fmt.Sprintf("%d:%s", sp.warps, sp.suffix))
	}
	if !slices.Equal(splits, want) {
		t.Errorf("gemv.cu builds the splits %q, the launcher takes %q", splits, want)
	}
	if got := num(gz, "GZ_MINB") * gemvWarps; got != gemvSMWarps {
		t.Errorf("gemv.cu: GZ_MINB x GZ_WARPS is %d warps an SM, the launcher's gemvSMWarps %d", got, gemvSMWarps)
	}
	if sz["SZ_BUF"] != "(2 * SZ_CHUNK)" || stageBytes != 2*codec.ChunkValues {
		t.Errorf("decode.cu: SZ_BUF %q, the launcher's stage of %d bytes", sz["SZ_BUF"], stageBytes)
	}
	if sz["SZ_DYN_SMEM"] != "(2 * SZ_BUF)" || dynSmem != 2*stageBytes {
		t.Errorf("decode.cu: SZ_DYN_SMEM %q, the launcher's %d", sz["SZ_DYN_SMEM"], dynSmem)
	}
}
