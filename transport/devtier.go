package transport

// The device tier: payloads kept compressed in device memory after their
// first upload (PayloadOptions.DeviceResident), so that a re-fault copies
// them within the device and decodes them in place, with no file read and
// no host-to-device copy.

import (
	"fmt"
	"sync"

	"github.com/splitzip/splitzip/codec/payload"
	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/vmm"
)

// devMapChunk is how much of the tier's reserved range is mapped at once.
const devMapChunk = 64 << 20

// devTier is a range of device memory reserved for the tier, mapped as it
// fills and cut into payload slots from the bottom up; slots are freed
// all at once, with the tier.
type devTier struct {
	eng engine.Engine

	mu       sync.Mutex
	base     vmm.Ptr
	size     uint64 // reserved
	mapped   uint64
	used     uint64
	payloads map[string]*devPayload // by content key
}

// devPayload is a payload in the tier: its slot, header, the stream it
// was uploaded on and the event after its upload, which re-faults on that
// stream follow.
type devPayload struct {
	ptr    vmm.Ptr
	h      payload.Head
	stream int
	ev     engine.Event
}

// newDevTier reserves size bytes (rounded up to the engine's
// granularity) for the tier.
func newDevTier(eng engine.Engine, size uint64) (*devTier, error) {
	g := eng.Granularity()
	size = (size + g - 1) / g * g
	base, err := eng.Reserve(size)
	if err != nil {
		return nil, fmt.Errorf("device tier of %d bytes: %w", size, err)
	}
	return &devTier{eng: eng, base: base, size: size, payloads: map[string]*devPayload{}}, nil
}

// alloc returns a slot of n bytes (aligned as a binding's range), or
// false when the tier is full.
func (d *devTier) alloc(n uint64) (vmm.Ptr, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	off := (d.used + vmm.Align - 1) / vmm.Align * vmm.Align
	if off+n > d.size {
		return 0, false, nil
	}
	for d.mapped < off+n {
		m := min(uint64(devMapChunk), d.size-d.mapped)
		g := d.eng.Granularity()
		m = (m + g - 1) / g * g
		if err := d.eng.Map(d.base+vmm.Ptr(d.mapped), m); err != nil {
			return 0, false, err
		}
		d.mapped += m
	}
	d.used = off + n
	return d.base + vmm.Ptr(off), true, nil
}

// lookup returns the tier's payload of key, dropping one whose upload
// failed.
func (d *devTier) lookup(key string) *devPayload {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.payloads[key]
	if p != nil && p.ev.Done() && p.ev.Wait() != nil {
		delete(d.payloads, key)
		return nil
	}
	return p
}

// keep records the payload of key uploaded into its slot.
func (d *devTier) keep(key string, p *devPayload) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.payloads[key]; !ok {
		d.payloads[key] = p
	}
}

// bytes returns the device memory the tier holds mapped.
func (d *devTier) bytes() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mapped
}

// free waits for the uploads into the tier and releases its memory.
func (d *devTier) free() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.payloads {
		p.ev.Wait()
	}
	clear(d.payloads)
	var err error
	if d.mapped > 0 {
		err = d.eng.Unmap(d.base, d.mapped)
	}
	if rerr := d.eng.Release(d.base, d.size); err == nil {
		err = rerr
	}
	d.mapped, d.used = 0, 0
	return err
}
