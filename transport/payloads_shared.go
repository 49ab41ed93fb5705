package transport

// Shared payloads: the resident copies of a load's payloads in one buffer
// that the processes of a machine share (package nodeshare makes and
// finds it; load wires the two). One process reads and checks every
// payload into its place (FillShared); each process then takes the
// places as its resident copies (UseShared), so that faults copy from
// there and no process reads or pins a second host copy.

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/splitzip/splitzip/codec/payload"
	"github.com/splitzip/splitzip/scatter"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/vmm"
)

// SharedLayout places the payloads of a load in one buffer. The fixed
// payloads of each layer group (LayerOf), in spec order, go in regions
// laid out as resident packs are: room for a scatter table, then the
// members, each at a 16-byte aligned offset. A process that uses the
// buffer (UseShared) can then upload a whole region with one copy and
// one scatter launch, the table written in its own pinned memory, since
// the buffer is read-only to it. The other payloads (entropy, those that
// would fill a region alone) follow, each alone and 16-byte aligned.
type SharedLayout struct {
	Keys  []shardcache.Key
	Offs  []uint64
	Sizes []uint64
	Packs []SharedPack
	Size  uint64 // the buffer's bytes
	// ID names the contents: a digest of the layout's version and every
	// payload's key, kind, size, checksum and offset, so that processes
	// loading the same payloads (from one cache or from copies of it)
	// find the same buffer, whatever front end they load through.
	ID string
}

// SharedPack is a region of a SharedLayout holding the payloads
// Keys[First : First+N], after room for their scatter table at Off.
type SharedPack struct {
	Off, Bytes uint64
	First, N   int
}

// sharedLayoutVersion goes into a layout's ID: a process of a build that
// lays payloads out otherwise makes a buffer of its own.
const sharedLayoutVersion = "shared-layout-2"

// LayoutShared lays out the payloads (fixed and entropy) of the tensors
// of specs that c stores compressed, each once.
func LayoutShared(c *shardcache.Cache, specs []vmm.Spec) SharedLayout {
	type member struct {
		key  shardcache.Key
		o    *shardcache.Object
		kind payload.Kind
	}
	groups := map[int][]member{}
	objs := map[shardcache.Key]*shardcache.Object{}
	for _, s := range specs {
		hit, err := c.LookupSpec(s.Ref, s.Shard, s.Offset, s.Size)
		if err != nil || (hit.Tensor.Stored != shardcache.StoredFixed && hit.Tensor.Stored != shardcache.StoredEntropy) || objs[hit.Tensor.Key] != nil {
			continue
		}
		o, err := c.Lookup(hit.Tensor.Key)
		kind := payloadKind(o)
		if err != nil || kind == 0 {
			continue
		}
		objs[hit.Tensor.Key] = o
		g, ok := LayerOf(s.Name)
		if !ok {
			g = -1 // the others first, as loads fault them
		}
		groups[g] = append(groups[g], member{hit.Tensor.Key, o, kind})
	}
	var l SharedLayout
	add := func(m member, off uint64) {
		l.Keys, l.Offs, l.Sizes = append(l.Keys, m.key), append(l.Offs, off), append(l.Sizes, m.o.Size)
	}
	var alone []member
	for _, g := range slices.Sorted(maps.Keys(groups)) {
		// Fixed payloads in regions (the scatter kernel decodes them),
		// the others alone.
		var run []member
		var sizes []uint64
		for _, m := range groups[g] {
			if m.kind == payload.KindFixed {
				run, sizes = append(run, m), append(sizes, m.o.Size)
			} else {
				alone = append(alone, m)
			}
		}
		for len(run) > 0 {
			n := packMembers(sizes)
			if n < 2 {
				alone, run, sizes = append(alone, run[0]), run[1:], sizes[1:]
				continue
			}
			rel, size := packLayout(sizes[:n])
			l.Packs = append(l.Packs, SharedPack{Off: l.Size, Bytes: size, First: len(l.Keys), N: n})
			for k, m := range run[:n] {
				add(m, l.Size+rel[k])
			}
			l.Size += size
			run, sizes = run[n:], sizes[n:]
		}
	}
	for _, m := range alone {
		add(m, l.Size)
		l.Size += align16(m.o.Size)
	}
	h := sha256.New()
	h.Write([]byte(sharedLayoutVersion))
	var rec [24]byte
	for i, k := range l.Keys {
		o := objs[k]
		h.Write([]byte(k))
		h.Write([]byte{0})
		binary.LittleEndian.PutUint64(rec[:], o.Size)
		binary.LittleEndian.PutUint32(rec[8:], o.Checksum)
		rec[12] = byte(payloadKind(o))
		binary.LittleEndian.PutUint64(rec[16:], l.Offs[i])
		h.Write(rec[:])
	}
	for _, pk := range l.Packs {
		binary.LittleEndian.PutUint64(rec[:], pk.Off)
		binary.LittleEndian.PutUint64(rec[8:], uint64(pk.First))
		binary.LittleEndian.PutUint64(rec[16:], uint64(pk.N))
		h.Write(rec[:])
	}
	l.ID = "payloads-" + hex.EncodeToString(h.Sum(nil)[:16])
	return l
}

// check reports, as ErrLayout, a layout whose payloads or packs fall
// outside its buffer or are not where LayoutShared puts them: each
// payload once, at a 16-byte aligned offset, clear of the one before;
// each pack's members in order after room for their table (packLayout).
func (l *SharedLayout) check() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w %s: "+format, append([]any{ErrLayout, l.ID}, a...)...)
	}
	if len(l.Offs) != len(l.Keys) || len(l.Sizes) != len(l.Keys) {
		return bad("%d keys, %d offsets, %d sizes", len(l.Keys), len(l.Offs), len(l.Sizes))
	}
	seen := make(map[shardcache.Key]bool, len(l.Keys))
	var end uint64
	for i, k := range l.Keys {
		off, n := l.Offs[i], l.Sizes[i]
		if seen[k] || off%16 != 0 || off < end || off > l.Size || align16(n) > l.Size-off || n > align16(n) {
			return bad("payload %d (%s) of %d bytes at %d, the one before ending at %d, in %d bytes", i, k, n, off, end, l.Size)
		}
		seen[k] = true
		end = off + align16(n)
	}
	first := 0
	for p, pk := range l.Packs {
		if pk.N < 2 || pk.First < first || pk.First > len(l.Keys)-pk.N || pk.Off > l.Size || pk.Bytes > l.Size-pk.Off {
			return bad("pack %d %+v of %d payloads in %d bytes", p, pk, len(l.Keys), l.Size)
		}
		rel, size := packLayout(l.Sizes[pk.First : pk.First+pk.N])
		if size != pk.Bytes || (pk.First > 0 && l.Offs[pk.First-1]+align16(l.Sizes[pk.First-1]) > pk.Off) {
			return bad("pack %d %+v: want %d bytes, clear of the payload before", p, pk, size)
		}
		for k, r := range rel {
			if l.Offs[pk.First+k] != pk.Off+r {
				return bad("pack %d: member %d at %d, want %d", p, k, l.Offs[pk.First+k], pk.Off+r)
			}
		}
		first = pk.First + pk.N
	}
	return nil
}

// FillShared reads and checks each payload of l into its place in b (of
// l.Size bytes), as a fault does, several at once.
func (z *Payloads) FillShared(l SharedLayout, b []byte) error {
	if err := l.check(); err != nil {
		return err
	}
	if uint64(len(b)) != l.Size {
		return fmt.Errorf("%w: a shared buffer of %d bytes for a layout of %d", ErrLayout, len(b), l.Size)
	}
	next := make(chan int)
	errs := make([]error, z.opts.Readers)
	var wg sync.WaitGroup
	for r := range z.opts.Readers {
		wg.Go(func() {
			for i := range next {
				if errs[r] == nil {
					_, errs[r] = z.read(l.Keys[i], b[l.Offs[i]:l.Offs[i]+l.Sizes[i]])
				}
			}
		})
	}
	for i := range l.Keys {
		next <- i
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

// UseShared makes the payloads of l in b, filled by FillShared in this
// process or another, this transport's resident copies: faults copy them
// from there and read nothing for them; b is only read. With
// ResidentPacks, l's regions become resident packs whose scatter tables
// (64 bytes a member) are the only memory pinned for them. Their heads
// are parsed and checked against the index and against the bytes
// (sizes, bounds, an entropy payload's chunk index); their checksums are
// the filler's, which checked them before the buffer was sealed. A
// layout that does not fit b is refused (ErrLayout). It is called before
// the first fault.
func (z *Payloads) UseShared(l SharedLayout, b []byte) error {
	if !z.opts.Resident {
		return badOption("Resident", false, "true, to use shared payloads")
	}
	if err := l.check(); err != nil {
		return err
	}
	if uint64(len(b)) != l.Size {
		return fmt.Errorf("%w: a shared buffer of %d bytes for a layout of %d", ErrLayout, len(b), l.Size)
	}
	shared := make(map[shardcache.Key]*held, len(l.Keys))
	for i, k := range l.Keys {
		o, err := z.cache.Lookup(k)
		if err != nil {
			return err
		}
		p := b[l.Offs[i] : l.Offs[i]+l.Sizes[i] : l.Offs[i]+l.Sizes[i]]
		h, err := payload.Parse(payloadKind(o), p)
		if err == nil && o.Checksum != 0 && h.Checksum() != o.Checksum {
			err = fmt.Errorf("shared payload's checksum %08x, the index has %08x", h.Checksum(), o.Checksum)
		}
		if err == nil {
			n := uint64(len(p))
			err = payload.Check(h, n, h.Checksum(), 0, p[min(h.Tail(), n):])
		}
		if err != nil {
			return fmt.Errorf("shared payload %s: %w", k, err)
		}
		shared[k] = &held{buf: p, h: h}
	}
	packs, err := z.sharedPacks(l, b)
	if err != nil {
		return err
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	for k, p := range shared {
		z.resident[k] = p
	}
	for _, rp := range packs {
		for i, k := range rp.keys {
			z.places[k] = place{rp, i}
		}
	}
	z.sharedBytes = l.Size
	return nil
}

// sharedPacks makes the regions of l (checked) in b resident packs, with
// ResidentPacks: each with its scatter table in this process's pinned
// memory (one allocation for all), since b is read-only here.
func (z *Payloads) sharedPacks(l SharedLayout, b []byte) ([]*residentPack, error) {
	if !z.opts.ResidentPacks || len(l.Packs) == 0 {
		return nil, nil
	}
	var tables uint64
	for _, pk := range l.Packs {
		tables += align16(scatter.TableBytes(pk.N))
	}
	tb, err := z.res.alone(tables)
	if err != nil {
		return nil, err
	}
	packs := make([]*residentPack, len(l.Packs))
	for i, pk := range l.Packs {
		n := align16(scatter.TableBytes(pk.N))
		rel, _ := packLayout(l.Sizes[pk.First : pk.First+pk.N])
		packs[i] = &residentPack{buf: b[pk.Off : pk.Off+pk.Bytes : pk.Off+pk.Bytes], keys: l.Keys[pk.First : pk.First+pk.N : pk.First+pk.N], rel: rel, table: tb[:n:n]}
		tb = tb[n:]
	}
	return packs, nil
}

// SharedBytes returns the bytes of shared payloads this transport uses
// (UseShared): host memory it holds without pinning its own copy.
func (z *Payloads) SharedBytes() uint64 {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.sharedBytes
}
