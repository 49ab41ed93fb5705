package transport

// Resident packs (PayloadOptions.ResidentPacks). A resident payload
// re-faulted on its own costs the copy engine a few microseconds on top
// of its bytes: on the H200, 1.6 MB copies queued back to back moved 49
// GB/s and 16 MiB ones 54-55 (docs/PERF.md, thirteenth session). So the
// payloads that one batch uploads are given places, in batch order, in
// pinned regions of up to residentPackBytes that start with room for a
// scatter table; the first fault reads each payload into its place, and a
// later batch holding every member of a region copies it with one DMA and
// decodes the members with one scatter launch, out of place, from the
// engine's device staging memory (as packs of small tensors are). Small
// payloads' first fault stays the packer's (their bytes are copied into
// their places once checked); the others are read into theirs.

import (
	"sync"
	"time"

	"github.com/splitzip/splitzip/codec/payload"
	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/scatter"
	"github.com/splitzip/splitzip/shardcache"
)

// residentPackBytes is the most bytes a resident pack's region takes,
// table room included: no more than the slab cuts from its shared blocks.
const residentPackBytes = slabBlock / 4

// residentPack is a pinned region holding the resident payloads of
// several bindings, after room for their scatter table.
type residentPack struct {
	buf  []byte
	keys []shardcache.Key
	rel  []uint64 // where each member's payload starts in buf
	// table, for a pack in memory this process must not write (a shared
	// copy's region, UseShared), is where its scatter table is written
	// (engine.Work.Table); nil: in the room at the start of buf.
	table []byte

	mu sync.Mutex   // serializes submissions, which rewrite the table
	ev engine.Event // the last submission's event
}

// place is where a payload planned into a resident pack goes.
type place struct {
	pack *residentPack
	i    int
}

// buf returns the bytes of a member of size bytes.
func (p place) buf(size uint64) []byte {
	rel := p.pack.rel[p.i]
	return p.pack.buf[rel : rel+size : rel+size]
}

// planResidentPacks gives the payloads of targets that are neither
// resident nor placed yet places in new resident packs, in batch order.
// Payloads that would fill a region alone keep buffers of their own.
func (z *Payloads) planResidentPacks(targets []target) error {
	var want []shardcache.Key
	seen := map[shardcache.Key]bool{}
	z.mu.Lock()
	for _, t := range targets {
		k := t.hit.Tensor.Key
		if _, placed := z.places[k]; t.host || seen[k] || placed || z.resident[k] != nil {
			continue
		}
		seen[k] = true
		want = append(want, k)
	}
	z.mu.Unlock()
	var keys []shardcache.Key
	var sizes []uint64
	for _, k := range want {
		if o, err := z.cache.Lookup(k); err == nil { // else the upload reports it
			keys, sizes = append(keys, k), append(sizes, o.Size)
		}
	}
	for len(keys) > 0 {
		n := packMembers(sizes)
		if n < 2 {
			keys, sizes = keys[1:], sizes[1:]
			continue
		}
		rel, end := packLayout(sizes[:n])
		buf, err := z.res.alloc(end)
		if err != nil {
			return err
		}
		rp := &residentPack{buf: buf, keys: keys[:n:n], rel: rel}
		z.mu.Lock()
		for i, k := range rp.keys {
			if _, ok := z.places[k]; !ok { // else placed meanwhile: this place stays unused
				z.places[k] = place{rp, i}
			}
		}
		z.mu.Unlock()
		keys, sizes = keys[n:], sizes[n:]
	}
	return nil
}

// packMembers returns how many of the payloads of sizes, from the first,
// share one region (packLayout) of at most residentPackBytes.
func packMembers(sizes []uint64) int {
	var body uint64
	n := 0
	for _, s := range sizes {
		next := align16(scatter.TableBytes(n+1)) + body + align16(s)
		if next > residentPackBytes {
			break
		}
		body += align16(s)
		n++
	}
	return n
}

// packLayout lays out a region of the payloads of sizes: room for their
// scatter table, then each at a 16-byte aligned offset (rel) after the
// one before; size is the region's bytes, a multiple of 16. Resident
// packs and the regions of a shared copy (LayoutShared) are laid out so.
func packLayout(sizes []uint64) (rel []uint64, size uint64) {
	size = align16(scatter.TableBytes(len(sizes)))
	rel = make([]uint64, len(sizes))
	for i, s := range sizes {
		rel[i] = size
		size += align16(s)
	}
	return rel, size
}

// residentGroups takes out of targets those whose payloads make up whole
// resident packs, every member resident and decodable by the scatter
// kernel (a fixed payload of the binding's size), and returns the
// packs with their members' targets and payloads in region order.
func (z *Payloads) residentGroups(targets []target) (rest []target, packs []packUpload) {
	byPack := map[*residentPack]*packUpload{}
	z.mu.Lock()
	for _, t := range targets {
		pl, ok := z.places[t.hit.Tensor.Key]
		p := z.resident[t.hit.Tensor.Key]
		if t.host || !ok || p == nil || p.h.Kind() != payload.KindFixed || p.h.DecodedSize() != t.b.Size {
			rest = append(rest, t)
			continue
		}
		u := byPack[pl.pack]
		if u == nil {
			u = &packUpload{pack: pl.pack, ts: make([]target, len(pl.pack.keys)), ps: make([]*held, len(pl.pack.keys))}
			byPack[pl.pack] = u
		}
		if u.ps[pl.i] != nil { // the payload of two bindings
			rest = append(rest, t)
			continue
		}
		u.ts[pl.i], u.ps[pl.i] = t, p
	}
	z.mu.Unlock()
	for _, u := range byPack {
		whole := true
		for _, p := range u.ps {
			whole = whole && p != nil
		}
		if whole {
			packs = append(packs, *u)
			continue
		}
		for i, p := range u.ps {
			if p != nil {
				rest = append(rest, u.ts[i])
			}
		}
	}
	return rest, packs
}

// packUpload is a resident pack with the targets of its members.
type packUpload struct {
	pack *residentPack
	ts   []target
	ps   []*held
}

// submitPack copies a resident pack's region and scatters its members to
// their bindings with one submission, and sets their fences in out.
func (z *Payloads) submitPack(u packUpload, out []Fence) {
	rp := u.pack
	items := make([]scatter.Item, len(u.ts))
	var end uint64
	for i, t := range u.ts {
		h := &u.ps[i].h.(*payload.Fixed).Header
		items[i] = scatter.Item{Name: t.b.Name, Dst: uint64(t.b.Addr), Src: rp.rel[i], Stored: h.Size, Size: t.b.Size, Header: h}
		end = align16(rp.rel[i] + h.Size)
	}
	rp.mu.Lock()
	if rp.ev != nil {
		rp.ev.Wait() // its error is its own fences'; the table may be rewritten once it is done
	}
	t0 := time.Now()
	ev, err := z.eng.Submit(z.streams.pick(z.eng), engine.Work{Src: rp.buf[:end], Items: items, Table: rp.table})
	if err == nil {
		rp.ev = ev
	}
	rp.mu.Unlock()
	z.mu.Lock()
	z.stats.Submit += time.Since(t0)
	if err == nil {
		z.stats.Bytes += end
	}
	z.mu.Unlock()
	for _, t := range u.ts {
		if err != nil {
			out[t.i] = errFence{&Error{Tensor: t.b.Name, Err: err}}
		} else {
			out[t.i] = &wrapFence{ev, t.b.Name}
		}
	}
}

// readPlaced reads the payload of key into buf, its place in a resident
// pack (see fillPlace).
func (z *Payloads) readPlaced(key shardcache.Key, buf []byte) (*held, error) {
	return z.fillPlace(key, true, func() (*held, error) { return z.read(key, buf) })
}

// keepPlaced makes b, a checked payload staged by the packer, the resident
// copy of key in its place, if key has one; it reports whether it did, or
// another goroutine has or is doing so.
func (z *Payloads) keepPlaced(key shardcache.Key, b []byte, h payload.Head) bool {
	z.mu.Lock()
	pl, placed := z.places[key]
	z.mu.Unlock()
	if !placed {
		return false
	}
	z.fillPlace(key, false, func() (*held, error) {
		buf := pl.buf(uint64(len(b)))
		copy(buf, b)
		return &held{buf: buf, h: h}, nil
	})
	return true
}

// fillPlace makes the payload fill writes into key's place the resident
// copy of key, one fill at a time (a place cannot take two at once): when
// key is resident it returns that; when another goroutine is filling the
// place it waits for it and looks again (or, without wait, returns nil);
// a failed fill leaves the place to the next.
func (z *Payloads) fillPlace(key shardcache.Key, wait bool, fill func() (*held, error)) (*held, error) {
	for {
		z.mu.Lock()
		if p := z.resident[key]; p != nil {
			z.mu.Unlock()
			return p, nil
		}
		if busy, ok := z.reading[key]; ok {
			z.mu.Unlock()
			if !wait {
				return nil, nil
			}
			<-busy
			continue
		}
		done := make(chan struct{})
		z.reading[key] = done
		z.mu.Unlock()
		p, err := fill()
		z.mu.Lock()
		delete(z.reading, key)
		if err == nil {
			z.resident[key] = p
		}
		z.mu.Unlock()
		close(done)
		return p, err
	}
}
