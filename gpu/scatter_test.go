package gpu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/scatter"
)

// packed is a staging buffer under construction: a table then stored bytes.
type packed struct {
	items []scatter.Item
	blobs [][]byte
	want  [][]byte
	dst   uint64 // next destination offset
}

// add appends an item: payload (encoded from values) or raw bytes, at a
// destination offset shifted by skew bytes.
func (p *packed) add(t testing.TB, name string, values []byte, payload bool, skew uint64) {
	t.Helper()
	it := scatter.Item{Name: name, Dst: p.dst + skew, Size: uint64(len(values))}
	blob := values
	if payload {
		b, _, err := codec.Encode(values)
		if err != nil {
			t.Fatal(err)
		}
		h, err := codec.ParseHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		it.Header, blob = &h, b
	}
	it.Stored = uint64(len(blob))
	p.items = append(p.items, it)
	p.blobs = append(p.blobs, blob)
	p.want = append(p.want, values)
	p.dst += (skew + uint64(len(values)) + guard + 15) &^ 15
}

// stage lays the table and blobs out; destinations become absolute at base.
func (p *packed) stage(base uint64) []byte {
	off := scatter.TableBytes(len(p.items))
	off = (off + 15) &^ 15
	for i := range p.items {
		p.items[i].Src = off
		p.items[i].Dst += base
		off += (p.items[i].Stored + 15) &^ 15
	}
	buf := make([]byte, off)
	for i, it := range p.items {
		copy(buf[it.Src:], p.blobs[i])
	}
	return buf
}

// runScatter stages p, runs the kernel into a poisoned buffer and returns it
// (all destinations and guards) with the kernel's error.
func runScatter(t *testing.T, ctx *cuda.Context, d *Decoder, p *packed, corrupt func([]byte)) ([]byte, uint64, error) {
	t.Helper()
	s, err := ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.DestroyStream(s)
	total := guard + p.dst + guard
	out, err := ctx.Alloc(total)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Free(out)
	buf := p.stage(uint64(out) + guard)
	if err := scatter.Put(buf, p.items, uint64(len(buf))); err != nil {
		t.Fatal(err)
	}
	if corrupt != nil {
		corrupt(buf)
	}
	stage, err := ctx.Alloc(uint64(len(buf)))
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Free(stage)
	ctx.MemsetD8Async(out, 0xA5, total, s)
	ctx.CopyHtoDAsync(stage, buf, s)
	if err := d.LaunchScatter(stage, uint64(len(buf)), len(p.items), scatter.Units(p.items), s); err != nil {
		t.Fatal(err)
	}
	kerr := d.TakeError(s)
	host := make([]byte, total)
	ctx.CopyDtoHAsync(host, out, s)
	if err := ctx.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
	return host, uint64(out) + guard, kerr
}

// checkGuards fails if any byte outside the items' destinations changed.
func checkGuards(t *testing.T, host []byte, base uint64, p *packed) {
	t.Helper()
	covered := make([]bool, len(host))
	for _, it := range p.items {
		o := guard + it.Dst - base
		for i := o; i < o+it.Size; i++ {
			covered[i] = true
		}
	}
	for i, c := range covered {
		if !c && host[i] != 0xA5 {
			t.Fatalf("byte %d outside every destination was written", i)
		}
	}
}

func TestScatterMatchesReference(t *testing.T) {
	ctx, d := requireGPU(t)
	rng := seeded(t)
	var p packed
	for i, c := range cases(rng, testing.Short()) {
		p.add(t, c.name, c.values, true, 0)
		if i%3 == 0 { // the same values raw, at an odd destination
			p.add(t, c.name+" raw", c.values, false, uint64(1+i%15))
		}
	}
	for _, n := range []int{1, 7, 4096, 32768 + 3} {
		p.add(t, fmt.Sprintf("small n=%d", n), synth.Normal(rng, n, 0.02), true, 0)
		v := synth.Normal(rng, n, 0.02)
		p.add(t, fmt.Sprintf("raw %d bytes", len(v)-1), v[:len(v)-1], false, 0)
	}
	host, base, err := runScatter(t, ctx, d, &p, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, it := range p.items {
		o := guard + it.Dst - base
		if got := host[o : o+it.Size]; !bytes.Equal(got, p.want[i]) {
			t.Fatalf("%s: differs from the reference at byte %d", it.Name, firstDiff(got, p.want[i]))
		}
	}
	checkGuards(t, host, base, &p)
	t.Logf("%d items scattered in one launch, bit exact", len(p.items))
}

func TestScatterCorrupt(t *testing.T) {
	ctx, d := requireGPU(t)
	rng := seeded(t)
	C := codec.ChunkValues
	runs := 200
	if testing.Short() {
		runs = 30
	}
	reported := 0
	for r := range runs {

		var p packed
		for _, n := range []int{C + 5, 3 * C, 100} {
			v := synth.Normal(rng, n, 0.02)
			for i := 0; i < n/50; i++ {
				v[2*rng.IntN(n)+1] = 0x00 // escapes
			}
			p.add(t, fmt.Sprint(n), v, true, 0)
		}
		p.add(t, "raw", synth.Normal(rng, 999, 0.02), false, 0)
		// The table and headers are written by the host (trusted); the
		// payload bytes after each header are what the kernel must survive.
		host, base, err := runScatter(t, ctx, d, &p, func(buf []byte) {
			for k := 0; k <= rng.IntN(4); k++ {
				it := p.items[rng.IntN(3)]
				pos := it.Src + codec.HeaderSize + uint64(rng.IntN(int(it.Stored-codec.HeaderSize)))
				buf[pos] ^= byte(1 + rng.IntN(255))
			}
			// Every fourth run, a payload's unit fields too: whatever
			// they say, no unit writes outside its item (though units
			// may then be taken for another item's and not be done).
			if r%4 == 0 {
				buf[scatter.EntryBytes*rng.IntN(3)+56+rng.IntN(8)] ^= byte(1 + rng.IntN(255))
			}
		})
		if err != nil {
			if !errors.Is(err, ErrKernel) {
				t.Fatal(err)
			}
			reported++
		}
		checkGuards(t, host, base, &p)
		// The raw item is untouched by corruption of payload bytes.
		raw := p.items[3]
		if o := guard + raw.Dst - base; r%4 != 0 && !bytes.Equal(host[o:o+raw.Size], p.want[3]) {
			t.Fatalf("run %d: the raw item next to corrupt payloads differs", r)
		}
	}
	t.Logf("%d of %d corrupted staging buffers reported by the kernel", reported, runs)
}

// TestScatterRouted: one routed launch over candidate packs in device and
// pinned host memory writes exactly the wanted ones, bit exact; the
// tables are read at run time (a second launch with other wants writes
// the others); a wanted candidate with no buffer is reported.
func TestScatterRouted(t *testing.T) {
	ctx, d := requireGPU(t)
	rng := seeded(t)
	s, err := ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.DestroyStream(s)
	const n = 5
	packs := make([]packed, n)
	var span uint64 // each pack's destinations, guards on both sides
	for k := range packs {
		for j := range 1 + k%3 {
			v := synth.Normal(rng, 1000+rng.IntN(3*codec.ChunkValues), 0.02)
			packs[k].add(t, fmt.Sprintf("pack %d item %d", k, j), v, j%2 == 0, 0)
		}
		span = max(span, guard+packs[k].dst+guard)
	}
	out, err := ctx.Alloc(n * span)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Free(out)
	table := make([]byte, n*RoutedPackBytes)
	for k := range packs {
		p := &packs[k]
		buf := p.stage(uint64(out) + uint64(k)*span + guard)
		if err := scatter.Put(buf, p.items, uint64(len(buf))); err != nil {
			t.Fatal(err)
		}
		var base uint64
		if k%2 == 0 { // device memory
			dev, err := ctx.Alloc(uint64(len(buf)))
			if err != nil {
				t.Fatal(err)
			}
			defer ctx.Free(dev)
			if err := ctx.CopyHtoDAsync(dev, buf, s); err != nil {
				t.Fatal(err)
			}
			base = uint64(dev)
		} else { // pinned host memory, read by the kernel over the bus
			host, err := ctx.HostAlloc(uint64(len(buf)), 0)
			if err != nil {
				t.Fatal(err)
			}
			defer ctx.FreeHost(host)
			copy(host, buf)
			base = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(host))))
		}
		row := table[k*RoutedPackBytes:]
		binary.LittleEndian.PutUint64(row[0:], base)
		binary.LittleEndian.PutUint64(row[8:], uint64(len(buf)))
		binary.LittleEndian.PutUint64(row[16:], uint64(len(p.items)))
		binary.LittleEndian.PutUint64(row[24:], scatter.Units(p.items))
	}
	dt, err := ctx.Alloc(uint64(len(table)) + 16)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Free(dt)
	want := dt + cuda.DevicePtr(len(table))
	ctx.CopyHtoDAsync(dt, table, s)
	ctx.MemsetD8Async(out, 0xA5, n*span, s)
	// run scatters the candidates of flags and returns every destination.
	run := func(flags []byte) ([]byte, error) {
		t.Helper()
		ctx.CopyHtoDAsync(want, flags, s)
		if err := d.LaunchScatterRouted(dt, want, n, 2, s); err != nil {
			t.Fatal(err)
		}
		kerr := d.TakeError(s)
		host := make([]byte, n*span)
		ctx.CopyDtoHAsync(host, out, s)
		if err := ctx.StreamSynchronize(s); err != nil {
			t.Fatal(err)
		}
		return host, kerr
	}
	// check compares candidate k's destinations (written or poisoned).
	check := func(host []byte, k int, written bool) {
		t.Helper()
		p := &packs[k]
		base := uint64(out) + uint64(k)*span + guard
		part := host[uint64(k)*span : uint64(k+1)*span]
		for i, it := range p.items {
			o := guard + it.Dst - base
			got := part[o : o+it.Size]
			if written && !bytes.Equal(got, p.want[i]) {
				t.Fatalf("%s: differs from the reference at byte %d", it.Name, firstDiff(got, p.want[i]))
			}
			if !written && !bytes.Equal(got, bytes.Repeat([]byte{0xA5}, len(got))) {
				t.Fatalf("%s: written though its candidate was not wanted", it.Name)
			}
		}
		checkGuards(t, part, base, p)
	}
	host, err := run([]byte{1, 0, 0, 1, 0})
	if err != nil {
		t.Fatal(err)
	}
	for k := range n {
		check(host, k, k == 0 || k == 3)
	}
	host, err = run([]byte{0, 1, 1, 0, 1})
	if err != nil {
		t.Fatal(err)
	}
	for k := range n {
		check(host, k, true)
	}
	// A wanted candidate without a buffer writes nothing and is reported.
	binary.LittleEndian.PutUint64(table[4*RoutedPackBytes:], 0)
	ctx.CopyHtoDAsync(dt, table, s)
	ctx.MemsetD8Async(out+cuda.DevicePtr(4*span), 0xA5, span, s)
	host, err = run([]byte{0, 0, 0, 0, 1})
	if !errors.Is(err, ErrKernel) {
		t.Fatalf("a candidate with no buffer: err %v, want ErrKernel", err)
	}
	check(host, 4, false)
	t.Logf("%d candidates (device and pinned host memory) scattered by want flags, bit exact", n)
}

// BenchmarkScatterRouted: one candidate of 64 MiB of BF16 values (eight
// fixed payloads) scattered by the routed kernel from device memory and
// from pinned host memory, which the kernel reads over the bus. Bytes/s
// count the values written; stored-GB/s the payload bytes read.
func BenchmarkScatterRouted(b *testing.B) {
	for _, host := range []bool{false, true} {
		name := "device"
		if host {
			name = "pinned-host"
		}
		b.Run(name, func(b *testing.B) { benchRouted(b, host) })
	}
}

func benchRouted(b *testing.B, host bool) {
	ctx, d := requireGPU(b)
	rng := rand.New(rand.NewPCG(1, 2))
	var p packed
	for j := range 8 {
		p.add(b, fmt.Sprint(j), synth.Normal(rng, 4<<20, 0.02), true, 0)
	}
	s, err := ctx.NewStream()
	if err != nil {
		b.Fatal(err)
	}
	defer ctx.DestroyStream(s)
	out, err := ctx.Alloc(p.dst)
	if err != nil {
		b.Fatal(err)
	}
	defer ctx.Free(out)
	buf := p.stage(uint64(out))
	if err := scatter.Put(buf, p.items, uint64(len(buf))); err != nil {
		b.Fatal(err)
	}
	var base uint64
	if host {
		h, err := ctx.HostAlloc(uint64(len(buf)), 0)
		if err != nil {
			b.Fatal(err)
		}
		defer ctx.FreeHost(h)
		copy(h, buf)
		base = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(h))))
	} else {
		dev, err := ctx.Alloc(uint64(len(buf)))
		if err != nil {
			b.Fatal(err)
		}
		defer ctx.Free(dev)
		ctx.CopyHtoDAsync(dev, buf, s)
		base = uint64(dev)
	}
	table := make([]byte, RoutedPackBytes+16)
	binary.LittleEndian.PutUint64(table[0:], base)
	binary.LittleEndian.PutUint64(table[8:], uint64(len(buf)))
	binary.LittleEndian.PutUint64(table[16:], uint64(len(p.items)))
	binary.LittleEndian.PutUint64(table[24:], scatter.Units(p.items))
	table[RoutedPackBytes] = 1 // want
	dt, err := ctx.Alloc(uint64(len(table)))
	if err != nil {
		b.Fatal(err)
	}
	defer ctx.Free(dt)
	ctx.CopyHtoDAsync(dt, table, s)
	launch := func() {
		if err := d.LaunchScatterRouted(dt, dt+RoutedPackBytes, 1, 1, s); err != nil {
			b.Fatal(err)
		}
	}
	launch() // warm-up
	if err := ctx.StreamSynchronize(s); err != nil {
		b.Fatal(err)
	}
	var raw uint64
	for _, it := range p.items {
		raw += it.Size
	}
	b.SetBytes(int64(raw))
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		launch()
	}
	if err := ctx.StreamSynchronize(s); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(buf))*float64(b.N)/time.Since(start).Seconds()/1e9, "stored-GB/s")
	if err := d.TakeError(s); err != nil {
		b.Fatal(err)
	}
}
