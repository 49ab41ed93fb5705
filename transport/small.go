package transport

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/codec/payload"
	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/scatter"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/vmm"
)

// DefaultSmallBytes is the stored size at or below which a binding is
// packed with others by default: below it, a copy's fixed cost (a few
// microseconds) outweighs its transfer time. Local loads that keep
// nothing resident pack more (load.DefaultSmallBytes); compress's pack
// objects keep this one.
const DefaultSmallBytes = 256 << 10

// packBytes is the size of one pack's pinned staging buffer.
const packBytes = 4 << 20

// smallItem is a binding to pack. Its stored bytes are either a range of
// a file (file set: bytes [off, off+stored)), so that items lying side by
// side in one file (the members of a pack object, or tensors of a shard)
// are staged with one read, or written by fill.
type smallItem struct {
	i      int // index of the binding in its batch
	b      *vmm.Binding
	stored uint64
	file   string
	off    uint64
	// read, where not 0, says the item is an entropy payload decoded on
	// the host (hostItem, hostEntropy): only its first read bytes (at
	// most stored) come from the file, into the start of its slot, where
	// its check decodes them in place. Where that is fewer than stored,
	// its read ends there (the next item's place in staging no longer
	// mirrors the file).
	read uint64
	// dev says the item is an entropy payload (its stored bytes) that its
	// check leaves for the engine's batch decode: the pack keeps room for
	// its descriptor (scatter.PutEntropy).
	dev bool
	// cached says the file is the cache's (an object's own, or pack's,
	// of key pack), read through the packer's objects: packs kept open
	// and checked against the index, an object's own file opened per
	// read (a cache of loose payloads would otherwise hold a descriptor
	// per tensor). Other files (source shards) are kept open.
	cached bool
	pack   shardcache.Key
	// key and check, for a payload read from a file: check checks its
	// bytes once staged (an interface held by the transport, not a
	// closure an item: small tensors come by the hundred).
	key   shardcache.Key
	check stagedChecker
	// sum is the payload's checksum as the cache's index records it (0:
	// not recorded), which its check compares with its header's.
	sum uint32
	// fill, for an item not read from a file, writes the stored bytes
	// into dst and, for a payload, returns its checked header.
	fill func(dst []byte) (*codec.Header, error)
	// src and srcOff, for a payload whose source is present, are its
	// tensor's raw bytes there; from is the payload's path. The packer
	// reads such an item raw from its source (through set) where its
	// staged reads pass over those bytes anyway (readThrough).
	src     string
	srcOff  uint64
	from    Path
	through bool
}

// payloadError says where the payload of it lies whose check failed with
// err: its file, and for a pack member its bytes there.
func (it *smallItem) payloadError(err error) error {
	if it.pack != "" {
		return fmt.Errorf("%s: %s (payload %s): %w", it.file, shardcache.PackSpan(it.off, it.stored), it.key, err)
	}
	return fmt.Errorf("%s (payload %s): %w", it.file, it.key, err)
}

// itemPool recycles batches' item arrays: a smallItem holds pointers, so
// a batch of a hundred small tensors would otherwise allocate (and the
// collector scan) some twelve kilobytes.
var itemPool = sync.Pool{New: func() any { return new([]smallItem) }}

// getItems returns an empty item array with room for n; give it back
// with putItems once no pack uses its items.
func getItems(n int) *[]smallItem {
	p := itemPool.Get().(*[]smallItem)
	*p = slices.Grow((*p)[:0], n)
	return p
}

// putItems gives back p, whose array (or the larger one append made of
// it) is items.
func putItems(p *[]smallItem, items []smallItem) {
	clear(items)
	*p = items[:0]
	itemPool.Put(p)
}

// stagedChecker checks the staged bytes of a payload read from a file.
type stagedChecker interface {
	// checkStaged checks b, the stored bytes of item k of st's plan, it,
	// and sets its header in st: a fixed payload's st.hdr[k] (pointing
	// into st.hdrs), an entropy payload's left for the engine st.ent[k];
	// neither where b now holds raw values.
	checkStaged(it *smallItem, b []byte, k int, st *staged) error
}

// errFallback is a check's answer for an item that is to be uploaded
// another way than packed (packer.fallback), not an error of its own.
var errFallback = errors.New("transport: not for a pack")

// maxGap is the most bytes between two items of one file that a staged
// read takes along rather than issuing a second read: about what a read
// system call costs in copying time.
const maxGap = 16 << 10

// bounceBytes is the most bytes of a bounced read (stagedRead.bounce): its
// bytes are copied a second time, item by item, so only short runs of
// tiny neighbours are worth it.
const bounceBytes = 64 << 10

// bouncePool recycles bounced reads' buffers (bounceBytes each).
var bouncePool = sync.Pool{New: func() any { b := make([]byte, bounceBytes); return &b }}

// packer uploads small bindings in packs: each pack is planned so that
// items side by side in a file arrive with one read into one pinned
// buffer, copied with one DMA, and written to their bindings' ranges by
// one scatter pass (a single binding takes the direct path instead).
// Payloads and raw bytes share packs.
type packer struct {
	eng      engine.Engine
	workers  int
	maxSlots int           // cap on the staging ring (0: workers plus two)
	fills    chan struct{} // bounds concurrent reads
	files    fileCache     // source shards of staged reads, kept open
	// objects reads the cached items (nil in a packer that has none: a
	// raw transport's).
	objects *shardcache.ObjectFiles
	streams streams

	// fallback uploads an item whose check said errFallback (nil: such an
	// item fails with it).
	fallback func(ctx context.Context, it *smallItem) Fence

	mu     sync.Mutex
	slots  chan *slot // allocated on first use
	stats  Stats
	pinned uint64
}

// newPacker returns a packer for workers fill goroutines whose staging
// ring holds at most slots buffers (0: workers plus two).
func newPacker(eng engine.Engine, workers, slots int) *packer {
	workers = max(workers, 1)
	return &packer{eng: eng, workers: workers, maxSlots: slots, fills: make(chan struct{}, 2*workers)}
}

func align16(n uint64) uint64 { return (n + 15) &^ 15 }

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ensure allocates the staging ring: one buffer per worker and two spare.
func (p *packer) ensure() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.slots != nil {
		return nil
	}
	n := p.workers + 2
	if p.maxSlots > 0 {
		n = min(n, p.maxSlots)
	}
	slots, err := newRing(p.eng, n, packBytes)
	if err != nil {
		return err
	}
	p.slots, p.pinned = slots, uint64(n)*packBytes
	return nil
}

// plan is one staging buffer's layout: its items, where each lies after
// the item table (rel, 16-byte aligned), and the reads that fill them.
type plan struct {
	items []smallItem
	rel   []uint64
	reads []stagedRead
	end   uint64 // bytes after the table
	devs  int    // items with room for an entropy descriptor (smallItem.dev)
}

// stagedRead is one read of a file range into a plan: items [first,
// last) lie in it.
type stagedRead struct {
	file        string
	cached      bool           // a range of the cache's file (smallItem.cached)
	pack        shardcache.Key // its pack, if any
	off, n, rel uint64
	first, last int
	// closed says its last item's slot runs past its bytes (smallItem.read):
	// the next item's place in staging no longer mirrors the file.
	closed bool
	// bounce says the read goes to a buffer of its own (rel then means
	// nothing: each item lies at its own rel), from which each of
	// its items is copied to its slot: neighbours whose offsets differ by
	// other than a multiple of 16 (tensors of a few bytes, such as the
	// int64 step counters of batch norms) cannot lie in 16-byte aligned
	// slots the way they lie in the file, and a read each cost a system
	// call a tensor.
	bounce bool
}

// fileBytes is the bytes of it read from its file.
func (it *smallItem) fileBytes() uint64 {
	if it.read != 0 {
		return it.read
	}
	return it.stored
}

// bytes is the staging buffer the plan fills: the table, the items, and
// room for their entropy descriptors.
func (pl *plan) bytes() uint64 { return packedBytes(len(pl.items), pl.end, pl.devs) }

// packedBytes is the staging buffer of n items whose stored bytes end at
// end after the table, devs of them with room for a descriptor.
func packedBytes(n int, end uint64, devs int) uint64 {
	return align16(align16(scatter.TableBytes(n))+end) + scatter.EntropyBytes(devs)
}

// join says how an item joins the plan's last read, if it does.
type join int

const (
	joinNone   join = iota // a read of its own, or none (an item with its own fill)
	joinMirror             // in the read, at its place in the file
	joinBounce             // in the read, bounced (stagedRead.bounce): a slot of its own
)

// place returns where item it would lie in the plan and how it joins the
// plan's last read, without changing the plan.
func (pl *plan) place(it *smallItem) (rel uint64, how join) {
	if n := len(pl.reads); n > 0 && it.file != "" {
		r := pl.reads[n-1]
		if end := r.off + r.n; !r.closed && r.file == it.file && it.off >= end && it.off-end <= maxGap {
			switch {
			case !r.bounce && (it.off-r.off)%16 == 0:
				return r.rel + it.off - r.off, joinMirror
			case it.off+it.fileBytes()-r.off <= bounceBytes:
				// A misaligned neighbour (or any after one) joins a short
				// read, bounced, in a slot of its own.
				return align16(pl.end), joinBounce
			}
		}
	}
	return align16(pl.end), joinNone
}

// add puts it, the plan's next item, into the plan at rel (items and
// rel are laid out by planPacks; add records the read).
func (pl *plan) add(it *smallItem, rel uint64, how join) {
	k := len(pl.items) - 1
	pl.rel[k] = rel
	pl.end = rel + it.stored
	pl.devs += btoi(it.dev)
	n := it.fileBytes()
	switch {
	case how != joinNone:
		r := &pl.reads[len(pl.reads)-1]
		r.bounce = r.bounce || how == joinBounce
		r.n = it.off + n - r.off
		r.last = k + 1
		r.closed = n < it.stored
	case it.file != "":
		pl.reads = append(pl.reads, stagedRead{file: it.file, cached: it.cached, pack: it.pack, off: it.off, n: n, rel: rel, first: k, last: k + 1, closed: n < it.stored})
	}
}

// planPacks lays items out in staging buffers of packBytes: file items in
// file order, so that neighbours in a file share a read, then the rest.
// It sorts items in place; each plan's items and offsets are ranges of
// items and of one array, not copies.
func planPacks(items []smallItem) []*plan {
	sortItems(items)
	rels := make([]uint64, len(items))
	var plans []*plan
	pl := &plan{}
	lo := 0
	for k := range items {
		it := &items[k]
		rel, how := pl.place(it)
		if k > lo && packedBytes(k-lo+1, rel+it.stored, pl.devs+btoi(it.dev)) > packBytes {
			plans = append(plans, pl)
			pl, lo = &plan{}, k
			rel, how = pl.place(it)
		}
		pl.items, pl.rel = items[lo:k+1], rels[lo:k+1]
		pl.add(it, rel, how)
	}
	return append(plans, pl)
}

// readThrough changes each payload item with a source (smallItem.src)
// whose raw bytes a staged read of plans passes over anyway (a gap of at
// most maxGap between its raw neighbours in a shard), or lie next to one
// (no more than maxGap bytes of tensor and gap before its start or past
// its end: less than a read of its own costs), into that raw item, read
// through: its payload's read, check and decode are not paid. It returns
// how many it changed; plans, laid out before, no longer fit them. A
// shard's neighbours mirrored in staging keep their 16-byte places (an
// item that would break them is left a payload); a bounced read takes
// any, up to bounceBytes.
func readThrough(items []smallItem, plans []*plan) int {
	some := false
	for k := range items {
		some = some || items[k].src != ""
	}
	if !some {
		return 0
	}
	// The staged reads of source files, in file order (as planned),
	// widened as items join them.
	var reads []stagedRead
	for _, pl := range plans {
		for _, r := range pl.reads {
			if !r.cached {
				reads = append(reads, r)
			}
		}
	}
	n := 0
	// Until a pass changes nothing: an item that joined a read's edge
	// brings the next one within reach.
	for changed := true; changed; {
		changed = false
		for k := range items {
			it := &items[k]
			if it.src == "" || it.file == "" {
				continue
			}
			// The last read of its source starting at or before it, and
			// the one after.
			j, _ := slices.BinarySearchFunc(reads, it, func(r stagedRead, it *smallItem) int {
				return cmp.Or(strings.Compare(r.file, it.src), cmp.Compare(r.off, it.srcOff+1))
			})
			if !(j > 0 && reads[j-1].take(it) || j < len(reads) && reads[j].take(it)) {
				continue
			}
			*it = smallItem{i: it.i, b: it.b, stored: it.b.Size, file: it.src, off: it.srcOff, from: it.from, through: true}
			n++
			changed = true
		}
	}
	return n
}

// take says whether a read planned as r would take the source bytes of
// it along (readThrough): within r, or next to it; r is widened to them.
func (r *stagedRead) take(it *smallItem) bool {
	lo, hi, end := it.srcOff, it.srcOff+it.b.Size, r.off+r.n
	if r.file != it.src {
		return false
	}
	switch {
	case r.bounce && max(hi, end)-min(lo, r.off) > bounceBytes:
		return false
	case !r.bounce && (max(lo, r.off)-min(lo, r.off))%16 != 0:
		return false // its slot or the read's would lose its 16-byte place
	case lo >= r.off && hi <= end:
		return true
	case lo >= end && hi-end <= maxGap:
		r.n = hi - r.off
		return true
	case hi <= r.off && r.off-lo <= maxGap:
		r.off, r.n = lo, end-lo
		return true
	}
	return false
}

// fileOrder orders items by file (those with none last), then offset.
func fileOrder(a, b *smallItem) int {
	switch {
	case a.file == "" || b.file == "":
		return cmp.Compare(btoi(a.file == ""), btoi(b.file == ""))
	case a.file != b.file:
		return strings.Compare(a.file, b.file)
	}
	return cmp.Compare(a.off, b.off)
}

// maxSortFiles is the most files sortItems groups by hand; a batch's
// items come from a few (a shard and the packs beside it).
const maxSortFiles = 8

// sortItems sorts items stably by fileOrder. A batch's items lie in a
// few files, each in offset order already, interleaved: they are moved
// into file groups in one pass (through a recycled array), and a group
// is sorted only when it is not in order, rather than sorting the whole
// batch of large items by comparison.
func sortItems(items []smallItem) {
	var files [maxSortFiles]string
	var counts [maxSortFiles]int
	nf := 0
	for k := range items {
		f, j := items[k].file, 0
		for j < nf && files[j] != f {
			j++
		}
		if j == nf {
			if nf == maxSortFiles {
				slices.SortStableFunc(items, func(a, b smallItem) int { return fileOrder(&a, &b) })
				return
			}
			files[nf] = f
			nf++
		}
		counts[j]++
	}
	order := make([]int, 0, maxSortFiles)
	for j := range nf {
		order = append(order, j)
	}
	slices.SortFunc(order, func(a, b int) int {
		return fileOrder(&smallItem{file: files[a]}, &smallItem{file: files[b]})
	})
	var start [maxSortFiles]int
	at := 0
	for _, j := range order {
		start[j], at = at, at+counts[j]
	}
	tmp := getItems(len(items))
	grouped := (*tmp)[:len(items)]
	next := start
	for k := range items {
		j := 0
		for files[j] != items[k].file {
			j++
		}
		grouped[next[j]] = items[k]
		next[j]++
	}
	for _, j := range order {
		if files[j] != "" {
			sortOffsets(grouped[start[j]:start[j]+counts[j]], items[start[j]:start[j]+counts[j]])
		}
	}
	copy(items, grouped)
	putItems(tmp, grouped)
}

// byOffset orders items of one file by offset.
func byOffset(a, b smallItem) int { return cmp.Compare(a.off, b.off) }

// sortOffsets sorts g, the items of one file, by offset, stably, with
// spare (as long) to merge in: a group is most often sorted already, or
// two sorted runs (items read through, readThrough, after the shard's
// own), merged in one pass.
func sortOffsets(g, spare []smallItem) {
	d := 1
	for d < len(g) && g[d-1].off <= g[d].off {
		d++
	}
	switch {
	case d >= len(g):
		return
	case !slices.IsSortedFunc(g[d:], byOffset):
		slices.SortStableFunc(g, byOffset)
		return
	}
	a, b, k := 0, d, 0
	for a < d && b < len(g) {
		if g[b].off < g[a].off {
			spare[k], b = g[b], b+1
		} else {
			spare[k], a = g[a], a+1
		}
		k++
	}
	k += copy(spare[k:], g[a:d])
	copy(spare[k:], g[b:])
	copy(g, spare)
}

// upload packs items and sets their fences in out.
func (p *packer) upload(ctx context.Context, items []smallItem, out []Fence) {
	if len(items) == 0 {
		return
	}
	if err := p.ensure(); err != nil {
		for _, it := range items {
			out[it.i] = errFence{&Error{Tensor: it.b.Name, Err: err}}
		}
		return
	}
	// Lay out the packs first, so that no more workers start than there
	// are packs (a layer's small tensors often make one, sent from this
	// goroutine).
	plans := planPacks(items)
	if readThrough(items, plans) > 0 {
		plans = planPacks(items)
	}
	send := func(pl *plan) {
		if err := ctx.Err(); err != nil {
			for _, it := range pl.items {
				out[it.i] = errFence{&Error{Tensor: it.b.Name, Err: err}}
			}
			return
		}
		p.send(ctx, pl, out)
	}
	if len(plans) == 1 {
		send(plans[0])
		return
	}
	work := make(chan *plan)
	var wg sync.WaitGroup
	for range min(p.workers, len(plans)) {
		wg.Go(func() {
			for pl := range work {
				send(pl)
			}
		})
	}
	for _, pl := range plans {
		work <- pl
	}
	close(work)
	wg.Wait()
}

// staged is what stage found of a plan's items: a header for each
// payload (pointing into hdrs), an error for each item that failed; and
// the items send submits. Its arrays are recycled (stagedPool): what
// send hands on (fences, the engine's Submit) keeps none of them.
type staged struct {
	hdr  []*codec.Header
	hdrs []codec.Header
	errs []error
	its  []scatter.Item
	// ent: the heads of entropy payloads the engine decodes (from
	// headPool, given back by put), and ents what send submits of them.
	ent  []*entropy.Head
	ents []scatter.Entropy
}

// headPool recycles the heads of entropy payloads staged for the engine
// (a kilobyte each: code lengths and a pair table).
var headPool = sync.Pool{New: func() any { return new(entropy.Head) }}

var stagedPool = sync.Pool{New: func() any { return new(staged) }}

// getStaged returns a staged for n items, cleared.
func getStaged(n int) *staged {
	st := stagedPool.Get().(*staged)
	st.hdr, st.hdrs, st.errs, st.ent = zeroed(st.hdr, n), zeroed(st.hdrs, n), zeroed(st.errs, n), zeroed(st.ent, n)
	st.its = slices.Grow(st.its[:0], n)
	return st
}

// put clears st and gives it back, with its entropy heads.
func (st *staged) put() {
	clear(st.its[:cap(st.its)]) // send appended within its capacity
	st.its = st.its[:0]
	clear(st.ents[:cap(st.ents)])
	st.ents = st.ents[:0]
	for _, h := range st.ent {
		if h != nil {
			headPool.Put(h)
		}
	}
	clear(st.ent)
	clear(st.hdr)
	clear(st.errs)
	stagedPool.Put(st)
}

// zeroed returns s with length n, zeroed.
func zeroed[T any](s []T, n int) []T {
	s = slices.Grow(s[:0], n)[:n]
	clear(s)
	return s
}

// parallelReadBytes is the least a goroutine of stage reads, unless
// fewer bytes are left.
const parallelReadBytes = 256 << 10

// readRun is how many of reads, from the first, make a run of at least
// parallelReadBytes (all of them if they make less).
func readRun(reads []stagedRead) int {
	var n uint64
	for k, r := range reads {
		n += r.n
		if n >= parallelReadBytes {
			return k + 1
		}
	}
	return len(reads)
}

// splitReadBytes is the most of one staged read a goroutine reads while
// others are free to take the rest. One core copies a few GB/s from the
// page cache, so a pack's 4 MiB read by one goroutine took 0.4-1.2 ms on
// the H100's host, the critical path of loading a checkpoint of small
// tensors (docs/perf/LOG.md, 2026-12-06, stop 58).
const splitReadBytes = 512 << 10

// readStaged reads r's bytes into dst (len(dst) == r.n): a read of more
// than splitReadBytes in parts, those after the first handed to other
// goroutines while fewer than p.fills read (else read here too).
func (p *packer) readStaged(r stagedRead, dst []byte) error {
	read := func(k uint64) error {
		return p.files.readAt(r.file, dst[k:min(k+splitReadBytes, r.n)], r.off+k)
	}
	if r.cached {
		// The range may span several members of a pack; an object's own
		// file is opened once for all the parts.
		ob, err := p.objects.Open(shardcache.Location{Path: r.file, Offset: r.off, Size: r.n, Packed: r.pack != "", Pack: r.pack})
		if err != nil {
			return err
		}
		defer ob.Close()
		read = func(k uint64) error {
			if _, err := ob.ReadAt(dst[k:min(k+splitReadBytes, r.n)], int64(k)); err != nil {
				return fmt.Errorf("%s: %w", ob.Name(), err)
			}
			return nil
		}
	}
	if r.n <= splitReadBytes {
		return read(0)
	}
	errs := make([]error, (r.n+splitReadBytes-1)/splitReadBytes)
	p.spread(len(errs), func(i int) { errs[i] = read(uint64(i) * splitReadBytes) })
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// readBounced reads r, a bounced read (stagedRead.bounce), into a
// buffer of its own and copies each of its items to its slot in staged,
// the staging buffer after the table.
func (p *packer) readBounced(r stagedRead, pl *plan, staged []byte) error {
	bp := bouncePool.Get().(*[]byte)
	defer bouncePool.Put(bp)
	b := (*bp)[:r.n]
	if err := p.readStaged(r, b); err != nil {
		return err
	}
	for k := r.first; k < r.last; k++ {
		it := &pl.items[k]
		n, at := it.fileBytes(), it.off-r.off
		copy(staged[pl.rel[k]:pl.rel[k]+n], b[at:at+n])
	}
	return nil
}

// spread calls fn(i) for i in [0, n): fn(0) in this goroutine, last, the
// others each on a goroutine of its own while p.fills has room, else here
// too; it returns when every call has.
func (p *packer) spread(n int, fn func(i int)) {
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		select {
		case p.fills <- struct{}{}:
			wg.Go(func() {
				defer func() { <-p.fills }()
				fn(i)
			})
		default:
			fn(i)
		}
	}
	fn(0)
	wg.Wait()
}

// stage fills a staging buffer as planned: its reads and the items with
// their own fill, in parallel, then the checks. An item that failed is
// reported in errs and left out of the scatter.
func (p *packer) stage(pl *plan, buf []byte, base uint64) *staged {
	n := len(pl.items)
	st := getStaged(n)
	var read, verify, decode atomic.Int64
	// check runs the checks of items [lo, hi), already read, adding their
	// time to verify and decode.
	check := func(lo, hi int) {
		t1 := time.Now()
		// A payload decoded in place (smallItem.read) is checked by its
		// decode, which counts as decoding, not checking.
		var decoding time.Duration
		checked := false
		for k := lo; k < hi; k++ {
			it := &pl.items[k]
			if it.check == nil {
				continue
			}
			// Capped: a check writes within its item's slot, never the next.
			q := buf[base+pl.rel[k] : base+pl.rel[k]+it.stored : base+pl.rel[k]+it.stored]
			if it.read == 0 {
				st.errs[k] = it.check.checkStaged(it, q, k, st)
				checked = true
				continue
			}
			d0 := time.Now()
			st.errs[k] = it.check.checkStaged(it, q, k, st)
			if st.ent[k] == nil {
				decoding += time.Since(d0)
			} else {
				checked = true // left for the engine: only checked
			}
		}
		decode.Add(int64(decoding))
		if checked {
			verify.Add(int64(time.Since(t1) - decoding))
		}
	}
	readOne := func(r stagedRead) {
		t0 := time.Now()
		var err error
		if r.bounce {
			err = p.readBounced(r, pl, buf[base:])
		} else {
			err = p.readStaged(r, buf[base+r.rel:base+r.rel+r.n])
		}
		read.Add(int64(time.Since(t0)))
		if err != nil {
			for k := r.first; k < r.last; k++ {
				st.errs[k] = err
			}
			return
		}
		// The checks of a large read's items, in runs of about
		// splitReadBytes, spread over free goroutines as its parts were.
		var cuts []int
		var run uint64
		for k := r.first; k < r.last; k++ {
			if run >= splitReadBytes {
				cuts, run = append(cuts, k), 0
			}
			run += pl.items[k].stored
		}
		if len(cuts) == 0 {
			check(r.first, r.last)
			return
		}
		cuts = append(cuts, r.last)
		p.spread(len(cuts), func(i int) {
			lo := r.first
			if i > 0 {
				lo = cuts[i-1]
			}
			check(lo, cuts[i])
		})
	}
	fills := 0
	for _, it := range pl.items {
		fills += btoi(it.file == "")
	}
	var wg sync.WaitGroup
	// Reads go to goroutines in runs of at least parallelReadBytes: a
	// goroutine's hand-off costs more than a few KiB copied from the page
	// cache, so the reads of a batch of tiny tensors run in one.
	reads := pl.reads
	for len(reads) > 0 {
		run := readRun(reads)
		group := reads[:run]
		reads = reads[run:]
		if len(reads) == 0 && fills == 0 {
			for _, r := range group {
				readOne(r) // the last (often the only) run in this goroutine
			}
			break
		}
		p.fills <- struct{}{}
		wg.Go(func() {
			defer func() { <-p.fills }()
			for _, r := range group {
				readOne(r)
			}
		})
	}
	for k := range pl.items {
		it := &pl.items[k] // not a copy: one a goroutine keeps is allocated
		if it.file != "" {
			continue
		}
		p.fills <- struct{}{}
		wg.Go(func() {
			defer func() { <-p.fills }()
			st.hdr[k], st.errs[k] = it.fill(buf[base+pl.rel[k] : base+pl.rel[k]+it.stored])
		})
	}
	wg.Wait()
	p.mu.Lock()
	p.stats.Read += time.Duration(read.Load())
	p.stats.Verify += time.Duration(verify.Load())
	p.stats.HostDecode += time.Duration(decode.Load())
	p.mu.Unlock()
	return st
}

// send stages one pack in a staging buffer and submits it; items whose
// check said errFallback are uploaded by p.fallback after it, once the
// staging buffer is given back (a fallback reads its payload again, the
// way it goes).
func (p *packer) send(ctx context.Context, pl *plan, out []Fence) {
	var falls []*smallItem
	defer func() { // run last, after the deferred calls below
		for _, it := range falls {
			out[it.i] = p.fallback(ctx, it)
		}
	}()
	s := <-p.slots
	defer func() { p.slots <- s }()
	if s.ev != nil {
		s.ev.Wait() // the copy that last read this buffer is done
		s.ev = nil
	}
	base := align16(scatter.TableBytes(len(pl.items)))
	st := p.stage(pl, s.buf, base)
	defer st.put()
	its, ents := st.its, st.ents
	for k := range pl.items {
		it := &pl.items[k]
		switch {
		case st.errs[k] == errFallback && p.fallback != nil:
			falls = append(falls, it)
		case st.errs[k] != nil:
			out[it.i] = errFence{&Error{Tensor: it.b.Name, Err: st.errs[k]}}
		case st.ent[k] != nil:
			ents = append(ents, scatter.Entropy{Name: it.b.Name, Dst: uint64(it.b.Addr), Src: base + pl.rel[k], Size: it.b.Size, Head: st.ent[k]})
		default:
			its = append(its, scatter.Item{Name: it.b.Name, Dst: uint64(it.b.Addr), Src: base + pl.rel[k], Stored: it.stored, Size: it.b.Size, Header: st.hdr[k]})
		}
	}
	st.its, st.ents = its, ents // their arrays, grown, go back to the pool with st
	n := len(its) + len(ents)
	if n == 0 {
		return
	}
	off := align16(base + pl.end)
	w := work(s.buf[:off], its)
	if len(ents) > 0 {
		// The entropy payloads' descriptors go after the staged bytes.
		w = engine.Work{Src: s.buf[:off+scatter.EntropyBytes(len(ents))], Items: its, Entropy: ents, EntropyAt: off}
	}
	t1 := time.Now()
	ev, err := p.eng.Submit(p.streams.pick(p.eng), w)
	p.mu.Lock()
	p.stats.Submit += time.Since(t1)
	if err == nil {
		p.stats.Bytes += off + scatter.EntropyBytes(len(ents))
	}
	p.mu.Unlock()
	// One fence an item naming it, allocated together.
	fs := make([]wrapFence, n)
	j := 0
	for k := range pl.items {
		it := &pl.items[k]
		switch {
		case st.errs[k] != nil:
		case err != nil:
			out[it.i] = errFence{&Error{Tensor: it.b.Name, Err: err}}
		default:
			fs[j] = wrapFence{ev, it.b.Name}
			out[it.i] = &fs[j]
			j++
		}
	}
	if err == nil {
		s.ev = ev
	}
}

// work is a pack's submission: a single raw binding or in-place payload
// is copied (and decoded) directly, anything else is scattered.
func work(buf []byte, its []scatter.Item) engine.Work {
	if len(its) == 1 {
		it := its[0]
		switch h := it.Header; {
		case h == nil:
			return engine.Work{Dst: engine.DevPtr(it.Dst), Src: buf[it.Src : it.Src+it.Stored]}
		case h.InPlace:
			return engine.Work{Dst: engine.DevPtr(it.Dst), Src: buf[it.Src : it.Src+it.Stored], Decode: &payload.Fixed{Header: *h}}
		}
	}
	return engine.Work{Src: buf, Items: its}
}

// Stats returns the packer's time and bytes.
func (p *packer) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// PinnedBytes returns the staging memory held.
func (p *packer) PinnedBytes() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pinned
}

// Close waits for the last copies and frees the staging ring.
func (p *packer) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.slots == nil {
		return
	}
	freeRing(p.eng, p.slots)
	p.slots, p.pinned = nil, 0
	p.files.close()
}
