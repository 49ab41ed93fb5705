package load

import (
	"errors"
	"fmt"
	"time"

	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/nodeshare"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/transport"
	"github.com/splitzip/splitzip/vmm"
)

// Staging plans the pinned staging of a load of specs from c under o
// (its readers, packing threshold and pinned limit, defaults resolved):
// what the tensors need, at most two buffers a reader, all within the
// limit (transport.PlanStaging).
func Staging(c *shardcache.Cache, specs []vmm.Spec, o Options) (transport.Staging, error) {
	small, err := o.resolve(c)
	if err != nil {
		return transport.Staging{}, err
	}
	s, err := transport.PlanStaging(c, specs, o.Readers, small, o.Raw, o.streamed(), o.PinnedLimit)
	return withShared(s, c, specs, o), err
}

// withShared adds to s the layout of the payloads' shared host copy, for
// a load with Options.Share.
func withShared(s transport.Staging, c *shardcache.Cache, specs []vmm.Spec, o Options) transport.Staging {
	if o.Share && !o.Raw {
		l := transport.LayoutShared(c, specs)
		s.Shared = &l
	}
	return s
}

// Transports are what one engine uploads a checkpoint through: the raw
// transport, and unless Options.Raw the payload transport over it, with
// their pinned staging set up. Every front end builds them here, so that
// a load from the CLI, from the C ABI and onto several GPUs runs the same
// stack with the same defaults.
type Transports struct {
	raw   *transport.Raw
	zip   *transport.Payloads
	mode  string
	share *nodeshare.Segment // Options.Share's host copy
	// shareTime is how long attaching to (or making) it took.
	shareTime time.Duration
}

// NewTransports builds the transports of a load on eng with the staging
// plan stage (from Staging with the same options) and sets their staging
// buffers up, so that the first fault pins nothing.
func NewTransports(eng engine.Engine, c *shardcache.Cache, stage transport.Staging, o Options) (*Transports, error) {
	small, err := o.resolve(c)
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
			Readers: o.Readers, SmallBytes: small, RingPieces: stage.Pieces, PieceBytes: stage.PieceBytes, PackSlots: stage.PackSlots, ResidentBytes: resident,
			DeviceResident: o.DeviceResident, DeviceBytes: stage.Device, HostEntropy: o.EntropyOnHost,
			EntropyFromSource: o.EntropyFromSource, Cost: o.Cost, ReadThrough: o.ReadThrough}
		if o.Share && stage.Shared != nil {
			po.ResidentBytes = 0 // the payloads' copies are the shared ones
		}
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
		if o.Share && stage.Shared != nil {
			t0 := time.Now()
			t.share, err = openShared(eng, z, *stage.Shared, o.ShareDir)
			t.shareTime = time.Since(t0)
			if err != nil {
				z.Close()
				return nil, err
			}
			t.mode += "+shared"
		}
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

// SharedReport is what a load with Options.Share found of the payloads'
// shared host copy.
type SharedReport struct {
	ID    string `json:"id"`
	Bytes uint64 `json:"bytes"`
	// Made: this process made it, reading and checking every payload
	// into it (in Open); else it attached to another process's.
	Made    bool          `json:"made"`
	Holders int           `json:"holders"` // processes holding it then, this one included
	Open    time.Duration `json:"open_ns"`
	// Held: this process opened the copy before its loads, to hold it
	// after them (load --hold); Made and Open say how that went.
	Held bool `json:"held,omitempty"`
}

// Shared describes the shared host copy of the payloads (nil without
// Options.Share).
func (t *Transports) Shared() *SharedReport {
	if t.share == nil {
		return nil
	}
	in := t.share.Info()
	return &SharedReport{ID: in.ID, Bytes: in.Bytes, Made: in.Made, Holders: in.Holders, Open: t.shareTime}
}

// Close frees the transports' staging and gives back the shared host
// copy.
func (t *Transports) Close() error {
	err := t.Transport().Close()
	if t.share != nil {
		err = errors.Join(err, t.share.Close())
	}
	return err
}

// openShared opens the host copy of the payloads of l that processes of
// this machine share, filled through z when this process makes it, and
// makes its payloads z's resident copies. Engines that pin memory they
// did not allocate (engine.Registrar) pin it once a process.
func openShared(eng engine.Engine, z *transport.Payloads, l transport.SharedLayout, dir string) (*nodeshare.Segment, error) {
	o := nodeshare.Options{Dir: dir}
	if r, ok := eng.(engine.Registrar); ok {
		o.Pin, o.Unpin = r.Register, r.Unregister
	}
	seg, err := nodeshare.Open(l.ID, l.Size, func(b []byte) error { return z.FillShared(l, b) }, o)
	if errors.Is(err, nodeshare.ErrDir) {
		// The folder the user named (SPLITZIP_SHARE_DIR) cannot be used.
		return nil, fmt.Errorf("shared host copy of the payloads: %w: %w (it must be a folder of this user's that no one else may write, mode 700: chmod 700 it, or name another)", transport.ErrOption, err)
	}
	if err != nil {
		return nil, fmt.Errorf("shared host copy of the payloads: %w", err)
	}
	if err := z.UseShared(l, seg.Bytes()); err != nil {
		seg.Close()
		return nil, fmt.Errorf("shared host copy of the payloads: %w", err)
	}
	return seg, nil
}

// Share makes or attaches to the shared host copy of the payloads of src
// in c, as a load with Options.Share (Resident is implied) would, and
// keeps it held, without loading anything to the device, until the
// returned Transports are closed: a process that keeps a checkpoint's
// host copy ready for others to attach to. Shared() reports what it did.
func Share(eng engine.Engine, c *shardcache.Cache, src *shardcache.Source, o Options) (*Transports, error) {
	o.Resident, o.Share = true, true
	_, stage, small, err := plan(c, src, &o)
	if err != nil {
		return nil, err
	}
	return newTransports(eng, c, stage, o, small)
}

// plan resolves o and returns the specs of src's tensors in c, their
// staging plan (with the shared copy's layout for Options.Share) and the
// packing threshold in effect.
func plan(c *shardcache.Cache, src *shardcache.Source, o *Options) ([]vmm.Spec, transport.Staging, int64, error) {
	small, err := o.resolve(c)
	if err != nil {
		return nil, transport.Staging{}, 0, err
	}
	specs, err := transport.Specs(c, src)
	if err != nil {
		return nil, transport.Staging{}, 0, err
	}
	stage, err := transport.PlanStaging(c, specs, o.Readers, small, o.Raw, o.streamed(), o.PinnedLimit)
	if err != nil {
		return nil, transport.Staging{}, 0, err
	}
	return specs, withShared(stage, c, specs, *o), small, nil
}
