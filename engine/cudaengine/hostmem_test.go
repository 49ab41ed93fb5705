package cudaengine

import (
	"strings"
	"testing"
	"unsafe"
)

// TestMapHost checks mapHost's mappings without a GPU, with huge pages
// and without (SPLITZIP_PINNED_PAGES=small): lengths (whole huge pages
// from one huge page up), alignment, every byte zero and writable, and
// unmapHost giving them back.
func TestMapHost(t *testing.T) {
	for _, huge := range []bool{true, false} {
		testMapHost(t, huge)
	}
}

func testMapHost(t *testing.T, huge bool) {
	for _, c := range []struct {
		n, size uint64
		huge    bool
	}{
		{0, 1, false},
		{4096, 4096, false},
		{hugePage - 1, hugePage - 1, false},
		{hugePage, hugePage, true},
		{hugePage + 1, 2 * hugePage, true},
		{4 << 20, 4 << 20, true},
		{5<<20 + 17, 6 << 20, true},
	} {
		if !huge || basePage != 4096 {
			c.size, c.huge = max(c.n, 1), false
		}
		if got := hostSize(c.n, huge); got != c.size {
			t.Errorf("huge pages %v: hostSize(%d) = %d, want %d", huge, c.n, got, c.size)
		}
		b, err := mapHost(c.n, huge)
		if err != nil {
			t.Fatalf("mapHost(%d): %v", c.n, err)
		}
		if uint64(len(b)) != c.size || uint64(cap(b)) != c.size {
			t.Errorf("mapHost(%d): len %d cap %d, want %d", c.n, len(b), cap(b), c.size)
		}
		if p := uintptr(unsafe.Pointer(&b[0])); c.huge && p%hugePage != 0 {
			t.Errorf("mapHost(%d) at %#x: not aligned to a huge page", c.n, p)
		}
		for i := range b {
			if b[i] != 0 {
				t.Fatalf("mapHost(%d): byte %d is %d, not zero", c.n, i, b[i])
			}
		}
		b[0], b[len(b)-1] = 1, 2
		if err := unmapHost(b); err != nil {
			t.Errorf("unmapHost(%d bytes): %v", len(b), err)
		}
	}
}

func TestPinnedPages(t *testing.T) {
	for v, huge := range map[string]bool{"": true, "huge": true, "small": false} {
		if h, err := pinnedPages(v); err != nil || h != huge {
			t.Errorf("SPLITZIP_PINNED_PAGES=%q: huge %v, %v; want %v", v, h, err, huge)
		}
	}
	for _, v := range []string{"SMALL", "4k", "bogus"} {
		if _, err := pinnedPages(v); err == nil || !strings.Contains(err.Error(), v) {
			t.Errorf("SPLITZIP_PINNED_PAGES=%q: %v, want an error naming it", v, err)
		}
	}
}
