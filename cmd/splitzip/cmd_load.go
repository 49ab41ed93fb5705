package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/splitzip/splitzip/costmodel"
	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/engine/cudaengine"
	"github.com/splitzip/splitzip/engine/hostengine"
	"github.com/splitzip/splitzip/internal/failure"
	"github.com/splitzip/splitzip/internal/loadbench"
	"github.com/splitzip/splitzip/load"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/transport"
)

// loadOptions are the flags of load.
type loadOptions struct {
	remoteOptions
	Device        string
	Raw           bool
	Resident      bool
	ResidentPacks bool // with Resident: payloads side by side in pinned regions (default on)
	Share         bool // with Resident: the payloads' copies shared by this machine's processes
	Hold          time.Duration
	// DeviceResident keeps payloads in device memory (raw loads of a
	// comparison keep theirs in pinned memory).
	DeviceResident bool
	Repeat         int
	Check          bool
	Compare        int
	Source         string
	Readers        int
	Streams        int
	Small          int64
	Ahead          int
	Times          bool
	Pinned         string
	// pinnedUnset: --pinned-limit was not given; the load's default
	// (which depends on the cache) applies.
	pinnedUnset bool
	// holdSet: --hold was given (0 then means nothing, and is refused);
	// residentOff: --resident=false was given (which --share contradicts);
	// peerSet: --peer was given (which only --devices reads); deviceSet:
	// --device was given (which --devices replaces); packsSet:
	// --resident-packs was given (which only resident loads read).
	holdSet, residentOff, peerSet, deviceSet, packsSet bool

	EntropyOnHost bool
	FromSource    bool
	ReadThrough   bool
	Cost          bool
	// Devices and Peer: load onto several devices (cmd_load_devices.go).
	Devices string
	Peer    bool
}

func newLoadCommand(g *globals) *cobra.Command {
	var o loadOptions
	cmd := &cobra.Command{
		Use:   "load CACHE",
		Short: "Fault a cached checkpoint into a device weight arena and time it",
		Long: `Build a weight arena for the whole checkpoint on a device and fault every
tensor in through the payload transport (payloads read into pinned memory,
verified, copied and decoded in place on the GPU) or, with --raw, the raw
transport. Reports effective GB/s (raw tensor bytes per wall second), the
time until the first layer is ready, time spent reading, verifying,
decoding on the host (--entropy-on-host) and submitting (summed over
goroutines and runs), pinned memory and arena size. --compare N alternates raw and
compressed loads N times in one process and prints the ratio: after one
load of each kind that is not counted (with --check, the checked one), each
round loads both, the first starting with raw and the kinds taking turns
to start, the heap collected before each load.

A remote CACHE (s3://bucket/prefix[:tag] or oci://registry/repository:tag) is
streamed: payloads and packs are read by ranged GETs of their blobs into
pinned staging as the load asks for them, with no local copy (--check
compares every tensor with its content key). With --local-cache DIR it is
pulled into DIR first (kept; a later run fetches only what DIR lacks) and
loaded from there; the pull is not part of the times reported.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			return flagError(runLoad(cmd.Context(), g, o.withDefaults(cmd.Flags()), a[0]))
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.Raw, "raw", false, "use the raw transport only")
	f.BoolVar(&o.Resident, "resident", false, "keep payloads (raw bytes with --raw) in pinned memory: later repeats read no file")
	f.BoolVar(&o.Share, "share", false, "keep the payloads' resident copies in one host copy that processes on this machine loading the same payloads share: the first reads and checks them all into it, later ones attach and read none (implies --resident; not with --raw, --compare, --device-resident or --resident=false)")
	f.DurationVar(&o.Hold, "hold", 0, "with --share: keep the shared host copy held for this long after the loads, for other processes to attach to (an interrupt ends the hold early, exit 0)")
	f.BoolVar(&o.DeviceResident, "device-resident", false, "keep payloads compressed in device memory: later repeats copy within the device and decode in place (small ones stay in pinned memory); not with --raw or --resident")
	f.IntVar(&o.Repeat, "repeat", 1, "fault everything in this many times, evicting in between")
	f.BoolVar(&o.Check, "check", false, "read the arena back after the first load and compare it with the content keys recorded at compress time and, where it is there, with the source")
	f.IntVar(&o.Compare, "compare", 0, "alternate raw and compressed loads this many times, after an uncounted load of each, and print the ratio")
	f.StringVar(&o.Devices, "devices", "", "load onto every one of these GPU ordinals (comma separated; cpu for host engines) instead of --device")
	f.BoolVar(&o.Peer, "peer", true, "with --devices: each device loads a part and copies the others from their devices (peer copies); false: each loads everything over its own link")
	o.addRuntimeFlags(f)
	atLeast(f, "repeat", 1, "")
	atLeast(f, "compare", 1, "omit --compare for a single load")
	o.remoteOptions.addFlags(cmd)
	remoteArg(cmd, 0)
	return cmd
}

// addRuntimeFlags adds the flags load and bench load share.
func (o *loadOptions) addRuntimeFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Device, "device", "0", "GPU ordinal, or cpu for the host implementation")
	f.StringVar(&o.Source, "source", "", "source to load: a recorded root (when the cache holds several), or the directory a moved source is in now")
	f.IntVar(&o.Readers, "readers", load.DefaultReaders(), fmt.Sprintf("reader goroutines per transport (half the cores this process may use, 2 to 8, by default; %d for a remote cache streamed)", load.RemoteReaders))
	f.IntVar(&o.Streams, "streams", load.DefaultStreams, "upload streams")
	f.IntVar(&o.Ahead, "ahead", load.DefaultAhead, "layer groups faulted in at once (a loader prefetching layers)")
	f.BoolVar(&o.Times, "device-times", false, "time copies and decodes on the device with CUDA events (two events per operation; on the H200 this costs up to a quarter of a many-tensor load's rate)")
	f.StringVar(&o.Pinned, "pinned-limit", fmt.Sprintf("%dMiB", transport.DefaultPinnedLimit>>20), fmt.Sprintf("cap on pinned staging memory (not resident bytes; %dMiB for a remote cache streamed; with --device cpu, 24MiB a reader, at least 48MiB); 0 for none; at least the smallest staging the other settings need (40 MiB with the defaults)", load.RemotePinnedLimit>>20))
	f.Int64Var(&o.Small, "small-bytes", 0, "pack tensors stored in at most this many bytes several to a copy (0: 2 MiB less 64 bytes for loads from local files that keep no copy resident, else 256 KiB; -1: never; entropy payloads by their tensors' size, packed and decoded by one launch a pack)")
	f.BoolVar(&o.EntropyOnHost, "entropy-on-host", false, "decode entropy payloads on the host, not on the device after their upload")
	f.BoolVar(&o.FromSource, "entropy-from-source", false, "read entropy-coded tensors raw from their source where it is there, not from their payloads (a corrupt payload then goes unnoticed)")
	f.BoolVar(&o.ReadThrough, "read-through", false, "take a small payload's tensor raw from its source, where that is there, when the load reads its bytes anyway with its raw neighbours (its payload then not read or checked)")
	f.BoolVar(&o.Cost, "cost", false, "read tensors raw from their source, where it is there, when this host's cost model (splitzip calibrate) predicts that loads faster than their payloads (small tensors; a corrupt payload of theirs then goes unnoticed)")
	atLeast(f, "readers", 1, "")
	atLeast(f, "streams", 1, "")
	atLeast(f, "ahead", 1, "")
	atLeast(f, "small-bytes", -1, "-1 turns packing off, 0 is the default")
	f.BoolVar(&o.ResidentPacks, "resident-packs", true, "with --resident: keep each layer group's payloads side by side in pinned regions of up to 16 MiB, re-faulted with one copy and one scatter launch a region (raw: runs of tensors adjacent in the arena, one copy a run)")
}

// withDefaults returns o with the flags whose defaults depend on the
// cache (a remote cache streamed has its own: load.RemoteReaders,
// load.RemotePinnedLimit) marked unset (--readers 0) where the command
// line did not set them, for the load to fill in.
func (o loadOptions) withDefaults(f *pflag.FlagSet) loadOptions {
	if !f.Changed("readers") {
		o.Readers = 0
	}
	o.pinnedUnset = !f.Changed("pinned-limit")
	o.holdSet = f.Changed("hold")
	o.residentOff = f.Changed("resident") && !o.Resident
	o.peerSet = f.Changed("peer")
	o.deviceSet = f.Changed("device")
	o.packsSet = f.Changed("resident-packs")
	return o
}

func (o loadOptions) engine() (engine.Engine, error) { return o.engineFor("--device", o.Device) }

// engineFor opens the engine of device dev (a GPU ordinal, or cpu), named
// by flag in errors.
func (o loadOptions) engineFor(flag, dev string) (engine.Engine, error) {
	if dev == "cpu" {
		if o.Streams <= 1 { // decodes beside the stream, as cudaengine.New's
			return hostengine.New(o.Streams, hostengine.WithDecodeStreams()), nil
		}
		return hostengine.New(o.Streams), nil
	}
	n, err := strconv.Atoi(dev)
	if err != nil || n < 0 {
		return nil, usageError{fmt.Errorf("%s must be a GPU ordinal or cpu, got %q", flag, dev)}
	}
	ctx, err := openGPU(n) // for its clear error when there is no GPU
	if err != nil {
		if failure.KindOf(err) == failure.Device {
			return nil, fmt.Errorf("%w (%s cpu runs on the host implementation)", err, flag)
		}
		return nil, err
	}
	ctx.Close()
	return cudaengine.New(n, o.Streams)
}

// loadFlags names the options of a load (packages load and transport) by
// the flags that set them, for the messages of the options they refuse.
var loadFlags = strings.NewReplacer("DeviceResident", "--device-resident", "ResidentPacks", "--resident-packs",
	"PinnedLimit", "--pinned-limit", "SmallBytes", "--small-bytes", "Readers", "--readers", "Ahead", "--ahead",
	"Raw and Resident", "--raw and --resident", "with Resident", "with --resident")

// flagError turns an option a load refused (transport.ErrOption) into a
// usage error that names its flag, not the Go field behind it.
func flagError(err error) error {
	if err == nil || !errors.Is(err, transport.ErrOption) {
		return err
	}
	return usageError{errors.New(loadFlags.Replace(strings.TrimPrefix(err.Error(), transport.ErrOption.Error()+": ")))}
}

// maxReaders and maxStreams bound --readers and --streams: each reader is
// a goroutine with its own staging, each stream a CUDA stream with its
// own decoder, far past where either pays.
const maxReaders, maxStreams = 256, 64

func runLoad(ctx context.Context, g *globals, o loadOptions, dir string) (err error) {
	if o.Repeat < 1 || o.Readers < 0 || o.Streams < 1 || o.Compare < 0 || o.Ahead < 1 {
		return usageError{fmt.Errorf("--repeat, --readers (when given), --streams and --ahead must be at least 1")}
	}
	if o.Readers > maxReaders || o.Streams > maxStreams {
		if o.Readers > maxReaders {
			return usageError{fmt.Errorf("--readers must be at most %d, got %d", maxReaders, o.Readers)}
		}
		return usageError{fmt.Errorf("--streams must be at most %d, got %d", maxStreams, o.Streams)}
	}
	var pinnedLimit int64 // 0: the load's default
	if !o.pinnedUnset {
		pinned, err := parseSize(o.Pinned)
		if err != nil {
			return usageError{fmt.Errorf("--pinned-limit: %v", err)}
		}
		pinnedLimit = int64(pinned)
		if pinned == 0 {
			pinnedLimit = -1
		}
	}
	if o.Raw {
		for _, f := range []struct {
			on         bool
			name, does string
		}{{o.EntropyOnHost, "--entropy-on-host", "chooses how payloads load"}, {o.FromSource, "--entropy-from-source", "chooses how payloads load"},
			{o.Cost, "--cost", "chooses how payloads load"}, {o.ReadThrough, "--read-through", "chooses how payloads load"},
			{o.Compare > 0, "--compare", "alternates raw and compressed loads"}} {
			if f.on {
				return usageError{fmt.Errorf("%s %s: not with --raw", f.name, f.does)}
			}
		}
	}
	if o.Cost && o.EntropyOnHost {
		return usageError{fmt.Errorf("--cost weighs entropy payloads decoded on the device, which calibrate measures: not with --entropy-on-host")}
	}
	if o.EntropyOnHost && o.FromSource {
		return usageError{fmt.Errorf("--entropy-on-host decodes entropy payloads, --entropy-from-source reads their tensors raw instead: choose one")}
	}
	if o.Small > transport.MaxSmallBytes {
		return usageError{fmt.Errorf("--small-bytes is at most %d (a pack holds two tensors or more)", transport.MaxSmallBytes)}
	}
	if o.DeviceResident && (o.Raw || o.Resident) {
		return usageError{errors.New("--device-resident keeps payloads compressed in device memory: not with --raw or --resident")}
	}
	if o.Share {
		if o.Raw || o.Compare > 0 || o.DeviceResident || o.residentOff {
			return usageError{fmt.Errorf("--share shares payloads' resident copies: not with --raw, --compare, --device-resident or --resident=false")}
		}
		o.Resident = true
	}
	if (o.holdSet || o.Hold != 0) && !o.Share {
		return usageError{fmt.Errorf("--hold keeps a shared copy held: only with --share")}
	}
	if o.Hold < 0 || o.holdSet && o.Hold == 0 {
		return usageError{fmt.Errorf("--hold is a positive duration, got %v", o.Hold)}
	}
	if o.packsSet && !o.Resident && !(o.DeviceResident && o.Compare > 0) {
		// Beside --device-resident it lays out only --compare's raw loads,
		// whose bytes are kept pinned.
		return usageError{fmt.Errorf("--resident-packs lays out what a resident load keeps: only with --resident or --share (or --device-resident with --compare, for the raw loads)")}
	}
	if o.peerSet && o.Devices == "" {
		return usageError{fmt.Errorf("--peer chooses how --devices share a load: only with --devices")}
	}
	if o.deviceSet && o.Devices != "" {
		return usageError{fmt.Errorf("--devices names every device of the load: give it or --device, not both")}
	}
	if isRemote(dir) && o.Raw && o.LocalCache == "" {
		return usageError{fmt.Errorf("--raw reads the checkpoint's files: not with a remote cache streamed (pull it, or give --local-cache)")}
	}
	c, sources, done, err := o.open(ctx, g, dir)
	if err != nil {
		return err
	}
	defer done()
	warnBackup(g, errText(c.Damaged()))
	if isRemote(dir) && o.LocalCache == "" {
		// A streamed load reads from the server all along: its network
		// failures are a resource, not a defect.
		defer func() { err = registryError(err) }()
	}
	src, err := c.PickSource(sourceOf(o.Source, sources))
	if err != nil {
		return err
	}
	if o.Devices != "" {
		if o.Cost {
			return usageError{fmt.Errorf("--cost is for one device: not with --devices")}
		}
		return runLoadDevices(ctx, g, o, c, src, pinnedLimit)
	}
	// Opening the GPU and pinning staging memory take seconds: say so.
	p := g.progress()
	p.Start("opening "+o.Device, 0)
	defer p.Finish()
	eng, err := o.engine()
	if err != nil {
		return err
	}
	defer eng.Close()
	var prof, predictor *costmodel.Profile
	if o.Cost {
		if prof, err = hostProfile(ctx, g, o.Device, false); err != nil {
			return err
		}
	} else {
		// The report's prediction, where this host has a cost model; a
		// load without one predicts nothing (calibrate makes it).
		predictor, _ = hostProfile(ctx, g, o.Device, false)
	}
	lo := load.Options{Profile: predictor, Raw: o.Raw, Resident: o.Resident, Share: o.Share, ResidentPacks: o.ResidentPacks && o.Resident, DeviceResident: o.DeviceResident, Check: o.Check, Readers: o.Readers, SmallBytes: o.Small, Ahead: o.Ahead, DeviceTimes: o.Times, EntropyOnHost: o.EntropyOnHost, EntropyFromSource: o.FromSource, ReadThrough: o.ReadThrough, Cost: prof,
		Progress: p.Add, PinnedLimit: pinnedLimit}
	total := sourceBytes(src) * uint64(o.Repeat)
	var held *load.SharedReport
	if o.Hold > 0 {
		// Held from before the loads, so the copy outlives them.
		ts, err := load.Share(eng, c, src, lo)
		if err != nil {
			return flagError(err)
		}
		held = ts.Shared()
		if err := ctx.Err(); err != nil {
			ts.Close()
			return err // interrupted before the hold began: no hold ended early
		}
		defer func() {
			if err == nil {
				holdShared(ctx, g, held, o.Hold)
			}
			err = errors.Join(err, ts.Close())
		}()
	}
	if o.Compare == 0 {
		p.Start("loading", total)
		rep, err := loadbench.Repeat(ctx, eng, c, src, lo, o.Repeat)
		p.Finish()
		if err != nil && o.Raw && errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w (--raw reads every tensor from the source checkpoint, as a plain safetensors load would: it needs the source's files, where a load without --raw serves what the cache holds)", err)
		}
		if err != nil {
			return err
		}
		if testHookAfterLoads != nil {
			testHookAfterLoads()
		}
		if err := ctx.Err(); held != nil && err != nil {
			// Interrupted during the loads, which ended anyway: an
			// interrupt ends a hold early only once it has begun
			// (exit 0 then); before, it stops the run (trial 71).
			return err
		}
		rep.Settings.Streams = o.Streams
		if s := rep.Shared; s != nil && held != nil && s.ID == held.ID {
			// The loads found the copy this process opened for --hold:
			// how that went is the report's.
			s.Made, s.Open, s.Held = held.Made, held.Open, true
		}
		if g.JSON {
			return printJSON(g.stdout, "load", rep)
		}
		printLoad(g, rep)
		return nil
	}
	// mode sets lo for a raw or a compressed load.
	mode := func(raw bool) {
		lo.Raw = raw
		if o.DeviceResident {
			// Raw bytes have no device tier: their repeats come from
			// pinned memory, as an offload runtime's would.
			lo.Resident, lo.DeviceResident = raw, !raw
			lo.ResidentPacks = o.ResidentPacks && raw
		}
	}
	// One load of each kind first, not counted: it pays what only a
	// process's first load of a kind pays (the engine's set-up, kernels
	// loaded, pools grown), which would otherwise fall on whichever kind
	// the first round starts with. With --check it checks the arena.
	checked := o.Check
	for _, raw := range []bool{true, false} {
		mode(raw)
		p.Start(map[bool]string{true: "warming up raw", false: "warming up compressed"}[raw], total/uint64(o.Repeat))
		rep, err := loadbench.Repeat(ctx, eng, c, src, lo, 1)
		p.Finish()
		if err != nil {
			return err
		}
		checked = checked && rep.Checked
	}
	lo.Check = false
	var raws, zips []*load.Report
	for r := range o.Compare {
		for _, raw := range loadbench.Order(r) {
			mode(raw)
			// The last load's garbage is collected now, not during this one.
			runtime.GC()
			p.Start(map[bool]string{true: "loading raw", false: "loading compressed"}[raw], total)
			rep, err := loadbench.Repeat(ctx, eng, c, src, lo, o.Repeat)
			if err != nil {
				return err
			}
			rep.Settings.Streams = o.Streams
			p.Finish()
			if raw {
				raws = append(raws, rep)
			} else {
				zips = append(zips, rep)
			}
			if !g.JSON {
				printLoad(g, rep)
			}
		}
	}
	cmp := loadbench.Compare(raws, zips)
	if g.JSON {
		// checked: --check compared both warm-up loads' arenas.
		return printJSON(g.stdout, "load_compare", map[string]any{"raw": raws, "splitzip": zips, "summary": cmp, "checked": checked})
	}
	if checked {
		fmt.Fprintln(g.stdout, "warm-up loads (not counted): the raw and compressed arenas match the content keys recorded at compress time, and the source bit for bit where it is there")
	}
	rounds := "rounds"
	if o.Compare == 1 {
		rounds = "round"
	}
	fmt.Fprintf(g.stdout, "compare (%d %s, medians; ratio = compressed ÷ raw): first load raw %.1f GB/s, compressed %.1f GB/s, ratio %.3f", o.Compare, rounds, cmp.ColdRaw, cmp.ColdZip, cmp.ColdRatio)
	if cmp.WarmRaw > 0 {
		fmt.Fprintf(g.stdout, "; repeats raw %.1f GB/s, compressed %.1f GB/s, ratio %.3f", cmp.WarmRaw, cmp.WarmZip, cmp.WarmRatio)
	}
	fmt.Fprintln(g.stdout)
	return nil
}

// testHookAfterLoads, where a test sets it, runs when a load's runs have
// ended, before their report (an interrupt at that moment, in tests).
var testHookAfterLoads func()

// holdShared keeps the shared host copy s held (by the caller) for d or
// until ctx ends.
// An interrupt ends a hold as its time does (exit 0): it is how a hold
// without a known end stops. A copy with no payload in it is not held.
func holdShared(ctx context.Context, g *globals, s *load.SharedReport, d time.Duration) {
	if s.Bytes == 0 {
		fmt.Fprintf(g.stderr, "splitzip: warning: not holding the shared host copy: this checkpoint has no payload to share (every tensor is stored raw)\n")
		return
	}
	if !g.JSON {
		fmt.Fprintf(g.stderr, "holding the shared host copy %s (%s) for %v; interrupt to stop\n", s.ID, human(s.Bytes), d)
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	if !g.JSON {
		fmt.Fprintf(g.stderr, "released the shared host copy %s after holding it %v\n", s.ID, time.Since(t0).Round(time.Second))
	}
}

// packing describes the small-tensor packing threshold.
func packing(n int64) string {
	if n < 0 {
		return "no packing"
	}
	return "tensors up to " + human(uint64(n)) + " packed"
}

func printLoad(g *globals, r *load.Report) {
	for i, run := range r.Runs {
		per := "" // none for a checkpoint of no tensors
		if r.Tensors > 0 {
			per = fmt.Sprintf(", %.1f µs a tensor", float64(run.PerTensor)/1e3)
		}
		fmt.Fprintf(g.stdout, "load %-18s %s run %d: %s, %s in %v = %.1f GB/s%s; first layer ready after %v\n",
			r.Mode, r.Device, i+1, count(int(r.Tensors), "tensor"), human(r.RawBytes), run.Wall.Round(time.Microsecond), run.GBps,
			per, run.FirstLayer.Round(time.Microsecond))
		if d := run.Device; d != (engine.DeviceTimes{}) {
			fmt.Fprintf(g.stdout, "  device busy: copies %v, decodes and scatters %v (%v of it with no copy running)\n",
				d.Copy.Round(time.Microsecond), d.Decode.Round(time.Microsecond), d.DecodeAlone.Round(time.Microsecond))
		}
	}
	limit := "no pinned cap"
	if r.Settings.PinnedLimit >= 0 {
		limit = "pinned staging capped at " + human(uint64(r.Settings.PinnedLimit))
	}
	fmt.Fprintf(g.stdout, "  settings: readers %d, streams %d, ahead %d, %s, %s (the defaults follow this machine's %d cores)\n",
		r.Settings.Readers, r.Settings.Streams, r.Settings.Ahead, packing(r.Settings.SmallBytes), limit, runtime.NumCPU())
	check := ""
	if r.Checked {
		check = "; arena matches the content keys recorded at compress time, and the source bit for bit where it is there"
	}
	tier := ""
	if r.DeviceBytes > 0 {
		tier = ", device tier " + human(r.DeviceBytes)
	}
	to, pinned := "the device", "pinned"
	if r.Device == "cpu" { // the host engine: its arena and staging are host memory
		to, pinned = "the arena in host memory", "staging"
	}
	runs := ""
	if len(r.Runs) > 1 {
		runs = fmt.Sprintf(" in %d runs", len(r.Runs))
	}
	fmt.Fprintf(g.stdout, "  prepared in %v (arena, staging); moved %s to %s%s; %s %s%s, arena %s%s\n",
		r.Prepare.Round(time.Microsecond), human(r.MovedBytes), to, runs, pinned, human(r.PinnedBytes), tier, human(r.ArenaBytes), check)
	if s := r.Shared; s != nil {
		how := fmt.Sprintf("attached to another process's in %v", s.Open.Round(time.Millisecond))
		if s.Made {
			how = fmt.Sprintf("made by this process in %v (every payload read and checked into it)", s.Open.Round(time.Millisecond))
		}
		if s.Held {
			how += " before the loads, for --hold"
		}
		if s.Bytes == 0 {
			how = "empty: no tensor of this checkpoint is stored as a payload"
		}
		fmt.Fprintf(g.stdout, "  shared host copy %s of the payloads: %s, %s; %s held it then\n", s.ID, human(s.Bytes), how, count(s.Holders, "process"))
	}
	decoding := ""
	if r.HostDecode > 0 {
		decoding = fmt.Sprintf(", decoding (and so checking) on the host %v", r.HostDecode.Round(time.Microsecond))
	}
	over := "goroutines"
	if len(r.Runs) > 1 {
		over = fmt.Sprintf("goroutines and %d runs", len(r.Runs))
	}
	fmt.Fprintf(g.stdout, "  summed over %s: reading %v, verifying %v%s, submitting %v\n",
		over, r.Read.Round(time.Microsecond), r.Verify.Round(time.Microsecond), decoding, r.Submit.Round(time.Microsecond))
	if r.EntropyTensors > 0 && !strings.HasPrefix(r.Mode, "raw") {
		fmt.Fprintf(g.stdout, "  %s stored as entropy payloads: %s\n", count(r.EntropyTensors, "tensor"), entropyPaths(r))
	}
	if r.Unpredicted != "" {
		fmt.Fprintf(g.stdout, "  no prediction: %s\n", r.Unpredicted)
	}
	if p := r.Predicted; p != nil && len(r.Paths) > 0 {
		var by []string
		for _, k := range [...][2]string{{"raw", "raw"}, {"fixed", "fixed"}, {"entropy", "entropy"}, {"entropy_host", "entropy on the host"}, {"entropy_packed", "entropy packed"}} {
			if n := perRun(r, k[0]); n > 0 {
				by = append(by, fmt.Sprintf("%s %d", k[1], n))
			}
		}
		fastest := ""
		if p.Fastest > 0 {
			// What calibrate fits the model to: warm runs, the fastest.
			fastest = fmt.Sprintf(", the fastest later run %.2fx", p.FastestRatio)
		}
		fmt.Fprintf(g.stdout, "  cost model (%s) predicted %v a run from the page cache in a warm process; run 1 took %.2fx that%s (tensors by path: %s)\n",
			p.Host, time.Duration(p.Seconds*1e9).Round(time.Microsecond), p.Ratio, fastest, strings.Join(by, ", "))
	}
}

// sourceBytes returns the raw bytes of a source's tensors.
func sourceBytes(src *shardcache.Source) uint64 {
	var n uint64
	for _, sh := range src.Shards {
		for _, t := range sh.Tensors {
			n += t.Size
		}
	}
	return n
}

// entropyPaths says how a load's entropy-coded tensors came, from its
// path counts (summed over its runs): streamed and decoded one by one,
// packed and decoded by one launch a pack, decoded on the host, or, the
// rest, read raw from their source. (A version 1 payload, which no
// device decodes, is counted by the path it was sent down, streamed or
// packed, though the host decodes it.)
func entropyPaths(r *load.Report) string {
	engine, packed := "the device", "one launch a pack"
	if r.Device == "cpu" {
		engine, packed = "the host engine", "a pack at a time"
	}
	var parts []string
	seen := uint64(0)
	for _, p := range [...][2]string{
		{"entropy", "streamed and decoded by " + engine + " one by one"},
		{"entropy_packed", "packed and decoded by " + engine + ", " + packed},
		{"entropy_host", "decoded on the host"},
	} {
		if n := perRun(r, p[0]); n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, p[1]))
			seen += n
		}
	}
	if rest := uint64(r.EntropyTensors) - min(seen, uint64(r.EntropyTensors)); rest > 0 {
		parts = append(parts, fmt.Sprintf("%d read raw from their source", rest))
	}
	return strings.Join(parts, ", ")
}

// perRun is the tensors a run of load r uploaded by path (r.Paths sums
// its runs).
func perRun(r *load.Report, path string) uint64 {
	return r.Paths[path].Tensors / uint64(max(len(r.Runs), 1))
}
