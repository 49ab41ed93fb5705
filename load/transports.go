package load

import (
	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/transport"
	"github.com/splitzip/splitzip/vmm"
)

// Staging plans the pinned staging of a load of specs from c under o
// (its readers, packing threshold and pinned limit, defaults resolved):
// what the tensors need, at most two buffers a reader, all within the
// limit (transport.PlanStaging).
func Staging(c *shardcache.Cache, specs []vmm.Spec, o Options) (transport.Staging, error) {
	small, err := o.resolve()
	if err != nil {
		return transport.Staging{}, err
	}
	return transport.PlanStaging(c, specs, o.Readers, small, o.Raw, o.PinnedLimit)
}

// Transports are what one engine uploads a checkpoint through: the raw
// transport, and unless Options.Raw the payload transport over it, with
// their pinned staging set up. Every front end builds them here, so that
// a load from the CLI, from the C ABI and onto several GPUs runs the same
// stack with the same defaults.
type Transports struct {
	raw  *transport.Raw
	zip  *transport.Payloads
	mode string
}

// NewTransports builds the transports of a load on eng with the staging
// plan stage (from Staging with the same options) and sets their staging
// buffers up, so that the first fault pins nothing.
func NewTransports(eng engine.Engine, c *shardcache.Cache, stage transport.Staging, o Options) (*Transports, error) {
	small, err := o.resolve()
	if err != nil {
		return nil, err
	}
	return newTransports(eng, c, stage, o, small)
}

// newTransports is NewTransports of options resolve checked and filled
// in, with small the packing threshold they resolved to.
func newTransports(eng engine.Engine, c *shardcache.Cache, stage transport.Staging, o Options, small int64) (*Transports, error) {
	resident := stage.Resident
	if o.ResidentPacks {
		resident = stage.ResidentPacked(o.Raw)
	}
	ro := transport.RawOptions{Readers: o.Readers, Resident: o.Resident, ResidentRuns: o.Raw && o.Resident && o.ResidentPacks,
		SmallBytes: small, Slots: stage.RawSlots, PackSlots: stage.PackSlots, Cache: c}
	if o.Raw {
		ro.ResidentBytes = resident // the resident plan is the raw bytes'
	}
	raw, err := transport.NewRaw(eng, ro)
	if err != nil {
		return nil, err
	}
	t := &Transports{raw: raw, mode: "raw"}
	if o.Raw {
		if err := raw.Prepare(); err != nil {
			raw.Close()
			return nil, err
		}
	} else {
		po := transport.PayloadOptions{Resident: o.Resident, ResidentPacks: o.ResidentPacks,
			Readers: o.Readers, SmallBytes: small, RingPieces: stage.Pieces, PackSlots: stage.PackSlots, ResidentBytes: resident,
			DeviceResident: o.DeviceResident, DeviceBytes: stage.Device, HostEntropy: o.EntropyOnHost,
			EntropyFromSource: o.EntropyFromSource, Cost: o.Cost}
		if o.DeviceResident {
			po.ResidentBytes = stage.SmallResident
			if stage.Device == 0 {
				// No payload streams (all are small, or none is fixed):
				// the device tier would hold nothing, and the small ones
				// stay in pinned memory as they would beside it.
				po.DeviceResident, po.Resident = false, true
			}
		}
		z, err := transport.NewPayloads(eng, c, raw, po)
		if err != nil {
			raw.Close()
			return nil, err
		}
		if err := z.Prepare(); err != nil {
			z.Close() // closes raw too
			return nil, err
		}
		t.zip, t.mode = z, "splitzip"
	}
	switch {
	case o.Resident && o.ResidentPacks:
		t.mode += "+resident-packs"
	case o.Resident:
		t.mode += "+resident"
	case o.DeviceResident:
		t.mode += "+device-resident"
	}
	return t, nil
}

// Transport is the transport faults go through: the payload transport,
// or the raw one for a raw load.
func (t *Transports) Transport() transport.Transport {
	if t.zip != nil {
		return t.zip
	}
	return t.raw
}

// Payloads is the payload transport (nil for a raw load), for uploads
// into ranges the caller owns (transport.Payloads.UploadBatch).
func (t *Transports) Payloads() *transport.Payloads { return t.zip }

// Mode names the path: "raw" or "splitzip", with "+resident",
// "+resident-packs" or "+device-resident".
func (t *Transports) Mode() string { return t.mode }

// Close frees the transports' staging.
func (t *Transports) Close() error { return t.Transport().Close() }
