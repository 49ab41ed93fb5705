package load

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/splitzip/splitzip/costmodel"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/transport"
	"github.com/splitzip/splitzip/vmm"
)

// DefaultReaders is how many goroutines read files by default: half the
// cores the process may use (GOMAXPROCS: a container's quota), between 2
// and 8. On the 16-core H200 host (2026-12-01, bench load
// of 1.6 GB and 6 GB checkpoints from page cache, readers 2 to 32 by
// streams 1 to 4) 8 readers and 2 streams came within 3% of the best of
// the sweep for raw and compressed loads of both, where 16 readers gave
// 77-96%: past 8, readers compete for memory bandwidth. Every front end
// (the CLI, the C ABI and Python, several GPUs) uses it.
func DefaultReaders() int { return min(8, max(2, runtime.GOMAXPROCS(0)/2)) }

// RemoteReaders is how many goroutines read a remote cache (one streamed
// by ranged GETs, shardcache.OpenRemote) by default, whatever the cores:
// they wait on the network (their piece reads, up to two a reader, go out
// as ranged GETs, at most 32 in flight a cache: package oci). With
// RemotePinnedLimit, streaming an 8 GiB Llama shape from a loopback S3
// server on the H100 host (2026-12-06, 16 MiB pieces) went from fixed
// 17.2-17.5 GB/s and entropy 15.9 (8 readers, 256 MiB) to 19.2-20.5 and
// 21.9-22.2; raw caches gained nothing (16.0-16.6, the GET rate).
const RemoteReaders = 16

// RemotePinnedLimit is the default cap on the pinned staging of a load
// of a remote cache (of each engine's transports: each device of a
// multi-device load, each upload stream of a loader), four times the
// local default: 16 MiB pieces for RemoteReaders' reads in flight and
// copies still queued (on a large checkpoint about 28 pieces beside the
// raw and pack rings).
const RemotePinnedLimit = 1 << 30

// DefaultStreams is how many upload streams an engine made for a load
// uses by default (see DefaultReaders for the measurement).
const DefaultStreams = 2

// DefaultAhead is how many layer groups a load faults in at once.
const DefaultAhead = 8

// DefaultSmallBytes is the packing threshold of a local load that keeps
// nothing resident, by default: tensors stored in up to 2 MiB travel
// several to a copy and one scatter launch (transport.MaxSmallBytes). On
// the H100 host (2026-12-06, first loads from the page cache, this
// threshold against 256 KiB, transport.DefaultSmallBytes, in the same
// call) a 48-layer MoE (9,555 tensors, 1.8-2.4 MB payloads) went from
// 34.8-39.8 GB/s to 51.5-55.5 (raw 35.4-36.6 to 37.6-39.4), the
// 4,000-tensor size mix from 25.9-30.7 to 44.4-48.4 (raw, packed too:
// 24.9-27.9 to 35.9-39.9), an 8 GiB Llama shape from 59.7-59.8 to
// 63.5-64.0, real weights within their noise. Resident loads (pinned,
// shared or the device tier) and remote caches keep 256 KiB: their
// re-faults and streamed GETs were not measured at 2 MiB, and the device
// tier holds only payloads above the threshold. Entropy payloads are
// packed (and decoded by one batch launch a pack) by their tensors' size
// against the same threshold: up to 2 MiB, face-api's entropy cache loaded
// 0.75-0.98x raw against 0.55-0.74x up to 256 KiB (H100, 6 rounds in
// turns, docs/perf/LOG.md).
const DefaultSmallBytes = transport.MaxSmallBytes

// Options configures a load. The zero value loads through the payload
// transport with the defaults above.
type Options struct {
	Raw bool // the raw transport only
	// Resident keeps what a fault reads in pinned memory (payloads, and
	// raw tensors' bytes), so a later fault of the same tensor reads no
	// file and checks nothing again: an offload runtime's pinned tier.
	Resident bool
	// DeviceResident keeps the streamed payloads compressed in device
	// memory (the small ones in pinned memory), so re-faults copy within
	// the device and decode (not with Raw or Resident).
	DeviceResident bool
	// ResidentPacks, with Resident, keeps the payloads of each layer
	// group side by side in pinned regions, re-faulted a region at a time
	// (transport.PayloadOptions.ResidentPacks); with Raw, the bytes of
	// tensors side by side in the arena, re-faulted a run at a time with
	// one copy (transport.RawOptions.ResidentRuns).
	ResidentPacks bool
	// Share, with Resident (not Raw), keeps the resident copies of the
	// payloads in one host copy that the processes of this machine
	// loading the same payloads share (package nodeshare): the first
	// process reads and checks them all into it before its first fault,
	// and later ones attach to it, reading and pinning none of them
	// (small entropy payloads, packed, are still read from the cache;
	// raw tensors keep their own resident copies).
	Share bool
	// ShareDir is the folder of the shared copies' holders files ("":
	// nodeshare.DefaultDir()).
	ShareDir string
	// EntropyOnHost decodes entropy payloads whose source is absent on
	// the host (transport.PayloadOptions.HostEntropy).
	EntropyOnHost bool
	// EntropyFromSource reads entropy tensors raw from their source when
	// it is there (transport.PayloadOptions.EntropyFromSource).
	EntropyFromSource bool
	// Cost reads a tensor raw from its source, where that is there, when
	// the cost model predicts that loads faster than its payload
	// (transport.PayloadOptions.Cost); nil: never.
	Cost *costmodel.Profile
	// ReadThrough takes small payloads' tensors raw from their source
	// where the reads of their raw neighbours take their bytes along
	// (transport.PayloadOptions.ReadThrough).
	ReadThrough bool
	// Profile, when set, predicts what the load takes by the paths its
	// tensors took (Report.Predicted); it changes nothing of the load.
	// With Cost, that profile is used.
	Profile *costmodel.Profile
	// Check reads the arena back after Checkpoint's load and compares it
	// with the source.
	Check   bool
	Readers int // reader goroutines (0: DefaultReaders; RemoteReaders for a remote cache)
	// SmallBytes is the packing threshold (see
	// transport.RawOptions.SmallBytes): 0 is DefaultSmallBytes, or
	// transport.DefaultSmallBytes with Resident, DeviceResident or a
	// remote cache.
	SmallBytes int64
	// PinnedLimit caps the pinned staging buffers (not resident bytes):
	// 0 means transport.DefaultPinnedLimit (RemotePinnedLimit for a
	// remote cache), negative means no cap.
	PinnedLimit int64
	// DeviceTimes times copies and decodes on the device (engines that
	// implement engine.Timer), at the cost of two events per operation.
	DeviceTimes bool
	// Ahead is how many layer groups are faulted in at once, as a loader
	// prefetching layers would (0: DefaultAhead). More keeps more reads
	// in flight; fewer makes the first layer ready sooner.
	Ahead int
	// FirstGroup names the bindings whose readiness is reported as the
	// first layer (default: names starting with "model.layers.0.").
	FirstGroup func(name string) bool
	// Progress, if set, is called from several goroutines with the tensor
	// bytes of each layer group once its reads and submissions are done.
	Progress func(n uint64)

	// only, when set, selects the bindings a run faults in (and Check
	// compares): Devices gives each device its part.
	only func(b *vmm.Binding) bool
}

// resolve checks o and fills in its defaults for a load from c (a remote
// cache has defaults of its own); it returns the packing threshold in
// effect.
func (o *Options) resolve(c *shardcache.Cache) (int64, error) {
	switch {
	case o.Ahead < 0:
		return 0, badOption("Ahead", o.Ahead, "0 (default) or more")
	case o.Readers < 0:
		return 0, badOption("Readers", o.Readers, "0 (default) or more")
	case o.DeviceResident && (o.Raw || o.Resident):
		return 0, badOption("DeviceResident", true, "without Raw and Resident (the device tier holds payloads)")
	case o.ResidentPacks && !o.Resident:
		return 0, badOption("ResidentPacks", true, "with Resident")
	case o.Share && (!o.Resident || o.Raw):
		return 0, badOption("Share", true, "with Resident and without Raw (it shares payloads)")
	}
	small, err := transport.ResolveSmallBytes(o.SmallBytes)
	if err != nil {
		return 0, err
	}
	if o.Ahead == 0 {
		o.Ahead = DefaultAhead
	}
	remote := c != nil && c.Remote()
	if o.SmallBytes == 0 && !o.Resident && !o.DeviceResident && !remote {
		small = DefaultSmallBytes
	}
	switch {
	case o.Readers == 0 && remote:
		o.Readers = RemoteReaders
	case o.Readers == 0:
		o.Readers = DefaultReaders()
	}
	if o.PinnedLimit == 0 && remote {
		o.PinnedLimit = RemotePinnedLimit
	}
	if o.FirstGroup == nil {
		o.FirstGroup = func(n string) bool { return strings.HasPrefix(n, "model.layers.0.") }
	}
	return small, nil
}

// streamed says the load keeps nothing resident, in host or device
// memory: it streams every tensor it reads from the cache through the
// staging rings (transport.PlanStaging).
func (o *Options) streamed() bool {
	return !o.Raw && !o.Resident && !o.ResidentPacks && !o.DeviceResident
}

// badOption returns a transport.ErrOption naming the option and its value.
func badOption(name string, v any, want string) error {
	return fmt.Errorf("%w: %s is %v, want %s", transport.ErrOption, name, v, want)
}

// profile is the cost model that predicts the load: Profile, else Cost.
func (o *Options) profile() *costmodel.Profile {
	if o.Profile != nil {
		return o.Profile
	}
	return o.Cost
}
