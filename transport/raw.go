package transport

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/vmm"
)

// Transport uploads bindings into their arena ranges.
type Transport interface {
	// UploadBatch starts uploading bs and returns one fence per binding,
	// in order. It returns once every read has been submitted; the fences
	// complete when the bytes are in place. A fence's error names the
	// tensor. When ctx ends, reads not yet started are not started: their
	// bindings' fences report ctx's error, and nothing is left half-read
	// in staging.
	UploadBatch(ctx context.Context, bs []*vmm.Binding) []Fence
	// Stats returns the time spent so far.
	Stats() Stats
	// PinnedBytes returns the pinned host memory the transport holds.
	PinnedBytes() uint64
	Close() error
}

// Stats splits a transport's time (summed over its goroutines), and
// counts the tensors it uploaded by the path each took.
type Stats struct {
	Read time.Duration // reading files into pinned memory (a read in parts counts its wall time once)
	// Verify is payload checks (checksums, headers).
	Verify time.Duration
	// HostDecode is entropy payloads decoded on the host, which checks
	// them (their reads count in Read).
	HostDecode time.Duration
	Submit     time.Duration // enqueueing copies and decodes
	Bytes      uint64        // bytes moved to the device (payload bytes for Payloads)
	Paths      [NumPaths]PathCount
	// Small is the part of each of Paths of tensors of at most
	// DefaultSmallBytes: a cost model prices them apart
	// (costmodel.Profile's small pairs).
	Small [NumPaths]PathCount
}

// Path is how a tensor was uploaded: the kinds a cost model predicts.
type Path int

// The paths.
const (
	PathRaw         Path = iota // its raw bytes, from the source or the cache
	PathFixed                   // a fixed payload, decoded on the device
	PathEntropy                 // an entropy payload, decoded on the device
	PathEntropyHost             // an entropy payload decoded on the host (PayloadOptions.HostEntropy)
	// PathEntropyPacked is a small entropy payload packed with others and
	// decoded by the engine's batch launch (a version 1 payload among
	// them, which no batch decodes, on the host).
	PathEntropyPacked
	NumPaths
)

// String names the path as load's JSON does.
func (p Path) String() string {
	return [...]string{"raw", "fixed", "entropy", "entropy_host", "entropy_packed"}[p]
}

// PathCount is the tensors of one path and their raw bytes.
type PathCount struct {
	Tensors uint64 `json:"tensors"`
	Bytes   uint64 `json:"bytes"`
}

// add returns s plus o.
func (s Stats) add(o Stats) Stats {
	s.Read += o.Read
	s.Verify += o.Verify
	s.HostDecode += o.HostDecode
	s.Submit += o.Submit
	s.Bytes += o.Bytes
	for k := range s.Paths {
		s.Paths[k].Tensors += o.Paths[k].Tensors
		s.Paths[k].Bytes += o.Paths[k].Bytes
	}
	for k := range s.Small {
		s.Small[k].Tensors += o.Small[k].Tensors
		s.Small[k].Bytes += o.Small[k].Bytes
	}
	return s
}

// paths counts a batch's tensors by path, to add to Stats at once: all,
// and those of at most DefaultSmallBytes (Stats.Small).
type paths struct{ all, small [NumPaths]PathCount }

func (ps *paths) add(p Path, b *vmm.Binding) {
	ps.all[p].Tensors++
	ps.all[p].Bytes += b.Size
	if b.Size <= DefaultSmallBytes {
		ps.small[p].Tensors++
		ps.small[p].Bytes += b.Size
	}
}

// remove takes b off path p (what add counted).
func (ps *paths) remove(p Path, b *vmm.Binding) {
	ps.all[p].Tensors--
	ps.all[p].Bytes -= b.Size
	if b.Size <= DefaultSmallBytes {
		ps.small[p].Tensors--
		ps.small[p].Bytes -= b.Size
	}
}

// through moves the items the packer read through (readThrough) from
// their payload's path to the raw one.
func (ps *paths) through(items []smallItem) {
	for k := range items {
		if it := &items[k]; it.through {
			ps.remove(it.from, it.b)
			ps.add(PathRaw, it.b)
		}
	}
}

// addTo adds ps to s (its owner's lock held).
func (ps *paths) addTo(s *Stats) {
	for k := range s.Paths {
		s.Paths[k].Tensors += ps.all[k].Tensors
		s.Paths[k].Bytes += ps.all[k].Bytes
		s.Small[k].Tensors += ps.small[k].Tensors
		s.Small[k].Bytes += ps.small[k].Bytes
	}
}

// MaxSmallBytes is the largest packing threshold: a pack must hold at
// least two tensors.
const MaxSmallBytes = packBytes/2 - 64

// ResolveSmallBytes resolves a SmallBytes option: 0 is the default,
// negative disables packing (-1), and more than MaxSmallBytes is an
// ErrOption.
func ResolveSmallBytes(n int64) (int64, error) {
	switch {
	case n == 0:
		return DefaultSmallBytes, nil
	case n < 0:
		return -1, nil
	case n > MaxSmallBytes:
		return 0, badOption("SmallBytes", n, fmt.Sprintf("at most %d (packs hold two tensors or more)", MaxSmallBytes))
	}
	return n, nil
}

// RawOptions configures a Raw transport.
type RawOptions struct {
	SlotBytes uint64 // size of each pinned staging buffer (default 16 MiB)
	Slots     int    // staging buffers (default 2 per reader)
	Readers   int    // reader goroutines (default 4)
	// Resident keeps every tensor's bytes in pinned memory after its first
	// upload, so a re-fault reads no file (the offload case).
	Resident bool
	// ResidentRuns, with Resident, keeps the bytes of a batch's bindings
	// that lie one after another in the arena in one pinned region, as
	// they lie there, so that a re-fault of them all is one copy
	// (raw_runs.go).
	ResidentRuns bool
	// SmallBytes: tensors of at most this many bytes are packed, several
	// to a copy (0: DefaultSmallBytes; negative: never).
	SmallBytes int64
	// PackSlots caps the packer's staging buffers of 4 MiB (0: 2 per
	// reader, plus two).
	PackSlots int
	// ResidentBytes, with Resident, is what the resident copies will take
	// (Staging.Resident): pinned in blocks of that size, so resident
	// memory is what the tensors need (0: grown as tensors arrive).
	ResidentBytes uint64
	// Cache, if set, reads the files of its own that a binding's spec
	// names when it is a remote cache (shardcache.OpenRemote).
	Cache *shardcache.Cache
}

// rawSlotBytes is the default size of a raw staging slot.
const rawSlotBytes = 16 << 20

// Raw is the native transport: file bytes, unchanged, into the arena.
type Raw struct {
	eng   engine.Engine
	opts  RawOptions
	slots chan *slot
	files fileCache

	pack     *packer
	res      *slab      // resident bytes
	mu       sync.Mutex // guards resident and stats
	resident map[*vmm.Binding][]byte
	runs     map[*vmm.Binding]*rawRun // ResidentRuns: where bytes go
	stats    Stats
	pinned   uint64
	streams  streams
	closed   bool
}

// NewRaw allocates the staging ring.
func NewRaw(eng engine.Engine, opts RawOptions) (*Raw, error) {
	switch {
	case opts.Readers < 0:
		return nil, badOption("Readers", opts.Readers, "0 (default) or more")
	case opts.Slots < 0:
		return nil, badOption("Slots", opts.Slots, "0 (default) or more")
	case opts.PackSlots < 0:
		return nil, badOption("PackSlots", opts.PackSlots, "0 (default) or more")
	case opts.SlotBytes%16 != 0:
		return nil, badOption("SlotBytes", opts.SlotBytes, "a multiple of 16")
	case opts.ResidentRuns && !opts.Resident:
		return nil, badOption("ResidentRuns", true, "with Resident")
	}
	small, err := ResolveSmallBytes(opts.SmallBytes)
	if err != nil {
		return nil, err
	}
	if opts.SlotBytes == 0 {
		opts.SlotBytes = rawSlotBytes
	}
	if opts.Readers == 0 {
		opts.Readers = 4
	}
	if opts.Slots == 0 {
		opts.Slots = 2 * opts.Readers
	}
	opts.SmallBytes = small
	slots, err := newRing(eng, opts.Slots, opts.SlotBytes)
	if err != nil {
		return nil, err
	}
	r := &Raw{eng: eng, opts: opts, slots: slots, resident: map[*vmm.Binding][]byte{}, runs: map[*vmm.Binding]*rawRun{},
		pack: newPacker(eng, 2*opts.Readers, opts.PackSlots), res: newSlab(eng), pinned: uint64(opts.Slots) * opts.SlotBytes}
	r.files.cache, r.pack.files.cache = opts.Cache, opts.Cache
	if opts.Resident {
		r.res.expect(opts.ResidentBytes)
	}
	return r, nil
}

// piece is a part of a binding that fits a slot.
type piece struct {
	i      int // binding index in the batch
	off, n uint64
}

// UploadBatch implements Transport.
func (r *Raw) UploadBatch(ctx context.Context, bs []*vmm.Binding) []Fence {
	out := make([]Fence, len(bs))
	items := getItems(len(bs))
	small := *items
	defer func() { putItems(items, small) }()
	var ps paths
	for _, b := range bs {
		ps.add(PathRaw, b)
	}
	r.mu.Lock()
	ps.addTo(&r.stats)
	r.mu.Unlock()
	isSmall := make([]bool, len(bs))
	for i, b := range bs {
		if b.Size > 0 && int64(b.Size) <= r.opts.SmallBytes {
			small = append(small, r.packItem(i, b))
			isSmall[i] = true
		}
	}
	if len(small) == len(bs) && !r.opts.ResidentRuns {
		r.pack.upload(ctx, small, out) // a batch of small tensors only
		return out
	}
	fences := make([][]Fence, len(bs))
	errs := make([]error, len(bs))
	work := make(chan piece)
	var wg sync.WaitGroup
	var emu sync.Mutex
	fail := func(i int, err error) {
		emu.Lock()
		if errs[i] == nil {
			errs[i] = err
		}
		emu.Unlock()
	}
	var pwg sync.WaitGroup
	pwg.Go(func() { r.pack.upload(ctx, small, out) })
	inRun := make([]bool, len(bs))
	if r.opts.ResidentRuns {
		r.uploadRuns(ctx, bs, isSmall, inRun, out)
	}
	var pieces []piece
	for i, b := range bs {
		switch {
		case isSmall[i] || inRun[i]:
		case r.opts.Resident || b.Size == 0:
			pieces = append(pieces, piece{i, 0, b.Size}) // resident: one piece, the resident buffer
		default:
			for off := uint64(0); off < b.Size; off += r.opts.SlotBytes {
				pieces = append(pieces, piece{i, off, min(r.opts.SlotBytes, b.Size-off)})
			}
		}
	}
	for range min(r.opts.Readers, len(pieces)) {
		wg.Go(func() {
			for p := range work {
				b := bs[p.i]
				emu.Lock()
				failed := errs[p.i] != nil
				emu.Unlock()
				if failed {
					continue
				}
				if err := ctx.Err(); err != nil {
					fail(p.i, err)
					continue
				}
				f, err := r.uploadPiece(b, p)
				if err != nil {
					fail(p.i, err)
					continue
				}
				emu.Lock()
				fences[p.i] = append(fences[p.i], f)
				emu.Unlock()
			}
		})
	}
	for _, p := range pieces {
		work <- p
	}
	close(work)
	wg.Wait()
	pwg.Wait()
	for i, b := range bs {
		switch {
		case isSmall[i] || inRun[i]: // the packer, or its run, set its fence
		case errs[i] != nil:
			out[i] = errFence{&Error{Tensor: b.Name, Err: errs[i]}}
		default:
			out[i] = &wrapFence{allFence(fences[i]), b.Name}
		}
	}
	return out
}

// uploadPiece reads a piece into a slot (or the resident buffer) and
// submits its copy.
func (r *Raw) uploadPiece(b *vmm.Binding, p piece) (Fence, error) {
	if p.n == 0 {
		return doneFence{}, nil
	}
	if r.opts.Resident {
		buf, err := r.residentBytes(b)
		if err != nil {
			return nil, err
		}
		return r.submit(b.Addr, buf, nil)
	}
	s := <-r.slots
	defer func() { r.slots <- s }()
	if s.ev != nil {
		// The copy that last read this buffer must be done before we
		// overwrite it; its error belongs to that copy's fence.
		s.ev.Wait()
		s.ev = nil
	}
	t0 := time.Now()
	err := r.files.readAt(b.Shard, s.buf[:p.n], b.Offset+p.off)
	r.addTime(&r.stats.Read, t0)
	if err != nil {
		return nil, err
	}
	return r.submit(b.Addr+vmm.Ptr(p.off), s.buf[:p.n], s)
}

// submit enqueues a copy and its event; s, if set, records the event as
// the slot's last use.
func (r *Raw) submit(dst vmm.Ptr, src []byte, s *slot) (Fence, error) {
	t0 := time.Now()
	ev, err := r.eng.Submit(r.streams.pick(r.eng), engine.Work{Dst: dst, Src: src})
	if err != nil {
		return nil, err
	}
	if s != nil {
		s.ev = ev
	}
	r.mu.Lock()
	r.stats.Bytes += uint64(len(src))
	r.stats.Submit += time.Since(t0)
	r.mu.Unlock()
	return ev, nil
}

// Prepare sets up the small-tensor staging ring and the engine's scatter
// kernel (engine.Preparer), so that doing so is not part of the first
// upload.
func (r *Raw) Prepare() error {
	if p, ok := r.eng.(engine.Preparer); ok {
		if err := p.PrepareScatter(); err != nil {
			return err
		}
	}
	return r.pack.ensure()
}

// PackReader is implemented by transports whose small bindings another
// transport may pack beside its own (Payloads packs small raw tensors with
// small payloads): PackSource says where b's bytes are read from, as the
// transport itself would read them.
type PackReader interface {
	PackSource(b *vmm.Binding) PackSource
}

// PackSource says how a binding's bytes are staged in a pack: bytes
// [Offset, Offset+Size) of File, or, with File empty, written by Fill.
type PackSource struct {
	File   string
	Offset uint64
	Fill   func(dst []byte) error
}

var (
	_ Transport  = (*Raw)(nil)
	_ PackReader = (*Raw)(nil)
)

// PackSource implements PackReader: the source slice, or a copy from the
// resident buffer.
func (r *Raw) PackSource(b *vmm.Binding) PackSource {
	if !r.opts.Resident {
		return PackSource{File: b.Shard, Offset: b.Offset}
	}
	return PackSource{Fill: func(dst []byte) error {
		buf, err := r.residentBytes(b)
		copy(dst, buf)
		return err
	}}
}

// packItem returns the packer's item for binding i of a batch, b, whose
// bytes come from src.
func rawPackItem(i int, b *vmm.Binding, src PackSource) smallItem {
	it := smallItem{i: i, b: b, stored: b.Size, file: src.File, off: src.Offset}
	if src.File == "" {
		it.fill = func(dst []byte) (*codec.Header, error) { return nil, src.Fill(dst) }
	}
	return it
}

func (r *Raw) packItem(i int, b *vmm.Binding) smallItem { return rawPackItem(i, b, r.PackSource(b)) }

func (r *Raw) residentBytes(b *vmm.Binding) ([]byte, error) {
	r.mu.Lock()
	buf, ok := r.resident[b]
	u := r.runs[b]
	r.mu.Unlock()
	if ok {
		return buf, nil
	}
	var err error
	if u != nil {
		// Its place in a run: a binding is uploaded by one batch at a
		// time (Store), so no other read writes there meanwhile.
		buf = u.place(b)
	} else if buf, err = r.res.alloc(b.Size); err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := r.files.readAt(b.Shard, buf, b.Offset); err != nil {
		r.res.release(buf) // nothing for a place in a run
		return nil, err
	}
	r.addTime(&r.stats.Read, t0)
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.resident[b]; ok { // another goroutine won
		r.res.release(buf)
		return old, nil
	}
	r.resident[b] = buf
	return buf, nil
}

func (r *Raw) addTime(d *time.Duration, t0 time.Time) {
	r.mu.Lock()
	*d += time.Since(t0)
	r.mu.Unlock()
}

// Stats implements Transport.
func (r *Raw) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats.add(r.pack.Stats())
}

// PinnedBytes implements Transport.
func (r *Raw) PinnedBytes() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pinned + r.pack.PinnedBytes() + r.res.pinnedBytes()
}

// Close waits for outstanding copies and frees the pinned memory. Later
// calls do nothing.
func (r *Raw) Close() error {
	r.mu.Lock()
	closed := r.closed
	r.closed = true
	r.mu.Unlock()
	if closed {
		return nil
	}
	r.pack.Close()
	freeRing(r.eng, r.slots)
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.resident)
	clear(r.runs)
	r.res.free()
	r.pinned = 0
	return r.files.close()
}
