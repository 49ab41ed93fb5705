package load

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/engine/hostengine"
	"github.com/splitzip/splitzip/internal/cachetest"
	"github.com/splitzip/splitzip/internal/fixture"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/transport"
)

// Loads with Share take their payloads' resident copies from one shared
// host copy: the first makes it (reading every payload), a load while it
// is held attaches and reads no payload, and both load every tensor bit
// for bit, with and without resident packs, fixed and entropy.
func TestShare(t *testing.T) {
	for _, kind := range []string{"fixed", "entropy"} {
		t.Run(kind, func(t *testing.T) {
			c, src := fixture.Compressed(t, synth.Config{Bytes: 3 << 20, Shards: 2, Seed: 12}, pipeline.CompressOptions{Codec: kind})
			eng := hostengine.New(2)
			defer eng.Close()
			dir := filepath.Join(t.TempDir(), "share")
			o := Options{Resident: true, ResidentPacks: true, Share: true, ShareDir: dir, Check: true}
			held, err := Share(eng, c, src, o)
			if err != nil {
				t.Fatal(err)
			}
			s := held.Shared()
			if s == nil || !s.Made || s.Bytes == 0 || s.Holders != 1 {
				t.Fatalf("holder: %+v", s)
			}
			// Every payload in the cache damaged: loads attached to the
			// shared copy read none of them, so they still load every
			// tensor right. (Not entropy payloads: the small ones, decoded
			// on the host, are read from the cache as without Share.)
			specs, err := transport.Specs(c, src)
			if err != nil {
				t.Fatal(err)
			}
			l := transport.LayoutShared(c, specs)
			if l.ID != s.ID || len(l.Keys) == 0 {
				t.Fatalf("layout %s of %d payloads, the shared copy is %s", l.ID, len(l.Keys), s.ID)
			}
			var restore []func()
			for i, k := range l.Keys {
				if kind == "entropy" {
					break
				}
				restore = append(restore, cachetest.Flip(t, c, k, int64(l.Sizes[i]/2), 0x10))
			}
			for _, packs := range []bool{true, false} {
				o.ResidentPacks = packs
				rep, err := loadRuns(context.Background(), eng, c, src, runs{o, 2})
				if err != nil || !rep.Checked {
					t.Fatalf("packs %v: %v", packs, err)
				}
				if rep.Shared == nil || rep.Shared.ID != s.ID || rep.Mode != fmt.Sprintf("splitzip+shared+%s", map[bool]string{true: "resident-packs", false: "resident"}[packs]) {
					t.Fatalf("report: %s %+v", rep.Mode, rep.Shared)
				}
				// Small entropy payloads, not in the copy, are read and
				// checked from the cache (and decoded on the device).
				if rep.Verify != 0 && kind == "fixed" {
					t.Errorf("packs %v: a load attached to the shared copy checked payloads for %v", packs, rep.Verify)
				}
			}
			if err := held.Close(); err != nil {
				t.Fatal(err)
			}
			// Nobody holds it now: the next load makes it again, reading
			// and checking every payload, and finds the damage.
			if _, err := loadRuns(context.Background(), eng, c, src, runs{o, 1}); len(restore) > 0 && !errors.Is(err, codec.ErrChecksum) {
				t.Fatalf("making the shared copy from damaged payloads: %v", err)
			}
			for _, r := range restore {
				r()
			}
			rep, err := loadRuns(context.Background(), eng, c, src, runs{o, 1})
			if err != nil || !rep.Shared.Made || !rep.Checked {
				t.Fatalf("after the holder closed: %v %+v", err, rep.Shared)
			}
		})
	}
}
