package transport

// Resident payloads: a payload transport with Resident keeps each payload
// it reads, checked, in pinned memory (in its place of a resident pack
// when it has one, resident_packs.go), and later faults copy it from
// there.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/codec/payload"
	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/shardcache"
)

// keep copies a checked payload into pinned memory as the resident copy
// of key (into its place in a resident pack, if it has one), unless one
// is there already or being made.
func (z *Payloads) keep(key shardcache.Key, b []byte, h payload.Head) error {
	if z.keepPlaced(key, b, h) {
		return nil
	}
	buf, err := z.res.alloc(uint64(len(b)))
	if err != nil {
		return err
	}
	copy(buf, b)
	z.mu.Lock()
	defer z.mu.Unlock()
	if _, ok := z.resident[key]; ok {
		z.res.release(buf)
		return nil
	}
	z.resident[key] = &held{buf: buf, h: h}
	return nil
}

// uploadResident uploads a payload from its copy in pinned memory, read
// and checked on its first fault: one submission of its copy and its
// decode. An entropy payload that does not decode in place on a device
// is decoded on the host (hostDecode).
func (z *Payloads) uploadResident(ctx context.Context, t target) (Fence, error) {
	key := t.hit.Tensor.Key
	p, err := z.residentPayload(key)
	switch {
	case t.host && errors.Is(err, entropy.ErrNoRecords):
		return z.hostDecode(ctx, t)
	case err != nil:
		return nil, err
	case (p.h.Kind() == payload.KindEntropy) != t.host || p.h.DecodedSize() != t.b.Size:
		return nil, fmt.Errorf("%w: payload %s (%v) does not decode to the tensor's %d bytes", codec.ErrSize, key, p.h.Kind(), t.b.Size)
	case t.host && !p.h.InPlace():
		return z.hostDecode(ctx, t)
	case !p.h.InPlace():
		return nil, fmt.Errorf("%w: payload %s", codec.ErrNotInPlace, key)
	}
	return z.submitResident(engine.Work{Dst: t.b.Addr, Src: p.buf, Decode: p.h})
}

// submitResident submits the copy and decode w of a resident payload (its
// bytes w.Src) on the next stream.
func (z *Payloads) submitResident(w engine.Work) (Fence, error) {
	t0 := time.Now()
	ev, err := z.eng.Submit(z.streams.pick(z.eng), w)
	if err != nil {
		return nil, err
	}
	z.mu.Lock()
	z.stats.Bytes += uint64(len(w.Src))
	z.stats.Submit += time.Since(t0)
	z.mu.Unlock()
	return ev, nil
}

// residentPayload returns the payload of key in pinned memory, reading and
// verifying it on first use.
func (z *Payloads) residentPayload(key shardcache.Key) (*held, error) {
	z.mu.Lock()
	p := z.resident[key]
	z.mu.Unlock()
	if p != nil {
		return p, nil
	}
	o, err := z.cache.Lookup(key)
	if err != nil {
		return nil, err
	}
	z.mu.Lock()
	pl, placed := z.places[key]
	z.mu.Unlock()
	if placed {
		return z.readPlaced(key, pl.buf(o.Size))
	}
	buf, err := z.res.alloc(o.Size)
	if err != nil {
		return nil, err
	}
	if p, err = z.read(key, buf); err != nil {
		z.res.release(buf)
		return nil, err
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if old, ok := z.resident[key]; ok {
		z.res.release(buf)
		return old, nil
	}
	z.resident[key] = p
	return p, nil
}

// Stats implements Transport; it includes the wrapped transport's.
func (z *Payloads) Stats() Stats {
	in := z.inner.Stats().add(z.pack.Stats())
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.stats.add(in)
}

// PinnedBytes implements Transport; it includes the wrapped transport's.
func (z *Payloads) PinnedBytes() uint64 {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.pinned + z.pack.PinnedBytes() + z.res.pinnedBytes() + z.inner.PinnedBytes()
}

// DeviceBytes returns the device memory the device tier holds mapped
// (DeviceResident).
func (z *Payloads) DeviceBytes() uint64 {
	if z.tier == nil {
		return 0
	}
	return z.tier.bytes()
}

// Close frees the pinned memory and closes the wrapped transport.
func (z *Payloads) Close() error {
	z.pack.Close()
	z.mu.Lock()
	if z.ring != nil {
		freeRing(z.eng, z.ring)
		z.ring = nil
	}
	clear(z.resident)
	clear(z.places)
	z.res.free()
	z.pinned = 0
	z.mu.Unlock()
	z.objects.Close()
	// After the ring: every copy into the tier was from a staging piece,
	// and freeing the ring waited for them.
	if t := z.tier; t != nil {
		z.tier = nil
		if err := t.free(); err != nil {
			z.inner.Close()
			return err
		}
	}
	return z.inner.Close()
}
