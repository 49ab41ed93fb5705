package load

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/splitzip/splitzip/costmodel"
	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/transport"
	"github.com/splitzip/splitzip/vmm"
)

// RunReport is one fault-in of every binding.
type RunReport struct {
	Wall time.Duration `json:"wall_ns"`
	GBps float64       `json:"gb_per_s"` // raw tensor bytes per wall second, 1e9
	// PerTensor is the wall time over the tensor count: the host cost a
	// tensor adds when loads are bound by it (many small tensors).
	PerTensor  time.Duration `json:"per_tensor_ns"`
	FirstLayer time.Duration `json:"first_layer_ready_ns"`
	// Device is how long copies and decodes kept the device busy (engines
	// that time their work, Options.DeviceTimes; left out of the JSON
	// when not measured).
	Device engine.DeviceTimes `json:"device,omitzero"`
}

// Report is what a load did.
type Report struct {
	Device      string `json:"device"`
	Mode        string `json:"mode"` // Transports.Mode
	Tensors     int    `json:"tensors"`
	RawBytes    uint64 `json:"raw_bytes"`
	MovedBytes  uint64 `json:"moved_bytes"` // bytes copied to the device, all runs
	ArenaBytes  uint64 `json:"arena_bytes"`
	PinnedBytes uint64 `json:"pinned_bytes"`
	// DeviceBytes is the device memory the device tier held
	// (DeviceResident).
	DeviceBytes uint64 `json:"device_tier_bytes,omitempty"`
	// Shared is the payloads' host copy shared on this machine
	// (Options.Share).
	Shared *SharedReport `json:"shared,omitempty"`
	Read   time.Duration `json:"read_ns"`   // summed over reader goroutines
	Verify time.Duration `json:"verify_ns"` // payload checksums
	// HostDecode is entropy payloads decoded on the host (which checks
	// them), summed over goroutines.
	HostDecode time.Duration `json:"host_decode_ns"`
	Submit     time.Duration `json:"submit_ns"` // enqueueing copies and decodes
	// Prepare is Open's time before the first run: the tensors' specs,
	// the staging plan, the arena's reservation and the staging buffers
	// (pinned on a GPU). Opening the cache's index comes before it.
	Prepare time.Duration `json:"prepare_ns"`
	Checked bool          `json:"checked"`
	// EntropyTensors counts the tensors stored as entropy payloads: read
	// raw from their source, or without it decoded from their payloads
	// (on the device, or on the host: see transport.PayloadOptions).
	EntropyTensors int `json:"entropy_tensors"`
	// Paths counts the tensors uploaded by each path (all runs).
	Paths     map[string]transport.PathCount `json:"paths"`
	Settings  Settings                       `json:"settings"`
	Runs      []RunReport                    `json:"runs"`
	Predicted *Predicted                     `json:"predicted,omitempty"` // with Options.Profile or Cost
	// Unpredicted says why a load with a cost model has no Predicted: a
	// path the model does not price was taken.
	Unpredicted string `json:"unpredicted,omitempty"`
}

// Predicted is what a cost model predicts a run of the load takes from
// the page cache, by the paths its tensors took, beside what the first
// run measured and, with more runs, the fastest of the later ones: what
// calibrate fits the model to (it times loads after one that warms the
// page cache and the staging, and keeps the fastest).
type Predicted struct {
	Host     string  `json:"host"` // the profile's fingerprint
	Seconds  float64 `json:"seconds"`
	Measured float64 `json:"measured_seconds"` // the first run's wall time
	// Ratio is measured over predicted: above 1, slower than the model
	// says (a cold page cache, a busy host, a stale profile).
	Ratio float64 `json:"measured_over_predicted"`
	// Fastest is the fastest run after the first (none with one run),
	// FastestRatio it over predicted: the model's own terms.
	Fastest      float64 `json:"fastest_seconds,omitempty"`
	FastestRatio float64 `json:"fastest_over_predicted,omitempty"`
}

// predict is profile p's time for one run whose tensors took paths, of
// which those of at most transport.DefaultSmallBytes took small (all
// summed over runs runs): each path's cost is a time a tensor plus its
// bytes at a rate, a small tensor's at the small pair, so counts and
// bytes suffice.
func predict(p *costmodel.Profile, paths, small [transport.NumPaths]transport.PathCount, runs int) float64 {
	// PathEntropyHost is not priced (Report.Unpredicted); packed entropy
	// payloads are all small ones.
	kinds := [transport.NumPaths]costmodel.Kind{costmodel.Raw, costmodel.Fixed, costmodel.Entropy, costmodel.Entropy, costmodel.Entropy}
	price := func(c transport.PathCount, k costmodel.Cost) float64 {
		if c.Tensors == 0 {
			return 0
		}
		return float64(c.Tensors)*k.Tensor + float64(c.Bytes)/k.Rate
	}
	var s float64
	for k, c := range paths {
		c.Tensors -= small[k].Tensors
		c.Bytes -= small[k].Bytes
		large := transport.Path(k) != transport.PathEntropyPacked
		s += price(c, p.Pair(kinds[k], !large)) + price(small[k], p.Pair(kinds[k], true))
	}
	return s / float64(max(runs, 1))
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
	// CostModel: tensors the host's cost model predicted to load faster
	// raw were read raw from their source where it was there (Options.Cost).
	CostModel bool `json:"cost_model,omitempty"`
	// ReadThrough: small payloads' tensors were read through from their
	// source with their raw neighbours (Options.ReadThrough).
	ReadThrough bool `json:"read_through,omitempty"`
}

// Load is a checkpoint laid out in a weight arena on an engine, with the
// transports that fault its tensors in. Run faults every tensor in; runs
// after the first evict everything first, so a benchmark can repeat them.
type Load struct {
	eng    engine.Engine
	c      *shardcache.Cache
	src    *shardcache.Source
	opts   Options
	arena  *vmm.Arena
	ts     *Transports
	store  *transport.Store
	bs     []*vmm.Binding
	groups [][]*vmm.Binding
	first  int
	rep    Report
}

// Open lays the tensors of a cached source out in an arena on eng and
// builds the transports that fault them in, with their staging set up
// (nothing is read yet). Close frees them.
func Open(eng engine.Engine, c *shardcache.Cache, src *shardcache.Source, opts Options) (*Load, error) {
	t0 := time.Now()
	if st, ok := eng.(engine.Stager); ok && opts.PinnedLimit == 0 && !c.Remote() {
		// The engine's own default cap (a remote cache's wants depth).
		readers := opts.Readers
		if readers == 0 {
			readers = DefaultReaders()
		}
		opts.PinnedLimit = st.StagingLimit(readers)
	}
	specs, stage, small, err := plan(c, src, &opts)
	if err != nil {
		return nil, err
	}
	if opts.PinnedLimit >= 0 {
		opts.PinnedLimit = int64(stage.Limit)
	}
	arena, err := vmm.New(eng, specs, 0)
	if err != nil {
		return nil, err
	}
	ts, err := newTransports(eng, c, stage, opts, small)
	if err != nil {
		arena.Close()
		return nil, err
	}
	l := &Load{eng: eng, c: c, src: src, opts: opts, arena: arena, ts: ts, store: transport.NewStore(eng, ts.Transport())}
	l.rep = Report{Device: eng.Name(), Mode: ts.Mode(), ArenaBytes: arena.Size(), Shared: ts.Shared(),
		Settings: Settings{Readers: opts.Readers, Ahead: opts.Ahead, SmallBytes: small, PinnedLimit: opts.PinnedLimit,
			EntropyOnHost: opts.EntropyOnHost, EntropyFromSource: opts.EntropyFromSource, CostModel: opts.Cost != nil, ReadThrough: opts.ReadThrough}}
	for _, b := range arena.Bindings() {
		if opts.only == nil || opts.only(b) {
			l.bs = append(l.bs, b)
			l.rep.RawBytes += b.Size
		}
	}
	l.rep.Tensors = len(l.bs)
	for _, sh := range src.Shards {
		for _, t := range sh.Tensors {
			if t.Stored == shardcache.StoredEntropy {
				l.rep.EntropyTensors++
			}
		}
	}
	l.groups, l.first = layerGroups(l.bs, opts.FirstGroup)
	l.rep.Prepare = time.Since(t0)
	return l, nil
}

// Run faults every tensor in (evicting them first when a run before did)
// and waits for them: group by group, Options.Ahead groups at once, so
// the first layer is ready while later ones still arrive. When ctx ends,
// Run stops starting reads, waits for what was submitted and returns
// ctx's error.
func (l *Load) Run(ctx context.Context) (RunReport, error) {
	if len(l.rep.Runs) > 0 {
		l.store.Evict(l.bs...)
	}
	timer, timed := l.eng.(engine.Timer)
	timed = timed && l.opts.DeviceTimes
	if timed {
		if err := timer.StartTiming(); err != nil {
			return RunReport{}, err
		}
	}
	groups := l.groups
	t0 := time.Now()
	firstReady := make(chan time.Duration, 1)
	perGroup := make([][]transport.Fence, len(groups))
	next := make(chan int)
	var wg sync.WaitGroup
	for range l.opts.Ahead {
		wg.Go(func() {
			for gi := range next {
				fs := l.store.FaultIn(ctx, groups[gi])
				perGroup[gi] = fs
				if l.opts.Progress != nil {
					var n uint64
					for _, b := range groups[gi] {
						n += b.Size
					}
					l.opts.Progress(n)
				}
				if gi == l.first {
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
			return RunReport{}, ctx.Err()
		}
		return RunReport{}, err
	}
	first := <-firstReady
	if d, ok := l.eng.(engine.DecodeErrorer); ok {
		if err := d.DecodeErrors(); err != nil {
			return RunReport{}, err
		}
	}
	wall := time.Since(t0)
	rr := RunReport{Wall: wall, GBps: float64(l.rep.RawBytes) / wall.Seconds() / 1e9, FirstLayer: first,
		PerTensor: wall / time.Duration(max(len(l.bs), 1))}
	if timed {
		var err error
		if rr.Device, err = timer.TakeTimes(); err != nil {
			return RunReport{}, err
		}
	}
	l.rep.Runs = append(l.rep.Runs, rr)
	return rr, nil
}

// Check reads the run's tensors back from the arena and compares them
// with the source.
func (l *Load) Check() error {
	if err := transport.CheckArenaOf(l.eng, l.c, l.bs, l.src); err != nil {
		return err
	}
	l.rep.Checked = true
	return nil
}

// Arena is the weight arena the tensors are faulted into.
func (l *Load) Arena() *vmm.Arena { return l.arena }

// Report returns what the load did so far: its runs, and what the
// transports read, checked, submitted, moved and pinned.
func (l *Load) Report() *Report {
	r := l.rep
	r.Runs = append([]RunReport(nil), l.rep.Runs...)
	t := l.ts.Transport()
	s := t.Stats()
	r.Read, r.Verify, r.HostDecode, r.Submit, r.MovedBytes = s.Read, s.Verify, s.HostDecode, s.Submit, s.Bytes
	r.Paths = map[string]transport.PathCount{}
	for k, c := range s.Paths {
		if c.Tensors > 0 {
			r.Paths[transport.Path(k).String()] = c
		}
	}
	p := l.opts.profile()
	switch {
	case p == nil:
	case s.Paths[transport.PathEntropyHost].Tensors > 0:
		// calibrate measures entropy payloads decoded on the device only.
		r.Unpredicted = "the cost model does not price entropy payloads decoded on the host"
	case p.SmallBytes != transport.DefaultSmallBytes:
		// The load counts small tensors at this build's threshold.
		r.Unpredicted = fmt.Sprintf("the cost model's small tensors are those of at most %d bytes, this build's %d", p.SmallBytes, transport.DefaultSmallBytes)
	case r.Settings.SmallBytes < 0:
		// Its small pairs are of packed tensors.
		r.Unpredicted = "the cost model prices small tensors as packed, and this load packs none (--small-bytes)"
	case len(r.Runs) > 0:
		pr := &Predicted{Host: p.Host, Seconds: predict(p, s.Paths, s.Small, len(r.Runs)), Measured: r.Runs[0].Wall.Seconds()}
		for _, run := range r.Runs[1:] {
			if w := run.Wall.Seconds(); pr.Fastest == 0 || w < pr.Fastest {
				pr.Fastest = w
			}
		}
		if pr.Seconds > 0 {
			pr.Ratio = pr.Measured / pr.Seconds
			pr.FastestRatio = pr.Fastest / pr.Seconds
		}
		r.Predicted = pr
	}
	r.PinnedBytes = t.PinnedBytes()
	if d, ok := t.(interface{ DeviceBytes() uint64 }); ok {
		r.DeviceBytes = d.DeviceBytes()
	}
	return &r
}

// Close frees the transports and the arena.
func (l *Load) Close() error {
	err := l.ts.Close()
	if aerr := l.arena.Close(); err == nil {
		err = aerr
	}
	return err
}

// Checkpoint loads a cached source onto eng once (Open, Run, and with
// Options.Check, Check) and returns the report; everything is freed
// before it returns.
func Checkpoint(ctx context.Context, eng engine.Engine, c *shardcache.Cache, src *shardcache.Source, opts Options) (*Report, error) {
	l, err := Open(eng, c, src, opts)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	if _, err := l.Run(ctx); err != nil {
		return nil, err
	}
	if opts.Check {
		if err := l.Check(); err != nil {
			return nil, err
		}
	}
	return l.Report(), nil
}

// layerGroups splits bindings by layer ("model.layers.N." prefixes, in
// order of N), with the others (embeddings, final norm, head) first, and
// returns the index of the group FirstGroup selects.
func layerGroups(bs []*vmm.Binding, firstOf func(string) bool) ([][]*vmm.Binding, int) {
	byLayer := map[int][]*vmm.Binding{}
	var rest []*vmm.Binding
	for _, b := range bs {
		if n, ok := transport.LayerOf(b.Name); ok {
			byLayer[n] = append(byLayer[n], b)
			continue
		}
		rest = append(rest, b)
	}
	groups := [][]*vmm.Binding{rest}
	first := 0
	for _, n := range slices.Sorted(maps.Keys(byLayer)) {
		g := byLayer[n]
		if first == 0 && firstOf(g[0].Name) {
			first = len(groups)
		}
		groups = append(groups, g)
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
