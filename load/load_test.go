package load

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/engine/hostengine"
	"github.com/splitzip/splitzip/internal/fixture"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/scatter"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/transport"
	"github.com/splitzip/splitzip/vmm"
)

// runs is a load's options and how many times to run it.
type runs struct {
	Options
	Repeat int
}

// loadRuns opens a load, runs it o.Repeat times (checking the first run
// with Check) and returns its report.
func loadRuns(ctx context.Context, eng engine.Engine, c *shardcache.Cache, src *shardcache.Source, o runs) (*Report, error) {
	l, err := Open(eng, c, src, o.Options)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	for i := range o.Repeat {
		if _, err := l.Run(ctx); err != nil {
			return nil, err
		}
		if i == 0 && o.Check {
			if err := l.Check(); err != nil {
				return nil, err
			}
		}
	}
	return l.Report(), nil
}

// llama is the small Llama-like checkpoint most tests load.
func llama(t *testing.T) (*shardcache.Cache, *shardcache.Source) {
	return fixture.Compressed(t, synth.Config{Bytes: 3 << 20, Shards: 2, Seed: 11}, pipeline.CompressOptions{})
}

func TestLoadBothPaths(t *testing.T) {
	c, src := llama(t)
	// Two streams with decodes in them, and one with decodes beside it,
	// the orders the CUDA engine keeps (cudaengine.New).
	for _, newEngine := range []func() *hostengine.Engine{
		func() *hostengine.Engine { return hostengine.New(2) },
		func() *hostengine.Engine { return hostengine.New(1, hostengine.WithDecodeStreams()) },
	} {
		loadBothPaths(t, c, src, newEngine)
	}
}

func loadBothPaths(t *testing.T, c *shardcache.Cache, src *shardcache.Source, newEngine func() *hostengine.Engine) {
	var residentPinned, rawResidentPinned uint64
	for _, o := range []runs{
		{Options{Raw: true, Check: true}, 2},
		{Options{Raw: true, Resident: true, Check: true}, 2},
		{Options{Raw: true, Resident: true, ResidentPacks: true, Check: true}, 3},
		{Options{Check: true}, 2},
		{Options{Resident: true, Check: true}, 3},
		{Options{Resident: true, ResidentPacks: true, Check: true}, 3},
		{Options{DeviceResident: true, Check: true}, 3},
	} {
		o.DeviceTimes = true
		eng := newEngine()
		rep, err := loadRuns(context.Background(), eng, c, src, o)
		if err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		if !rep.Checked || len(rep.Runs) != o.Repeat || rep.RawBytes == 0 || rep.Prepare <= 0 {
			t.Fatalf("%+v: report %+v", o, rep)
		}
		for i, r := range rep.Runs {
			if r.Device.Copy <= 0 || (!o.Raw && r.Device.Decode <= 0) || r.Device.DecodeAlone > r.Device.Decode {
				t.Errorf("%+v: run %d: device times %+v", o, i+1, r.Device)
			}
		}
		if o.Resident && !o.Raw && !o.ResidentPacks {
			residentPinned = rep.PinnedBytes
		}
		if o.Raw && o.Resident && !o.ResidentPacks {
			rawResidentPinned = rep.PinnedBytes
		}
		// Runs pin their tensors and the alignment between them, sized
		// ahead: less than 512 bytes a tensor more, not a block more.
		if o.Raw && o.Resident && o.ResidentPacks && (rep.Mode != "raw+resident-packs" || rep.PinnedBytes > rawResidentPinned+200<<10) {
			t.Errorf("%+v: mode %s, pinned %d bytes against %d without runs", o, rep.Mode, rep.PinnedBytes, rawResidentPinned)
		}
		// Packs pin their payloads and tables, in the blocks sized for
		// the payloads (a few KiB more), not a block more.
		if o.ResidentPacks && !o.Raw && (rep.Mode != "splitzip+resident-packs" || rep.PinnedBytes > residentPinned+64<<10) {
			t.Errorf("%+v: mode %s, pinned %d bytes against %d without packs", o, rep.Mode, rep.PinnedBytes, residentPinned)
		}
		if o.DeviceResident && (rep.DeviceBytes == 0 || rep.Mode != "splitzip+device-resident") {
			t.Errorf("%+v: mode %s, device tier of %d bytes", o, rep.Mode, rep.DeviceBytes)
		}
		if !o.Raw && rep.MovedBytes >= rep.RawBytes*uint64(o.Repeat) {
			t.Errorf("%+v: moved %d bytes for %d raw bytes in %d runs: payloads did not shrink", o, rep.MovedBytes, rep.RawBytes, o.Repeat)
		}
		if eng.PinnedBytes() != 0 {
			t.Errorf("%+v: %d pinned bytes leaked", o, eng.PinnedBytes())
		}
		// Staging is sized from the checkpoint: a few MiB of tensors pin
		// a few buffers (raw 16 MiB slots, 8 MiB pieces, 4 MiB packs), not
		// the rings of a large checkpoint, and resident bytes on top only.
		if limit := 64<<20 + 2*rep.RawBytes; !o.Resident && rep.PinnedBytes > limit {
			t.Errorf("%+v: pinned %d bytes for %d bytes of tensors", o, rep.PinnedBytes, rep.RawBytes)
		}
		eng.Close()
	}
}

// TestOptionsRefused: options out of range are errors, not clamps.
func TestOptionsRefused(t *testing.T) {
	c, src := llama(t)
	eng := hostengine.New(2)
	defer eng.Close()
	for name, o := range map[string]Options{"negative ahead": {Ahead: -1}, "negative readers": {Readers: -3}, "too large packing": {SmallBytes: 1 << 30},
		"device tier with raw": {Raw: true, DeviceResident: true}, "both tiers": {Resident: true, DeviceResident: true},
		"resident packs without residency": {ResidentPacks: true}, "share without residency": {Share: true},
		"share with raw": {Raw: true, Resident: true, Share: true}} {
		if _, err := Checkpoint(context.Background(), eng, c, src, o); !errors.Is(err, transport.ErrOption) || !strings.Contains(err.Error(), "want") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestSmallBytesDefault: a local load that keeps nothing resident packs
// up to DefaultSmallBytes by default, resident loads (pinned, shared, the
// device tier) up to transport.DefaultSmallBytes, and a threshold given
// is kept.
func TestSmallBytesDefault(t *testing.T) {
	c, _ := llama(t)
	for _, tc := range []struct {
		o    Options
		want int64
	}{
		{Options{}, DefaultSmallBytes},
		{Options{Resident: true}, transport.DefaultSmallBytes},
		{Options{Resident: true, ResidentPacks: true, Share: true}, transport.DefaultSmallBytes},
		{Options{DeviceResident: true}, transport.DefaultSmallBytes},
		{Options{DeviceResident: true, SmallBytes: 1000}, 1000},
		{Options{SmallBytes: 1000}, 1000},
		{Options{SmallBytes: -1}, -1},
	} {
		o := tc.o
		if got, err := o.resolve(c); err != nil || got != tc.want {
			t.Errorf("%+v: packing threshold %d (%v), want %d", tc.o, got, err, tc.want)
		}
	}
}

// TestCanceled: a Load whose context has ended returns its error and
// frees everything.
func TestCanceled(t *testing.T) {
	c, src := llama(t)
	done, end := context.WithCancel(context.Background())
	end()
	eng := hostengine.New(2)
	defer eng.Close()
	if _, err := Checkpoint(done, eng, c, src, Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Load with an ended context: %v", err)
	}
	if eng.PinnedBytes() != 0 {
		t.Errorf("Load left %d bytes pinned", eng.PinnedBytes())
	}
}

// TestPinnedLimit: a load stays under its staging cap.
func TestPinnedLimit(t *testing.T) {
	c, src := llama(t)
	for _, raw := range []bool{false, true} {
		eng := hostengine.New(2)
		rep, err := Checkpoint(context.Background(), eng, c, src, Options{Raw: raw, Check: true, Readers: 8, PinnedLimit: 48 << 20})
		if err != nil {
			t.Fatal(err)
		}
		if rep.PinnedBytes > 48<<20 || rep.Settings.PinnedLimit != 48<<20 {
			t.Errorf("raw %v: pinned %d bytes under a 48 MiB cap (settings %+v)", raw, rep.PinnedBytes, rep.Settings)
		}
		eng.Close()
	}
}

// TestSmallTensorsArePacked: a checkpoint of small tensors loads a pack
// or two a layer, never a copy a tensor, on every path.
func TestSmallTensorsArePacked(t *testing.T) {
	c, src := fixture.Compressed(t, synth.Config{Small: 200, Shards: 2, Seed: 5}, pipeline.CompressOptions{})
	for _, o := range []runs{
		{Options{Raw: true, Check: true}, 2},
		{Options{Check: true}, 2},
		{Options{Resident: true, Check: true}, 2},
	} {
		var scatters, items atomic.Int64
		eng := hostengine.New(2, hostengine.WithHooks(hostengine.Hooks{Scatter: func(its []scatter.Item) error {
			scatters.Add(1)
			items.Add(int64(len(its)))
			return nil
		}}))
		rep, err := loadRuns(context.Background(), eng, c, src, o)
		if err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		// Load faults in layer by layer, 100 tensors each.
		if items.Load() != int64(o.Repeat*rep.Tensors) || scatters.Load() > int64(o.Repeat*rep.Tensors/20) {
			t.Errorf("%+v: %d tensors in %d scatters, want all %d tensors in few packs", o, items.Load(), scatters.Load(), o.Repeat*rep.Tensors)
		}
		eng.Close()
		if eng.PinnedBytes() != 0 {
			t.Errorf("%+v: %d pinned bytes leaked", o, eng.PinnedBytes())
		}
	}
}

// TestSmallLoosePayloads: small payloads each in a file of their own (a
// version 1 cache, or --pack-max 0) are packed and land bit for bit too,
// read one file at a time, and leave no descriptor open.
func TestSmallLoosePayloads(t *testing.T) {
	c, src := fixture.Compressed(t, synth.Config{Small: 200, Shards: 2, Seed: 5}, pipeline.CompressOptions{PackMax: -1})
	if st := c.Index().Packs(); st.Packs != 0 {
		t.Fatalf("%d packs with packing off", st.Packs)
	}
	eng := hostengine.New(2)
	defer eng.Close()
	fds := fixture.OpenFiles(t)
	var most atomic.Int64
	progress := func(uint64) {
		if n := int64(fixture.OpenFiles(t)); n > most.Load() {
			most.Store(n) // racy max, enough for a bound
		}
	}
	rep, err := loadRuns(context.Background(), eng, c, src, runs{Options{Check: true, Progress: progress}, 2})
	if err != nil || !rep.Checked {
		t.Fatalf("load: %v", err)
	}
	// Two shard files and a few being read at once, never one per payload.
	if m := most.Load(); m > int64(fds)+24 {
		t.Errorf("%d descriptors open during the load of 200 loose payloads, %d before", m, fds)
	}
	if n := fixture.OpenFiles(t); n > fds {
		t.Errorf("%d descriptors open after the load, %d before", n, fds)
	}
}

// TestLayerGroups: bindings split by layer in order, the others first,
// and the group of the first layer found by name.
func TestLayerGroups(t *testing.T) {
	c, src := llama(t)
	specs, err := transport.Specs(c, src)
	if err != nil {
		t.Fatal(err)
	}
	eng := hostengine.New(2)
	defer eng.Close()
	arena, err := vmm.New(eng, specs, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer arena.Close()
	groups, first := layerGroups(arena.Bindings(), func(n string) bool { return strings.HasPrefix(n, "model.layers.0.") })
	if first != 1 || len(groups) < 3 {
		t.Fatalf("%d groups, first layer at %d", len(groups), first)
	}
	for _, b := range groups[0] {
		if strings.HasPrefix(b.Name, "model.layers.") {
			t.Errorf("%s among the others", b.Name)
		}
	}
	for i, g := range groups[1:] {
		for _, b := range g {
			if !strings.HasPrefix(b.Name, "model.layers.") {
				t.Errorf("group %d holds %s", i+1, b.Name)
			}
		}
	}

	// Names that look like layers but are not ("-1", "+1"), and a layer
	// number far past the others: every binding is in exactly one group
	// (the odd ones among the others), the layers in order.
	odd := slices.Clone(specs)
	for i, name := range []string{"model.layers.-1.w", "model.layers.+1.w", "model.layers.2000000000.w"} {
		odd[i].Name = name
	}
	arena2, err := vmm.New(eng, odd, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer arena2.Close()
	groups, _ = layerGroups(arena2.Bindings(), func(string) bool { return false })
	seen, last := 0, -1
	for i, g := range groups {
		seen += len(g)
		if i == 0 {
			if !slices.ContainsFunc(g, func(b *vmm.Binding) bool { return b.Name == "model.layers.-1.w" }) {
				t.Errorf("model.layers.-1.w is not among the others")
			}
			continue
		}
		n, ok := transport.LayerOf(g[0].Name)
		if !ok || n <= last {
			t.Errorf("group %d (%s) after layer %d", i, g[0].Name, last)
		}
		last = n
	}
	if seen != len(odd) || last != 2000000000 {
		t.Errorf("groups hold %d bindings of %d, the last layer %d", seen, len(odd), last)
	}
}

// TestDeviceResidentSmallOnly: a device-resident load of a checkpoint
// whose payloads are all small (the device tier would hold nothing) keeps
// them in pinned memory and loads, rather than refusing its options.
func TestDeviceResidentSmallOnly(t *testing.T) {
	c, src := fixture.Compressed(t, synth.Config{Small: 60, Shards: 1, Seed: 4}, pipeline.CompressOptions{})
	eng := hostengine.New(2)
	defer eng.Close()
	rep, err := loadRuns(context.Background(), eng, c, src, runs{Options{DeviceResident: true, Check: true, SmallBytes: 64 << 10}, 2})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Checked || len(rep.Runs) != 2 || rep.Mode != "splitzip+device-resident" || rep.DeviceBytes != 0 {
		t.Errorf("report %+v", rep)
	}
}

// TestRemoteDefaults: a load of a remote cache defaults to RemoteReaders
// and RemotePinnedLimit (a local one to DefaultReaders and the engine's
// own cap where it has one, the host engine's here, else the transport's
// default); options set explicitly are kept either way; the load is bit
// for bit.
func TestRemoteDefaults(t *testing.T) {
	c, src := fixture.Compressed(t, synth.Config{Bytes: 3 << 20, Shards: 2, Seed: 11}, pipeline.CompressOptions{SelfContained: true})
	rc, _ := fixture.Remote(c)
	rsrc, err := rc.PickSource("")
	if err != nil {
		t.Fatal(err)
	}
	host := hostengine.New(1)
	defer host.Close()
	for _, tc := range []struct {
		c               *shardcache.Cache
		src             *shardcache.Source
		o               Options
		readers, pinned int64
		small           int64
	}{
		{c, src, Options{}, int64(DefaultReaders()), host.StagingLimit(DefaultReaders()), DefaultSmallBytes},
		{c, src, Options{PinnedLimit: transport.DefaultPinnedLimit}, int64(DefaultReaders()), transport.DefaultPinnedLimit, DefaultSmallBytes},
		{rc, rsrc, Options{}, RemoteReaders, RemotePinnedLimit, transport.DefaultSmallBytes},
		{rc, rsrc, Options{Readers: 3, PinnedLimit: 64 << 20, SmallBytes: 1000}, 3, 64 << 20, 1000},
	} {
		eng := hostengine.New(2)
		tc.o.Check = true
		rep, err := Checkpoint(context.Background(), eng, tc.c, tc.src, tc.o)
		eng.Close()
		if err != nil {
			t.Fatalf("remote %v, %+v: %v", tc.c.Remote(), tc.o, err)
		}
		if s := rep.Settings; int64(s.Readers) != tc.readers || s.PinnedLimit != tc.pinned || s.SmallBytes != tc.small {
			t.Errorf("remote %v, options %+v: readers %d, pinned limit %d, packing up to %d; want %d, %d, %d", tc.c.Remote(), tc.o, s.Readers, s.PinnedLimit, s.SmallBytes, tc.readers, tc.pinned, tc.small)
		}
	}
}
