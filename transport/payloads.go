package transport

import (
	"cmp"
	"context"
	"fmt"
	"sync"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/payload"
	"github.com/splitzip/splitzip/costmodel"
	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/vmm"
)

// PayloadOptions configures a payload transport.
type PayloadOptions struct {
	// Resident keeps payloads in pinned memory after their first upload,
	// so a re-fault reads no file and verifies nothing again.
	Resident bool
	// ResidentPacks, with Resident, keeps the payloads one batch uploads
	// side by side in pinned regions of up to 16 MiB, so that a re-fault
	// of all of a region's members copies it with one DMA and decodes
	// them with one scatter launch (resident_packs.go).
	ResidentPacks bool
	// Readers is the number of goroutines reading payloads (default 4);
	// each payload is read in pieces (8 MiB; 16 MiB from a remote cache)
	// by up to twice as many.
	Readers int
	// SmallBytes: payloads of at most this many bytes, and raw tensors as
	// small when the wrapped transport is a PackReader, are packed several to a
	// copy (0: DefaultSmallBytes; negative: never); entropy payloads by
	// their tensors' size (one batch launch decodes a pack's).
	SmallBytes int64
	// RingPieces caps the staging ring of payload pieces (0: four
	// per reader, plus two); PackSlots caps the packer's 4 MiB buffers
	// (0: two per reader, plus two). Load sizes both from the checkpoint.
	RingPieces int
	PackSlots  int
	// PieceBytes is the size of a payload piece (Staging.PieceBytes;
	// 0: 8 MiB, 16 MiB for a remote cache).
	PieceBytes uint64
	// ResidentBytes, with Resident, is what the resident payloads will
	// take (Staging.Resident), pinned in blocks of that size (0: grown as
	// payloads arrive).
	ResidentBytes uint64
	// DeviceResident keeps each streamed payload (above SmallBytes)
	// compressed in device memory after its first upload, up to
	// DeviceBytes (Staging.Device), so a re-fault copies it within the
	// device and decodes it in place: no file read, no copy from the host.
	// Payloads that do not fit take the usual path; small ones are kept
	// in pinned memory, as with Resident, in blocks of ResidentBytes
	// (Staging.SmallResident).
	DeviceResident bool
	DeviceBytes    uint64
	// HostEntropy decodes entropy payloads whose source is absent on the
	// host, into the staging ring, rather than on the device after their
	// upload (what version 1 payloads, and those not decodable in place,
	// always take).
	HostEntropy bool
	// EntropyFromSource reads an entropy tensor raw from its source slice
	// when the source is there, rather than decoding its payload: no
	// faster from the page cache (issue 34 measured about 1.0x raw either
	// way), and a corrupt payload then goes unnoticed until the source is
	// gone. Off by default, so a load checks the payloads it reads.
	EntropyFromSource bool
	// Cost, when set, reads a tensor raw from its source slice, where the
	// source is there, when the cost model predicts that loads faster
	// than its payload: small tensors, whose host cost a payload's bytes
	// saved do not repay. Off (nil) by default, for the reason
	// EntropyFromSource is.
	Cost *costmodel.Profile
	// ReadThrough takes a small payload's tensor raw from its source,
	// where that is there, when the reads of its raw neighbours take its
	// bytes along (readThrough): its payload is not read, so damage to it
	// goes unnoticed until verify, or a load without the source, reads it.
	// Off by default: it saves pack reads and checks (a quarter of the
	// host's time a tensor on 100,000 tiny ones), yet real weights' first
	// loads on an H100 ran 3-25% slower with it (why is not measured; it
	// lays each batch out twice) (docs/perf/LOG.md, 2026-12-07, stop 63).
	ReadThrough bool
}

// rawCheaper reports whether Cost predicts a tensor of size bytes loads
// faster raw than stored as k.
func (z *Payloads) rawCheaper(size uint64, k costmodel.Kind) bool {
	return z.opts.Cost != nil && z.opts.Cost.Time(costmodel.Raw, size) < z.opts.Cost.Time(k, size)
}

// Payloads uploads payloads from a cache and decodes them in place;
// bindings without a payload go to the wrapped transport unchanged.
type Payloads struct {
	eng   engine.Engine
	cache *shardcache.Cache
	inner Transport
	opts  PayloadOptions
	piece uint64 // the unit of payload reads (pieceBytes)

	mu       sync.Mutex
	resident map[shardcache.Key]*held
	places   map[shardcache.Key]place         // ResidentPacks: where payloads go
	reading  map[shardcache.Key]chan struct{} // places being filled
	ring     chan *slot                       // pinned staging pieces
	stats    Stats
	pinned   uint64
	streams  streams
	present  map[string]sourceState // source shards checked for changes
	io       chan struct{}          // bounds concurrent piece reads
	pack     *packer
	res      *slab                   // resident payloads
	objects  *shardcache.ObjectFiles // the cache's objects, its packs kept open
	tier     *devTier                // DeviceResident's payloads
	// sharedBytes is the buffer UseShared took resident copies from.
	sharedBytes uint64
}

// sourceState is what SourceState said of a source shard.
type sourceState struct {
	present bool
	err     error
}

// held is a checked payload in pinned memory.
type held struct {
	buf []byte
	h   payload.Head // checked whole (an entropy payload's chunk index too)
}

var _ Transport = (*Payloads)(nil)

// NewPayloads wraps inner with payloads from cache.
func NewPayloads(eng engine.Engine, cache *shardcache.Cache, inner Transport, opts PayloadOptions) (*Payloads, error) {
	switch {
	case opts.Readers < 0:
		return nil, badOption("Readers", opts.Readers, "0 (default) or more")
	case opts.RingPieces < 0:
		return nil, badOption("RingPieces", opts.RingPieces, "0 (default) or more")
	case opts.PieceBytes%(64<<10) != 0 || opts.PieceBytes > 256<<20:
		return nil, badOption("PieceBytes", opts.PieceBytes, "0 (default) or a multiple of 64 KiB up to 256 MiB")
	case opts.PackSlots < 0:
		return nil, badOption("PackSlots", opts.PackSlots, "0 (default) or more")
	case opts.DeviceResident && opts.DeviceBytes == 0:
		return nil, badOption("DeviceBytes", 0, "the bytes the device tier may hold, with DeviceResident")
	case opts.ResidentPacks && !opts.Resident:
		return nil, badOption("ResidentPacks", true, "with Resident")
	}
	small, err := ResolveSmallBytes(opts.SmallBytes)
	if err != nil {
		return nil, err
	}
	if opts.Cost != nil {
		if err := opts.Cost.Check(); err != nil {
			return nil, fmt.Errorf("%w: Cost: %w", ErrOption, err)
		}
	}
	if opts.Readers == 0 {
		opts.Readers = 4
	}
	opts.SmallBytes = small
	z := &Payloads{eng: eng, cache: cache, inner: inner, opts: opts, piece: cmp.Or(opts.PieceBytes, pieceBytes(cache)),
		resident: map[shardcache.Key]*held{}, places: map[shardcache.Key]place{}, reading: map[shardcache.Key]chan struct{}{}, present: map[string]sourceState{}, io: make(chan struct{}, 2*opts.Readers),
		pack: newPacker(eng, 2*opts.Readers, opts.PackSlots), res: newSlab(eng), objects: shardcache.NewObjectFiles(cache)}
	z.pack.objects, z.pack.files.cache, z.pack.fallback = z.objects, cache, z.uploadFallback
	if opts.Resident || opts.DeviceResident {
		z.res.expect(opts.ResidentBytes)
	}
	if opts.DeviceResident {
		if z.tier, err = newDevTier(eng, opts.DeviceBytes); err != nil {
			return nil, err
		}
	}
	return z, nil
}

// target is a binding with a payload: a fixed one, or with host an
// entropy one decoded on the host.
type target struct {
	i    int
	b    *vmm.Binding
	hit  shardcache.SliceHit
	host bool
	copy bool // a raw tensor from its copy in the cache (streamCopy)
}

// UploadBatch implements Transport. Mixed batches are split: bindings
// whose source slice has a payload take the payload path, the others go
// to the wrapped transport in one batch. Small payloads, with the small
// bindings of a wrapped transport that is a PackReader, are packed.
func (z *Payloads) UploadBatch(ctx context.Context, bs []*vmm.Binding) []Fence {
	out := make([]Fence, len(bs))
	var others []*vmm.Binding
	var otherIdx []int
	var targets []target
	var zs []target // with resident packs: the fixed payloads, planned together
	// Most bindings of a batch of small tensors are packed: room for
	// all of them at once.
	items := getItems(len(bs))
	small := *items
	defer func() { putItems(items, small) }()
	// The wrapped transport's small bindings are packed with the small
	// payloads when it can read them into a pack (PackReader).
	pr, _ := z.inner.(PackReader)
	memo := presentMemo{z: z}
	var ps paths // what the wrapped transport uploads, it counts
	defer func() {
		z.mu.Lock()
		ps.addTo(&z.stats)
		z.mu.Unlock()
	}()
	for i, b := range bs {
		hit, err := z.cache.LookupSpec(b.Ref, b.Shard, b.Offset, b.Size)
		if err == nil && hit.Tensor.Stored == shardcache.StoredEntropy {
			// Decoded from its payload, so a corrupt one is caught; with
			// EntropyFromSource read raw from its source when that is
			// there (or, small, with ReadThrough, read through with its raw
			// neighbours).
			present, err := memo.sourcePresent(hit, b.Shard)
			fromPayload := !present || !z.opts.EntropyFromSource && !z.rawCheaper(b.Size, costmodel.Entropy)
			switch {
			case err != nil:
				out[i] = errFence{&Error{Tensor: b.Name, Err: err}}
				continue
			case fromPayload && int64(b.Size) <= z.opts.SmallBytes:
				path := PathEntropyPacked
				if z.opts.HostEntropy {
					path = PathEntropyHost
				}
				small = append(small, z.hostItem(i, b, hit))
				if present {
					z.throughSource(pr, &small[len(small)-1], path)
				}
				ps.add(path, b)
				continue
			case fromPayload:
				targets = append(targets, target{i: i, b: b, hit: hit, host: true})
				if z.opts.HostEntropy {
					ps.add(PathEntropyHost, b)
				} else {
					ps.add(PathEntropy, b)
				}
				continue
			}
		}
		fixed := err == nil && hit.Tensor.Stored == shardcache.StoredFixed
		present := false
		if fixed {
			var perr error
			if present, perr = memo.sourcePresent(hit, b.Shard); perr != nil {
				out[i] = errFence{&Error{Tensor: b.Name, Err: perr}}
				continue
			}
		}
		if !fixed || present && z.rawCheaper(b.Size, costmodel.Fixed) {
			if pr != nil && b.Size > 0 && int64(b.Size) <= z.opts.SmallBytes {
				// A payload's tensor read from its source is no copy of the cache's.
				small = append(small, z.rawItem(i, b, hit, err == nil && !fixed, pr.PackSource(b)))
				ps.add(PathRaw, b)
				continue
			}
			if err == nil && !fixed && z.checksCopy(b, hit) {
				targets = append(targets, target{i: i, b: b, hit: hit, copy: true})
				ps.add(PathRaw, b)
				continue
			}
			others = append(others, b)
			otherIdx = append(otherIdx, i)
			continue
		}
		t := target{i: i, b: b, hit: hit}
		ps.add(PathFixed, b)
		if z.opts.ResidentPacks {
			zs = append(zs, t) // planned into regions together, below
			continue
		}
		n := len(small)
		if small, targets = z.placeFixed(t, small, targets); len(small) > n && present {
			z.throughSource(pr, &small[n], PathFixed)
		}
	}
	// With resident packs, small payloads and streamed ones alike go
	// into regions; those of whole regions are uploaded a region at a
	// time, the rest as they would be without.
	var packs []packUpload
	if z.opts.ResidentPacks {
		if err := z.planResidentPacks(zs); err != nil {
			for _, t := range zs {
				out[t.i] = errFence{&Error{Tensor: t.b.Name, Err: err}}
			}
			zs = nil
		}
		zs, packs = z.residentGroups(zs)
		for _, t := range zs {
			small, targets = z.placeFixed(t, small, targets)
		}
	}
	if len(packs) == 0 && len(others) == 0 && len(targets) == 0 {
		z.pack.upload(ctx, small, out) // a batch of small tensors only
		ps.through(small)
		return out
	}
	var wg sync.WaitGroup
	wg.Go(func() { z.pack.upload(ctx, small, out) })
	if len(packs) > 0 {
		wg.Go(func() {
			for _, u := range packs {
				if err := ctx.Err(); err != nil {
					for _, t := range u.ts {
						out[t.i] = errFence{&Error{Tensor: t.b.Name, Err: err}}
					}
					continue
				}
				z.submitPack(u, out)
			}
		})
	}
	if len(others) > 0 {
		for k, f := range z.inner.UploadBatch(ctx, others) {
			out[otherIdx[k]] = f
		}
	}
	work := make(chan target)
	for range min(z.opts.Readers, len(targets)) {
		wg.Go(func() {
			for t := range work {
				f, err := z.upload(ctx, t)
				if err != nil {
					f = errFence{err}
				}
				out[t.i] = &wrapFence{f, t.b.Name}
			}
		})
	}
	for _, t := range targets {
		work <- t
	}
	close(work)
	wg.Wait()
	ps.through(small)
	return out
}

// throughSource gives it, a small payload's item, its tensor's source
// slice as pr reads it, so that the packer may read it raw from there
// where its neighbours' reads pass over it (readThrough). Not where
// payloads stay resident: those keep what they stage for later faults.
func (z *Payloads) throughSource(pr PackReader, it *smallItem, from Path) {
	if !z.opts.ReadThrough || pr == nil || it.file == "" || z.opts.Resident || z.opts.DeviceResident {
		return
	}
	if src := pr.PackSource(it.b); src.File != "" {
		it.src, it.srcOff, it.from = src.File, src.Offset, from
	}
}

// placeFixed adds a fixed payload to a batch: a small one to the packer's
// items, a larger one to the payloads streamed on their own.
func (z *Payloads) placeFixed(t target, small []smallItem, targets []target) ([]smallItem, []target) {
	if loc, o, err := z.cache.LocateHit(t.hit); err == nil && int64(o.Size) <= z.opts.SmallBytes {
		return append(small, z.packItem(t, loc, o)), targets
	}
	return small, append(targets, t)
}

// packItem returns the packer's item for a small payload: read from its
// object (its own file or its range of a pack) and checked once staged,
// or, when resident, copied from pinned memory. A resident transport's
// first fault of a payload stages it from its file like any other (so a
// pack's members still arrive with one read) and keeps a copy.
func (z *Payloads) packItem(t target, loc shardcache.Location, o *shardcache.Object) smallItem {
	key := t.hit.Tensor.Key
	it := smallItem{i: t.i, b: t.b, stored: o.Size}
	if z.opts.Resident || z.opts.DeviceResident {
		z.mu.Lock()
		p := z.resident[key]
		z.mu.Unlock()
		if p != nil {
			it.fill = func(dst []byte) (*codec.Header, error) {
				f, ok := p.h.(*payload.Fixed)
				if !ok || len(p.buf) != len(dst) || f.DecodedSize() != t.b.Size {
					return nil, fmt.Errorf("%w: payload %s does not fit the tensor", codec.ErrSize, key)
				}
				copy(dst, p.buf)
				return &f.Header, nil
			}
			return it
		}
	}
	// An object's own file's size is checked when the staged read opens
	// it (ObjectFiles.Open); the header's size and checksum, checked once
	// staged (checkStaged), cover what it holds.
	it.file, it.off, it.cached, it.pack = loc.Path, loc.Offset, true, loc.Pack
	it.key, it.check, it.sum = key, z, o.Checksum
	return it
}

// checkStaged checks a small fixed payload staged by the packer against
// its header and its tensor, and keeps it when payloads stay resident.
func (z *Payloads) checkStaged(it *smallItem, b []byte, k int, st *staged) error {
	h := &st.hdrs[k]
	var err error
	if *h, err = payload.CheckFixed(b, payload.Sum(b), it.b.Size); err == nil {
		err = codec.CheckRecorded(h.Checksum, it.sum)
	}
	if err != nil {
		return it.payloadError(err)
	}
	if z.opts.Resident || z.opts.DeviceResident {
		if err := z.keep(it.key, b, &payload.Fixed{Header: *h}); err != nil {
			return err
		}
	}
	st.hdr[k] = h
	return nil
}

// rawItem is the packer's item for a small raw binding of the wrapped
// transport, its bytes where src says (PackSource); when they are the
// cache's copy of the tensor (found: hit is its record), a source that is
// absent, the packer reads them through the cache's objects, so that its
// pack is checked against the index and a file cut short is a corrupt
// cache, not a changed source, and checks them against the copy's
// CRC-32C where the index records one (rawCopy).
func (z *Payloads) rawItem(i int, b *vmm.Binding, hit shardcache.SliceHit, found bool, src PackSource) smallItem {
	it := rawPackItem(i, b, src)
	if found && hit.Tensor.CopyStored && it.file != "" {
		if loc, o, err := z.cache.LocateHit(hit); err == nil && loc.Path == it.file && loc.Offset == it.off {
			it.cached, it.pack = true, loc.Pack
			if o != nil && o.Checksum != 0 {
				it.check, it.sum = rawCopy{}, o.Checksum
			}
		}
	}
	return it
}

// rawCopy checks a small raw tensor read from its copy in the cache
// against the CRC-32C the index records for the copy (smallItem.sum), as
// the C ABI's host reads do: a damaged copy is a corrupt cache, not
// bytes loaded. (Larger ones stream checked: streamCopy.)
type rawCopy struct{}

func (rawCopy) checkStaged(it *smallItem, b []byte, _ int, _ *staged) error {
	if sum := codec.UpdateChecksum(0, b); sum != it.sum {
		where := it.file
		if it.pack != "" {
			where += ": " + shardcache.PackSpan(it.off, it.stored)
		}
		return copyCRCError(where, sum, it.sum)
	}
	return nil
}

// copyCRCError is the error of a raw copy at where whose bytes sum to got
// where the index records recorded: a damaged cache object.
func copyCRCError(where string, got, recorded uint32) error {
	return fmt.Errorf("%s: %w: the raw copy's CRC-32C is %08x, the index records %08x", where, shardcache.ErrObjectCorrupt, got, recorded)
}

// Prepare sets up the pinned staging ring and, when the cache holds
// entropy payloads, the engine's entropy decoders (engine.Preparer), so
// that doing so is not part of the first upload.
func (z *Payloads) Prepare() error {
	if p, ok := z.eng.(engine.Preparer); ok {
		if err := p.PrepareScatter(); err != nil {
			return err
		}
		if !z.opts.HostEntropy && hasEntropy(z.cache.Index()) {
			if err := p.PrepareEntropy(); err != nil {
				return err
			}
		}
	}
	if err := z.pack.ensure(); err != nil || z.opts.Resident {
		return err
	}
	return z.ensureRing()
}

// hasEntropy reports whether ix holds an entropy payload.
func hasEntropy(ix *shardcache.Index) bool {
	for _, o := range ix.Objects {
		if o.Kind == shardcache.KindEntropy {
			return true
		}
	}
	return false
}

// sourcePresent reports whether the shard a slice came from is at path
// (where the source is now, which may not be its recorded root), and
// fails when it changed since it was compressed (size or modification
// time), once per shard. An absent source is no error: payloads hold the
// bytes.
func (z *Payloads) sourcePresent(hit shardcache.SliceHit, path string) (bool, error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	st, ok := z.present[path]
	if !ok {
		st.present, st.err = z.cache.SourcePresent(hit.Shard, path)
		z.present[path] = st
	}
	return st.present, st.err
}

// presentMemo is sourcePresent for one batch, remembering the last
// shard's answer: a batch's tensors come shard by shard, and a lock and
// a map lookup a tensor are a good part of a small tensor's host cost.
type presentMemo struct {
	z       *Payloads
	path    string
	present bool
	err     error
}

func (m *presentMemo) sourcePresent(hit shardcache.SliceHit, path string) (bool, error) {
	if m.path == "" || m.path != path {
		m.path = path
		m.present, m.err = m.z.sourcePresent(hit, path)
	}
	return m.present, m.err
}

// ensureRing allocates the pinned staging ring: pieces of z.piece bytes,
// piecesPerReader a reader (RingPieces at most).
func (z *Payloads) ensureRing() error {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.ring != nil {
		return nil
	}
	n := piecesPerReader*z.opts.Readers + 2
	if z.opts.RingPieces > 0 {
		n = min(n, z.opts.RingPieces)
	}
	ring, err := newRing(z.eng, n, z.piece)
	if err != nil {
		return err
	}
	z.ring = ring
	z.pinned += uint64(n) * z.piece
	return nil
}

// upload uploads a payload of either kind: from the device tier or
// pinned memory where it is kept, else through the staging ring (stream);
// entropy payloads with HostEntropy are decoded on the host.
func (z *Payloads) upload(ctx context.Context, t target) (Fence, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if t.host && z.opts.HostEntropy {
		return z.hostDecode(ctx, t)
	}
	if t.copy {
		return z.streamCopy(ctx, t)
	}
	switch {
	case z.tier != nil && !t.host:
		if p := z.tier.lookup(string(t.hit.Tensor.Key)); p != nil {
			if p.h.DecodedSize() != t.b.Size {
				return nil, fmt.Errorf("%w: payload decodes to %d bytes, the tensor has %d", codec.ErrSize, p.h.DecodedSize(), t.b.Size)
			}
			// On the stream of its upload: after it, whatever else runs.
			return z.eng.Submit(p.stream, engine.Work{Dst: t.b.Addr, From: p.ptr, N: p.h.Size(), Decode: p.h})
		}
	case z.opts.Resident:
		return z.uploadResident(ctx, t)
	}
	return z.stream(ctx, t)
}
