package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/vmm"
)

// Specs returns the arena specs of every tensor of a cached source, after
// checking that the source is usable: a shard that is there must be
// unchanged; a shard that is absent must have all its tensors' bytes in
// the cache (a self-contained cache), in objects of their recorded sizes,
// so every size from the index is bounded by a file before the arena is
// sized from it. A payload's spec names its source slice (the SplitZip
// transport finds the payload by it); a raw tensor's names where its bytes
// are read, the source slice or, for an absent source, its copy in the
// cache.
func Specs(c *shardcache.Cache, src *shardcache.Source) ([]vmm.Spec, error) {
	var out []vmm.Spec
	for si := range src.Shards {
		sh := &src.Shards[si]
		path := filepath.Join(src.Root, sh.Name)
		present, err := shardcache.SourceState(sh, path)
		if err != nil {
			return nil, err
		}
		if !present {
			if err := c.CheckAbsent(sh, path); err != nil {
				return nil, err
			}
		}
		for ti := range sh.Tensors {
			t := &sh.Tensors[ti]
			file, off := path, t.Offset
			if t.Stored != shardcache.StoredSplitZip {
				// An entropy payload without its source keeps its source
				// slice: the SplitZip transport finds it by it and
				// decodes it on the host.
				if file, off, err = c.RawSlice(sh, path, t); errors.Is(err, shardcache.ErrHostDecode) {
					file, off = path, t.Offset
				} else if err != nil {
					return nil, err
				}
			}
			out = append(out, vmm.Spec{Name: t.Name, DType: t.DType, Shape: t.Shape, Shard: file, Offset: off, Size: t.Size})
		}
	}
	return out, nil
}

// LoadOptions configures Load.
type LoadOptions struct {
	Raw      bool // the raw transport only
	Resident bool // keep bytes (payloads, or raw bytes with Raw) in pinned memory across repeats
	Repeat   int  // fault everything in this many times (evicting in between)
	Check    bool // read the arena back after the first run and compare with the source
	Readers  int
	// SmallBytes is the packing threshold (see RawOptions.SmallBytes).
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
	// 0 means DefaultPinnedLimit, negative means no cap.
	PinnedLimit int64
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

// LoadReport is what Load measured.
type LoadReport struct {
	Device      string        `json:"device"`
	Mode        string        `json:"mode"` // "raw" or "splitzip", "+resident"
	Tensors     int           `json:"tensors"`
	RawBytes    uint64        `json:"raw_bytes"`
	MovedBytes  uint64        `json:"moved_bytes"` // bytes copied to the device, all runs
	ArenaBytes  uint64        `json:"arena_bytes"`
	PinnedBytes uint64        `json:"pinned_bytes"`
	Read        time.Duration `json:"read_ns"`   // summed over reader goroutines
	Verify      time.Duration `json:"verify_ns"` // payload checksums
	Submit      time.Duration `json:"submit_ns"` // enqueueing copies and decodes
	Checked     bool          `json:"checked"`
	Settings    Settings      `json:"settings"`
	Runs        []RunReport   `json:"runs"`
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
}

// DefaultAhead is how many layer groups Load faults in at once.
const DefaultAhead = 8

// DefaultStreams is how many upload streams a load engine uses by default.
const DefaultStreams = 2

// DefaultReaders is how many goroutines read files by default: half the
// cores, between 2 and 8. On the 16-core H200 host (2026-12-01, bench load
// of 1.6 GB and 6 GB checkpoints from page cache, readers 2 to 32 by
// streams 1 to 4) 8 readers and 2 streams came within 3% of the best of
// the sweep for raw and SplitZip loads of both, where 16 readers gave
// 77-96%: past 8, readers compete for memory bandwidth.
func DefaultReaders() int { return min(8, max(2, runtime.NumCPU()/2)) }

// Load builds an arena for a cached source on eng and faults every tensor
// in, Repeat times, through the SplitZip transport (or the raw one). When
// ctx ends, Load stops starting reads, waits for what was submitted, frees
// everything and returns ctx's error.
func Load(ctx context.Context, eng engine.Engine, c *shardcache.Cache, src *shardcache.Source, opts LoadOptions) (*LoadReport, error) {
	switch {
	case opts.Repeat < 0:
		return nil, badOption("Repeat", opts.Repeat, "0 (once) or more")
	case opts.Ahead < 0:
		return nil, badOption("Ahead", opts.Ahead, "0 (default) or more")
	case opts.Readers < 0:
		return nil, badOption("Readers", opts.Readers, "0 (default) or more")
	}
	small, err := smallBytes(opts.SmallBytes)
	if err != nil {
		return nil, err
	}
	opts.Repeat = max(opts.Repeat, 1)
	if opts.Ahead == 0 {
		opts.Ahead = DefaultAhead
	}
	if opts.Readers == 0 {
		opts.Readers = DefaultReaders()
	}
	if opts.FirstGroup == nil {
		opts.FirstGroup = func(n string) bool { return strings.HasPrefix(n, "model.layers.0.") }
	}
	specs, err := Specs(c, src)
	if err != nil {
		return nil, err
	}
	arena, err := vmm.New(eng, specs, 0)
	if err != nil {
		return nil, err
	}
	defer arena.Close()
	stage, err := PlanStaging(c, specs, opts.Readers, small, opts.Raw, opts.PinnedLimit)
	if err != nil {
		return nil, err
	}
	if opts.PinnedLimit >= 0 {
		opts.PinnedLimit = int64(stage.Limit)
	}
	raw, err := NewRaw(eng, RawOptions{Readers: opts.Readers, Resident: opts.Raw && opts.Resident, SmallBytes: opts.SmallBytes,
		Slots: stage.RawSlots, PackSlots: stage.PackSlots})
	if err != nil {
		return nil, err
	}
	var t Transport = raw
	mode := "raw"
	if opts.Raw && opts.Resident {
		raw.res.expect(stage.Resident)
	}
	if opts.Raw {
		if err := raw.Prepare(); err != nil {
			raw.Close()
			return nil, err
		}
	} else {
		z, err := NewSplitZip(eng, c, raw, SplitZipOptions{Resident: opts.Resident, Readers: opts.Readers, SmallBytes: opts.SmallBytes,
			RingPieces: stage.Pieces, PackSlots: stage.PackSlots})
		if err != nil {
			raw.Close()
			return nil, err
		}
		if opts.Resident {
			z.res.expect(stage.Resident)
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
	if opts.Resident {
		mode += "+resident"
	}
	defer t.Close()
	st := NewStore(eng, t)
	rep := &LoadReport{Device: eng.Name(), Mode: mode, Tensors: len(specs), ArenaBytes: arena.Size(),
		Settings: Settings{Readers: opts.Readers, Ahead: opts.Ahead, SmallBytes: small, PinnedLimit: opts.PinnedLimit}}
	bs := arena.Bindings()
	for _, b := range bs {
		rep.RawBytes += b.Size
	}
	groups, firstGroup := layerGroups(bs, opts.FirstGroup)
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
		perGroup := make([][]Fence, len(groups))
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
							allFence(fs).Wait()
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
		var all []Fence
		for _, fs := range perGroup {
			all = append(all, fs...)
		}
		if err := allFence(all).Wait(); err != nil {
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
			if err := check(eng, bs, keysOf(src)); err != nil {
				return nil, err
			}
			rep.Checked = true
		}
	}
	s := t.Stats()
	rep.Read, rep.Verify, rep.Submit, rep.MovedBytes = s.Read, s.Verify, s.Submit, s.Bytes
	rep.PinnedBytes = t.PinnedBytes()
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

// check reads every binding back and compares it with its source slice.
func check(eng engine.Engine, bs []*vmm.Binding, keys map[slice]shardcache.Key) error {
	files := map[string]*os.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, b := range bs {
		got := make([]byte, b.Size)
		if err := eng.ReadBack(got, b.Addr); err != nil {
			return &Error{Tensor: b.Name, Err: err}
		}
		f, ok := files[b.Shard]
		if !ok {
			var err error
			f, err = os.Open(b.Shard)
			if errors.Is(err, fs.ErrNotExist) {
				// An absent source: the content key is the reference.
				if shardcache.KeyOf(got) != keys[slice{b.Shard, b.Offset}] {
					return &Error{Tensor: b.Name, Err: fmt.Errorf("device bytes do not match the content key")}
				}
				continue
			}
			if err != nil {
				return err
			}
			files[b.Shard] = f
		}
		want := make([]byte, b.Size)
		if _, err := f.ReadAt(want, int64(b.Offset)); err != nil {
			return fmt.Errorf("%s: %w", b.Shard, err)
		}
		if !bytes.Equal(got, want) {
			return &Error{Tensor: b.Name, Err: fmt.Errorf("device bytes differ from the source")}
		}
	}
	return nil
}

// slice is a tensor's source slice: shard path and offset.
type slice struct {
	path string
	off  uint64
}

// keysOf maps every tensor's source slice to its content key.
func keysOf(src *shardcache.Source) map[slice]shardcache.Key {
	m := map[slice]shardcache.Key{}
	for _, sh := range src.Shards {
		for _, t := range sh.Tensors {
			m[slice{filepath.Join(src.Root, sh.Name), t.Offset}] = t.Key
		}
	}
	return m
}
