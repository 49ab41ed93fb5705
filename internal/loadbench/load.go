// Package loadbench is the load benchmark behind `splitzip load` and
// `splitzip bench load`: it builds a weight arena for a cached checkpoint
// on an engine and faults every tensor in through the transports, layer
// group by layer group a few groups ahead as a loader would, and reports
// rates, the first layer's readiness, host and device times and pinned
// memory. Package transport holds the transports; this package only
// drives them.
package loadbench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/transport"
	"github.com/splitzip/splitzip/vmm"
)

// Options configures Load.
type Options struct {
	Raw      bool // the raw transport only
	Resident bool // keep bytes (payloads, or raw bytes with Raw) in pinned memory across repeats
	// DeviceResident keeps the streamed payloads compressed in device
	// memory across repeats (the small ones in pinned memory), so
	// re-faults copy within the device and decode (not with Raw).
	DeviceResident bool
	// ResidentPacks, with Resident, keeps the payloads of each layer
	// group side by side in pinned regions, re-faulted a region at a time
	// (transport.SplitZipOptions.ResidentPacks); with Raw, the bytes of
	// tensors side by side in the arena, re-faulted a run at a time with
	// one copy (transport.RawOptions.ResidentRuns).
	ResidentPacks bool
	// EntropyOnHost decodes entropy payloads whose source is absent on
	// the host (transport.SplitZipOptions.HostEntropy).
	EntropyOnHost bool
	// EntropyFromSource reads entropy tensors raw from their source when
	// it is there (transport.SplitZipOptions.EntropyFromSource).
	EntropyFromSource bool
	Repeat            int  // fault everything in this many times (evicting in between)
	Check             bool // read the arena back after the first run and compare with the source
	Readers           int
	// SmallBytes is the packing threshold (see transport.RawOptions.SmallBytes).
	SmallBytes int64
	// DeviceTimes times copies and decodes on the device (engines that
	// implement engine.Timer), at the cost of two events per operation.
	DeviceTimes bool
	// Ahead is how many layer groups are faulted in at once, as a loader
	// prefetching layers would (default DefaultAhead). More keeps more
	// reads in flight; fewer makes the first layer ready sooner.
	Ahead int
	// FirstGroup names the bindings whose readiness is reported as the
	// first layer (default: names starting with "model.layers.0.").
	FirstGroup func(name string) bool
	// Progress, if set, is called from several goroutines with the tensor
	// bytes of each layer group once its reads and submissions are done.
	Progress func(n uint64)
	// PinnedLimit caps the pinned staging buffers (not resident bytes):
	// 0 means transport.DefaultPinnedLimit, negative means no cap.
	PinnedLimit int64

	// For LoadDevices (devices.go): only, when set, selects the bindings
	// faulted in (and checked); ready is called once everything is set
	// up, before the timed runs, and may block; after is called with the
	// arena once the runs are done, before anything is freed.
	only  func(b *vmm.Binding) bool
	ready func() error
	after func(arena *vmm.Arena) error
}

// RunReport is one fault-in of every binding.
type RunReport struct {
	Wall time.Duration `json:"wall_ns"`
	GBps float64       `json:"gb_per_s"` // raw tensor bytes per wall second, 1e9
	// PerTensor is the wall time over the tensor count: the host cost a
	// tensor adds when loads are bound by it (many small tensors).
	PerTensor  time.Duration `json:"per_tensor_ns"`
	FirstLayer time.Duration `json:"first_layer_ready_ns"`
	// Device is how long copies and decodes kept the device busy (engines
	// that time their work).
	Device engine.DeviceTimes `json:"device"`
}

// Report is what Load measured.
type Report struct {
	Device      string `json:"device"`
	Mode        string `json:"mode"` // "raw" or "splitzip", "+resident"
	Tensors     int    `json:"tensors"`
	RawBytes    uint64 `json:"raw_bytes"`
	MovedBytes  uint64 `json:"moved_bytes"` // bytes copied to the device, all runs
	ArenaBytes  uint64 `json:"arena_bytes"`
	PinnedBytes uint64 `json:"pinned_bytes"`
	// DeviceBytes is the device memory the device tier held
	// (DeviceResident).
	DeviceBytes uint64        `json:"device_tier_bytes,omitempty"`
	Read        time.Duration `json:"read_ns"`   // summed over reader goroutines
	Verify      time.Duration `json:"verify_ns"` // payload checksums
	Submit      time.Duration `json:"submit_ns"` // enqueueing copies and decodes
	Checked     bool          `json:"checked"`
	// EntropyTensors counts the tensors stored as entropy payloads: read
	// raw from their source, or without it decoded from their payloads
	// (on the device, or on the host: see transport.SplitZipOptions).
	EntropyTensors int         `json:"entropy_tensors"`
	Settings       Settings    `json:"settings"`
	Runs           []RunReport `json:"runs"`
}

// Settings are the runtime knobs a load ran with (Streams is the
// engine's, filled in by the caller that made it).
type Settings struct {
	Readers    int   `json:"readers"`
	Streams    int   `json:"streams,omitempty"`
	Ahead      int   `json:"ahead"`
	SmallBytes int64 `json:"small_bytes"` // packing threshold; negative: no packing
	// PinnedLimit is the cap on pinned staging; negative: none.
	PinnedLimit int64 `json:"pinned_limit"`
	// EntropyOnHost: entropy payloads without their source were decoded
	// on the host (Options.EntropyOnHost).
	EntropyOnHost bool `json:"entropy_on_host,omitempty"`
	// EntropyFromSource: entropy tensors were read raw from their source
	// where it was there (Options.EntropyFromSource).
	EntropyFromSource bool `json:"entropy_from_source,omitempty"`
}

// DefaultAhead is how many layer groups Load faults in at once.
const DefaultAhead = 8

// Load builds an arena for a cached source on eng and faults every tensor
// in, Repeat times, through the SplitZip transport (or the raw one). When
// ctx ends, Load stops starting reads, waits for what was submitted, frees
// everything and returns ctx's error.
func Load(ctx context.Context, eng engine.Engine, c *shardcache.Cache, src *shardcache.Source, opts Options) (*Report, error) {
	switch {
	case opts.Repeat < 0:
		return nil, badOption("Repeat", opts.Repeat, "0 (once) or more")
	case opts.Ahead < 0:
		return nil, badOption("Ahead", opts.Ahead, "0 (default) or more")
	case opts.Readers < 0:
		return nil, badOption("Readers", opts.Readers, "0 (default) or more")
	case opts.DeviceResident && (opts.Raw || opts.Resident):
		return nil, badOption("DeviceResident", true, "without Raw and Resident (the device tier holds payloads)")
	case opts.ResidentPacks && !opts.Resident:
		return nil, badOption("ResidentPacks", true, "with Resident")
	}
	small, err := transport.ResolveSmallBytes(opts.SmallBytes)
	if err != nil {
		return nil, err
	}
	opts.Repeat = max(opts.Repeat, 1)
	if opts.Ahead == 0 {
		opts.Ahead = DefaultAhead
	}
	if opts.Readers == 0 {
		opts.Readers = transport.DefaultReaders()
	}
	if opts.FirstGroup == nil {
		opts.FirstGroup = func(n string) bool { return strings.HasPrefix(n, "model.layers.0.") }
	}
	specs, err := transport.Specs(c, src)
	if err != nil {
		return nil, err
	}
	arena, err := vmm.New(eng, specs, 0)
	if err != nil {
		return nil, err
	}
	defer arena.Close()
	stage, err := transport.PlanStaging(c, specs, opts.Readers, small, opts.Raw, opts.PinnedLimit)
	if err != nil {
		return nil, err
	}
	if opts.PinnedLimit >= 0 {
		opts.PinnedLimit = int64(stage.Limit)
	}
	resident := stage.Resident
	if opts.ResidentPacks {
		resident = stage.ResidentPacked(opts.Raw)
	}
	raw, err := transport.NewRaw(eng, transport.RawOptions{Readers: opts.Readers, Resident: opts.Raw && opts.Resident,
		ResidentRuns: opts.Raw && opts.Resident && opts.ResidentPacks, SmallBytes: opts.SmallBytes,
		Slots: stage.RawSlots, PackSlots: stage.PackSlots, ResidentBytes: resident})
	if err != nil {
		return nil, err
	}
	var t transport.Transport = raw
	mode := "raw"
	if opts.Raw {
		if err := raw.Prepare(); err != nil {
			raw.Close()
			return nil, err
		}
	} else {
		if opts.DeviceResident {
			resident = stage.SmallResident
		}
		z, err := transport.NewSplitZip(eng, c, raw, transport.SplitZipOptions{Resident: opts.Resident, ResidentPacks: opts.ResidentPacks, Readers: opts.Readers, SmallBytes: opts.SmallBytes,
			RingPieces: stage.Pieces, PackSlots: stage.PackSlots, ResidentBytes: resident,
			DeviceResident: opts.DeviceResident, DeviceBytes: stage.Device, HostEntropy: opts.EntropyOnHost,
			EntropyFromSource: opts.EntropyFromSource})
		if err != nil {
			raw.Close()
			return nil, err
		}
		// Staging buffers are persistent: set them up before timing, as
		// the raw transport's ring is.
		if err := z.Prepare(); err != nil {
			z.Close()
			return nil, err
		}
		t = z
		mode = "splitzip"
	}
	switch {
	case opts.Resident && opts.ResidentPacks:
		mode += "+resident-packs"
	case opts.Resident:
		mode += "+resident"
	case opts.DeviceResident && !opts.Raw:
		mode += "+device-resident"
	}
	defer t.Close()
	st := transport.NewStore(eng, t)
	rep := &Report{Device: eng.Name(), Mode: mode, Tensors: len(specs), ArenaBytes: arena.Size(),
		Settings: Settings{Readers: opts.Readers, Ahead: opts.Ahead, SmallBytes: small, PinnedLimit: opts.PinnedLimit,
			EntropyOnHost: opts.EntropyOnHost, EntropyFromSource: opts.EntropyFromSource}}
	bs := arena.Bindings()
	if opts.only != nil {
		var mine []*vmm.Binding
		for _, b := range bs {
			if opts.only(b) {
				mine = append(mine, b)
			}
		}
		bs = mine
		rep.Tensors = len(bs)
	}
	for _, b := range bs {
		rep.RawBytes += b.Size
	}
	for _, sh := range src.Shards {
		for _, t := range sh.Tensors {
			if t.Stored == shardcache.StoredEntropy {
				rep.EntropyTensors++
			}
		}
	}
	groups, firstGroup := layerGroups(bs, opts.FirstGroup)
	if opts.ready != nil {
		if err := opts.ready(); err != nil {
			return nil, err
		}
	}
	for run := range opts.Repeat {
		if run > 0 {
			st.Evict(bs...)
		}
		timer, timed := eng.(engine.Timer)
		timed = timed && opts.DeviceTimes
		if timed {
			if err := timer.StartTiming(); err != nil {
				return nil, err
			}
		}
		// Fault in group by group (a loader asks layer by layer, a few
		// layers ahead), so the first layer is ready while later ones
		// still arrive.
		t0 := time.Now()
		firstReady := make(chan time.Duration, 1)
		perGroup := make([][]transport.Fence, len(groups))
		next := make(chan int)
		var wg sync.WaitGroup
		for range opts.Ahead {
			wg.Go(func() {
				for gi := range next {
					fs := st.FaultIn(ctx, groups[gi])
					perGroup[gi] = fs
					if opts.Progress != nil {
						var n uint64
						for _, b := range groups[gi] {
							n += b.Size
						}
						opts.Progress(n)
					}
					if gi == firstGroup {
						go func() {
							waitAll(fs)
							firstReady <- time.Since(t0)
						}()
					}
				}
			})
		}
		for gi := range groups {
			next <- gi
		}
		close(next)
		wg.Wait()
		var all []transport.Fence
		for _, fs := range perGroup {
			all = append(all, fs...)
		}
		if err := waitAll(all); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		first := <-firstReady
		if d, ok := eng.(engine.DecodeErrorer); ok {
			if err := d.DecodeErrors(); err != nil {
				return nil, err
			}
		}
		wall := time.Since(t0)
		rr := RunReport{Wall: wall, GBps: float64(rep.RawBytes) / wall.Seconds() / 1e9, FirstLayer: first,
			PerTensor: wall / time.Duration(max(len(bs), 1))}
		if timed {
			if rr.Device, err = timer.TakeTimes(); err != nil {
				return nil, err
			}
		}
		rep.Runs = append(rep.Runs, rr)
		if run == 0 && opts.Check {
			if err := transport.CheckArena(eng, bs, src); err != nil {
				return nil, err
			}
			rep.Checked = true
		}
	}
	if opts.after != nil {
		if err := opts.after(arena); err != nil {
			return nil, err
		}
	}
	s := t.Stats()
	rep.Read, rep.Verify, rep.Submit, rep.MovedBytes = s.Read, s.Verify, s.Submit, s.Bytes
	rep.PinnedBytes = t.PinnedBytes()
	if d, ok := t.(interface{ DeviceBytes() uint64 }); ok {
		rep.DeviceBytes = d.DeviceBytes()
	}
	return rep, nil
}

// layerGroups splits bindings by layer ("model.layers.N." prefixes, in
// order of N), with the others (embeddings, final norm, head) first, and
// returns the index of the group FirstGroup selects.
func layerGroups(bs []*vmm.Binding, firstOf func(string) bool) ([][]*vmm.Binding, int) {
	byLayer := map[int][]*vmm.Binding{}
	var rest []*vmm.Binding
	maxLayer := -1
	for _, b := range bs {
		var n int
		if _, err := fmt.Sscanf(b.Name, "model.layers.%d.", &n); err == nil && strings.HasPrefix(b.Name, "model.layers.") {
			byLayer[n] = append(byLayer[n], b)
			maxLayer = max(maxLayer, n)
			continue
		}
		rest = append(rest, b)
	}
	groups := [][]*vmm.Binding{rest}
	first := 0
	for n := 0; n <= maxLayer; n++ {
		if g := byLayer[n]; len(g) > 0 {
			if first == 0 && firstOf(g[0].Name) {
				first = len(groups)
			}
			groups = append(groups, g)
		}
	}
	return groups, first
}

// waitAll waits for every fence and returns the first error.
func waitAll(fs []transport.Fence) error {
	var first error
	for _, f := range fs {
		if err := f.Wait(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// badOption returns a transport.ErrOption naming the option and its value.
func badOption(name string, v any, want string) error {
	return fmt.Errorf("%w: %s is %v, want %s", transport.ErrOption, name, v, want)
}
