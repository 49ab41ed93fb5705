// Package vmm lays a checkpoint's tensors out in one weight arena: a
// reserved virtual address range backed by physical memory mapped in large,
// granularity-aligned pieces (mapping 4 GiB costs ~100 ms in 2 MiB pieces
// and ~4 ms in 64 MiB pieces on an H200). Each tensor gets a binding: an
// aligned range of the arena plus its dtype, shape and source slice, and a
// residency state that the transports drive (evict, fault in).
package vmm

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// Ptr is a device address.
type Ptr uint64

// Memory is what an arena needs of a device (CUDA's VMM calls, or host
// memory for the CPU engine).
type Memory interface {
	Granularity() uint64
	Reserve(size uint64) (Ptr, error)
	Map(p Ptr, n uint64) error
	Unmap(p Ptr, n uint64) error
	Release(p Ptr, size uint64) error
}

// Align is the alignment of every binding's range.
const Align = 512

// DefaultMapChunk is the size of each mapped piece of the arena.
const DefaultMapChunk = 64 << 20

// ErrUnknown reports a binding the arena does not hold.
var ErrUnknown = errors.New("no such binding")

// ErrDuplicateName reports specs of which two share a name (a checkpoint
// whose shards both hold a tensor of it): an arena serves tensors by name.
var ErrDuplicateName = errors.New("duplicate tensor name")

// DuplicateError is ErrDuplicateName for one name: the tensor and the two
// shards that hold it, apart from the text for callers that report them
// (splitzip --json's "tensor" and "file").
type DuplicateError struct {
	Name, First, Second string
}

// Error says the name and the two shards.
func (e *DuplicateError) Error() string {
	return fmt.Sprintf("%v: %q in %s and in %s", ErrDuplicateName, e.Name, e.First, e.Second)
}

// Is reports ErrDuplicateName.
func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicateName }

// Spec describes a tensor to bind.
type Spec struct {
	Name   string
	DType  string
	Shape  []uint64
	Shard  string // source shard file path
	Offset uint64 // byte offset of the tensor in the shard
	Size   uint64 // bytes
	// Ref is what the maker of the spec knows of where the tensor's bytes
	// are kept, handed to what faults it in so that it looks nothing up
	// again: for specs of a cache (transport.Specs, the C ABI's loader) a
	// *shardcache.SliceHit, the tensor's record with its source and
	// shard. nil when the spec came from no cache.
	Ref any
}

// State is a binding's residency.
type State int

// Residency states.
const (
	Evicted  State = iota // not in device memory (or stale)
	Loading               // an upload is in flight
	Resident              // the range holds the tensor
)

func (s State) String() string { return [...]string{"evicted", "loading", "resident"}[s] }

// Binding is a tensor's place in the arena.
type Binding struct {
	Spec
	Index int
	Addr  Ptr // start of the range, Size bytes

	// state is a State: read and changed by every fault of the binding,
	// so atomically rather than under a lock.
	state atomic.Int32
	// upload is the upload in flight while the state is Loading, for
	// fault calls that find the binding loading to share.
	upload atomic.Pointer[Upload]
}

// Upload is an upload in flight that a binding records, so that a
// transport's fault calls find it on the binding rather than in a map of
// their own.
type Upload struct {
	// Fence completes when the upload has ended and the binding's state
	// says how.
	Fence interface {
		Wait() error
		Done() bool
	}
}

// Claim changes the state from Evicted to Loading, recording u as the
// binding's upload, and reports whether it did.
func (b *Binding) Claim(u *Upload) bool {
	if !b.state.CompareAndSwap(int32(Evicted), int32(Loading)) {
		return false
	}
	b.upload.Store(u)
	return true
}

// Upload returns the binding's upload in flight, or nil.
func (b *Binding) Upload() *Upload { return b.upload.Load() }

// Finish ends upload u: if it is still the binding's, it is cleared and
// a Loading state becomes s (an evicted binding stays evicted). It
// reports whether u was the binding's.
func (b *Binding) Finish(u *Upload, s State) bool {
	if !b.upload.CompareAndSwap(u, nil) {
		return false
	}
	b.state.CompareAndSwap(int32(Loading), int32(s))
	return true
}

// State returns the binding's residency.
func (b *Binding) State() State { return State(b.state.Load()) }

// SetState changes the binding's residency (transports call it).
func (b *Binding) SetState(s State) { b.state.Store(int32(s)) }

// CompareAndSet changes the state from old to s and reports whether it did.
func (b *Binding) CompareAndSet(old, s State) bool {
	return b.state.CompareAndSwap(int32(old), int32(s))
}

// Arena is a reserved, mapped range holding bindings.
type Arena struct {
	mem      Memory
	base     Ptr
	size     uint64
	chunk    uint64
	mapped   uint64
	bindings []*Binding
	byName   map[string]*Binding
}

// New reserves and maps an arena for specs, in pieces of mapChunk bytes
// (0 for DefaultMapChunk; rounded up to the granularity). On error nothing
// stays reserved or mapped.
func New(mem Memory, specs []Spec, mapChunk uint64) (*Arena, error) {
	g := mem.Granularity()
	if mapChunk == 0 {
		mapChunk = DefaultMapChunk
	}
	mapChunk = (mapChunk + g - 1) / g * g
	a := &Arena{mem: mem, chunk: mapChunk, byName: map[string]*Binding{}}
	var off uint64
	for i, s := range specs {
		off = (off + Align - 1) &^ (Align - 1)
		b := &Binding{Spec: s, Index: i}
		a.bindings = append(a.bindings, b)
		if prev, dup := a.byName[s.Name]; dup {
			return nil, &DuplicateError{Name: s.Name, First: prev.Shard, Second: s.Shard}
		}
		a.byName[s.Name] = b
		b.Addr = Ptr(off) // relative until the range is reserved
		off += s.Size
	}
	a.size = max((off+g-1)/g*g, g)
	base, err := mem.Reserve(a.size)
	if err != nil {
		return nil, fmt.Errorf("vmm: reserving %d bytes: %w", a.size, err)
	}
	a.base = base
	for _, b := range a.bindings {
		b.Addr += base
	}
	for a.mapped < a.size {
		n := min(a.chunk, a.size-a.mapped)
		if err := mem.Map(base+Ptr(a.mapped), n); err != nil {
			a.Close()
			return nil, fmt.Errorf("vmm: mapping %d bytes at offset %d: %w", n, a.mapped, err)
		}
		a.mapped += n
	}
	return a, nil
}

// Close unmaps and releases the arena.
func (a *Arena) Close() error {
	var errs []error
	for off := uint64(0); off < a.mapped; off += a.chunk {
		errs = append(errs, a.mem.Unmap(a.base+Ptr(off), min(a.chunk, a.mapped-off)))
	}
	a.mapped = 0
	if a.base != 0 {
		errs = append(errs, a.mem.Release(a.base, a.size))
		a.base = 0
	}
	return errors.Join(errs...)
}

// Size returns the arena's size in bytes.
func (a *Arena) Size() uint64 { return a.size }

// Base returns the arena's first address.
func (a *Arena) Base() Ptr { return a.base }

// Bindings returns every binding, in spec order.
func (a *Arena) Bindings() []*Binding { return a.bindings }

// Lookup returns the binding of a tensor.
func (a *Arena) Lookup(name string) (*Binding, error) {
	b, ok := a.byName[name]
	if !ok {
		return nil, fmt.Errorf("vmm: %q: %w", name, ErrUnknown)
	}
	return b, nil
}

// Evict marks bindings evicted; their ranges keep their backing and are
// overwritten by the next fault.
func (a *Arena) Evict(bs ...*Binding) {
	for _, b := range bs {
		b.SetState(Evicted)
	}
}
