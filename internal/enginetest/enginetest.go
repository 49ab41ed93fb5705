// Package enginetest is the conformance suite of engine.Engine: every
// implementation runs it (hostengine in CI, cudaengine on a GPU machine),
// so the transports can rely on one contract. It checks memory (reserve,
// map, pinned buffers), copies from the host and within the device,
// read-back, in-place decodes against the Go reference (each after the
// copies before it on its stream, with later copies queued behind it),
// scatters of
// packed raw and payload items, ordering on one stream, cross-stream
// waits, events that follow exactly their own submission while many
// goroutines submit, that a corrupt payload is reported (by the event
// after its decode, or by engine.DecodeErrorer) while later work still
// runs, batch decodes of entropy payloads of a staging buffer (every
// field, pair symbols, raw and constant chunks, damaged ones reported
// without a byte written outside their destinations), and copies from
// another engine's memory (engine.Peered).
package enginetest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/codec/payload"
	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/scatter"
)

// Run runs the suite on engines that newEngine makes with at least two
// streams; each is closed by the suite.
func Run(t *testing.T, newEngine func(t *testing.T) engine.Engine) {
	for _, c := range []struct {
		name string
		run  func(*testing.T, engine.Engine)
	}{
		{"CopyAndReadBack", copyAndReadBack},
		{"CopyWithinDevice", copyWithinDevice},
		{"OrderOnOneStream", orderOnOneStream},
		{"WaitAcrossStreams", waitAcrossStreams},
		{"ConcurrentSubmits", concurrentSubmits},
		{"DecodeInPlace", decodeInPlace},
		{"DecodesFollowTheirCopies", decodesFollowTheirCopies},
		{"EntropyDecodeInPlace", entropyDecodeInPlace},
		{"Scatter", scatterPack},
		{"EntropyBatch", entropyBatch},
		{"CorruptPayloadReported", corruptPayload},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEngine(t)
			// Closed after the regions' cleanups (registered later, run first).
			t.Cleanup(func() {
				if err := e.Close(); err != nil {
					t.Errorf("close: %v", err)
				}
			})
			if e.Streams() < 2 {
				t.Fatalf("%d streams, the suite needs 2", e.Streams())
			}
			c.run(t, e)
		})
	}
	t.Run("PeerCopy", func(t *testing.T) {
		a, b := newEngine(t), newEngine(t)
		t.Cleanup(func() {
			for _, e := range []engine.Engine{a, b} {
				if err := e.Close(); err != nil {
					t.Errorf("close: %v", err)
				}
			}
		})
		peerCopy(t, a, b)
	})
}

// peerCopy copies a payload from one engine's memory to another's (a
// peer copy), plain and then decoded in place where it lands.
func peerCopy(t *testing.T, a, b engine.Engine) {
	pa, ok1 := a.(engine.Peered)
	pb, ok2 := b.(engine.Peered)
	if !ok1 || !ok2 {
		t.Skipf("%s does not copy between engines", a.Name())
	}
	for _, p := range []engine.Peered{pa, pb} {
		if err := p.AllowPeers([]engine.Engine{a, b}); err != nil {
			t.Fatal(err)
		}
	}
	values, p, h := Payload(t, 3*codec.ChunkValues+5)
	src := alloc(t, a, uint64(len(values)))
	dst := alloc(t, b, uint64(len(values)))
	copy(src.host, p)
	wait(t, submit(t, a, 0, engine.Work{Dst: src.base, Src: src.host[:len(p)]}))
	wait(t, submit(t, b, 1, engine.Work{Dst: dst.base, From: src.base, N: uint64(len(p)), Peer: a}))
	if got := readBack(t, b, dst.base, len(p)); !bytes.Equal(got, p) {
		t.Fatal("a peer copy differs")
	}
	wait(t, submit(t, b, 0, engine.Work{Dst: dst.base, From: src.base, N: uint64(len(p)), Peer: a, Decode: &payload.Fixed{Header: h}}))
	if got := readBack(t, b, dst.base, len(values)); !bytes.Equal(got, values) {
		t.Fatal("a payload copied from a peer and decoded in place differs")
	}
}

// region is a mapped device range and a pinned buffer of the same size.
type region struct {
	base engine.DevPtr
	size uint64
	host []byte
}

func alloc(t *testing.T, e engine.Engine, n uint64) region {
	t.Helper()
	g := e.Granularity()
	size := (n + g - 1) / g * g
	base, err := e.Reserve(size)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Map(base, size); err != nil {
		t.Fatal(err)
	}
	host, err := e.Pinned(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.FreePinned(host); err != nil {
			t.Errorf("free pinned: %v", err)
		}
		if err := e.Unmap(base, size); err != nil {
			t.Errorf("unmap: %v", err)
		}
		if err := e.Release(base, size); err != nil {
			t.Errorf("release: %v", err)
		}
	})
	return region{base, size, host}
}

// submit submits w on stream s and returns its event.
func submit(t *testing.T, e engine.Engine, s int, w engine.Work) engine.Event {
	t.Helper()
	ev, err := e.Submit(s, w)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// wait waits for ev, which must complete without error and be done.
func wait(t *testing.T, ev engine.Event) {
	t.Helper()
	if err := ev.Wait(); err != nil {
		t.Fatal(err)
	}
	if !ev.Done() {
		t.Fatal("event not done after Wait")
	}
}

func readBack(t *testing.T, e engine.Engine, p engine.DevPtr, n int) []byte {
	t.Helper()
	out := make([]byte, n)
	if err := e.ReadBack(out, p); err != nil {
		t.Fatal(err)
	}
	return out
}

func copyAndReadBack(t *testing.T, e engine.Engine) {
	rng := rand.New(rand.NewPCG(1, 1))
	r := alloc(t, e, 3<<20+17)
	for i := range r.host {
		r.host[i] = byte(rng.Uint32())
	}
	wait(t, submit(t, e, 0, engine.Work{Dst: r.base, Src: r.host}))
	if got := readBack(t, e, r.base, len(r.host)); !bytes.Equal(got, r.host) {
		t.Fatal("read-back differs from what was copied")
	}
}

// copyWithinDevice copies device memory to device memory, then decodes
// a payload copied so in place.
func copyWithinDevice(t *testing.T, e engine.Engine) {
	values, p, h := Payload(t, 2*codec.ChunkValues+9)
	a := alloc(t, e, uint64(len(values)))
	b := alloc(t, e, uint64(len(values)))
	copy(a.host, p)
	wait(t, submit(t, e, 0, engine.Work{Dst: a.base, Src: a.host[:len(p)]}))
	wait(t, submit(t, e, 1, engine.Work{Dst: b.base, From: a.base, N: uint64(len(p))}))
	if got := readBack(t, e, b.base, len(p)); !bytes.Equal(got, p) {
		t.Fatal("a copy within device memory differs")
	}
	wait(t, submit(t, e, 1, engine.Work{Dst: b.base, From: a.base, N: uint64(len(p)), Decode: &payload.Fixed{Header: h}}))
	if got := readBack(t, e, b.base, len(values)); !bytes.Equal(got, values) {
		t.Fatal("a payload copied within device memory and decoded in place differs")
	}
}

func orderOnOneStream(t *testing.T, e engine.Engine) {
	a := alloc(t, e, 1<<20)
	b := alloc(t, e, 1<<20)
	for i := range a.host {
		a.host[i], b.host[i] = 1, 2
	}
	// Two copies to the same place on one stream land in order.
	first := submit(t, e, 1, engine.Work{Dst: a.base, Src: a.host})
	wait(t, submit(t, e, 1, engine.Work{Dst: a.base, Src: b.host}))
	if !first.Done() {
		t.Fatal("an event is done before the one submitted earlier on its stream")
	}
	if got := readBack(t, e, a.base, len(a.host)); !bytes.Equal(got, b.host) {
		t.Fatal("the second copy on a stream did not land last")
	}
}

func waitAcrossStreams(t *testing.T, e engine.Engine) {
	a := alloc(t, e, 4<<20)
	b := alloc(t, e, 4<<20)
	for i := range a.host {
		a.host[i], b.host[i] = 3, 4
	}
	ev := submit(t, e, 0, engine.Work{Dst: a.base, Src: a.host})
	// Stream 1 waits for stream 0's copy, then overwrites it.
	if err := e.WaitEvent(1, ev); err != nil {
		t.Fatal(err)
	}
	wait(t, submit(t, e, 1, engine.Work{Dst: a.base, Src: b.host}))
	wait(t, ev)
	if got := readBack(t, e, a.base, len(a.host)); !bytes.Equal(got, b.host) {
		t.Fatal("a copy after WaitEvent ran before the work it waited for")
	}
}

// concurrentSubmits has many goroutines submit to the same streams at
// once: each event must follow its own submission's work, whatever the
// others enqueued around it, and an empty submission is an event alone.
func concurrentSubmits(t *testing.T, e engine.Engine) {
	const workers, each, piece = 16, 8, 64 << 10
	r := alloc(t, e, workers*each*piece)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for k := range each {
				off := uint64(w*each+k) * piece
				src := r.host[off : off+piece]
				for i := range src {
					src[i] = byte(w*31 + k*7 + i)
				}
				ev, err := e.Submit(w%2, engine.Work{Dst: r.base + engine.DevPtr(off), Src: src})
				if err == nil {
					err = ev.Wait()
				}
				if err != nil {
					errs <- err
					return
				}
				got := make([]byte, piece)
				if err := e.ReadBack(got, r.base+engine.DevPtr(off)); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, src) {
					errs <- fmt.Errorf("worker %d piece %d: its event completed before its copy had landed", w, k)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	wait(t, submit(t, e, 1, engine.Work{}))
}

// Payload returns n real-looking BF16 values (their bytes), a payload of
// them that decodes in place, and its header; engine tests of their own
// use it too.
func Payload(t *testing.T, n int) ([]byte, []byte, codec.Header) {
	t.Helper()
	rng := rand.New(rand.NewPCG(2, uint64(n)))
	values := synth.Normal(rng, n, 0.02)
	p, st, err := codec.Encode(values)
	if err != nil || !st.InPlace {
		t.Fatalf("encode: %v, in place %v", err, st.InPlace)
	}
	h, err := codec.ParseHeader(p)
	if err != nil {
		t.Fatal(err)
	}
	return values, p, h
}

func decodeInPlace(t *testing.T, e engine.Engine) {
	values, p, h := Payload(t, 5*codec.ChunkValues+123)
	r := alloc(t, e, uint64(len(values)))
	copy(r.host, p)
	wait(t, submit(t, e, 0, engine.Work{Dst: r.base, Src: r.host[:len(p)], Decode: &payload.Fixed{Header: h}}))
	if got := readBack(t, e, r.base, len(values)); !bytes.Equal(got, values) {
		t.Fatal("in-place decode differs from the reference")
	}
}

// decodesFollowTheirCopies queues, on both streams, payloads copied in
// two pieces with a decode-only submission after them, and payloads
// copied and decoded in one submission, each followed by raw copies
// elsewhere: every decode must see all of its payload's bytes (an engine
// that decodes beside its copies must wait for the copies before it),
// and each event must follow its own decode.
func decodesFollowTheirCopies(t *testing.T, e engine.Engine) {
	// Payloads of 1.5 MB: a decode that did not wait would start well
	// before its copy ends.
	const n = 16
	values, p, h := Payload(t, 1<<20+77)
	half := uint64(len(p)/2) &^ 15
	rs := make([]region, n)
	raw := alloc(t, e, n*64<<10)
	for i := range raw.host {
		raw.host[i] = byte(i * 13)
	}
	evs := make([]engine.Event, 0, 2*n)
	for i := range rs {
		r := alloc(t, e, uint64(len(values)))
		copy(r.host, p)
		rs[i] = r
		s := i % 2
		if i%4 < 2 {
			submit(t, e, s, engine.Work{Dst: r.base, Src: r.host[:half]})
			submit(t, e, s, engine.Work{Dst: r.base + engine.DevPtr(half), Src: r.host[half:len(p)]})
			evs = append(evs, submit(t, e, s, engine.Work{Dst: r.base, Decode: &payload.Fixed{Header: h}}))
		} else {
			evs = append(evs, submit(t, e, s, engine.Work{Dst: r.base, Src: r.host[:len(p)], Decode: &payload.Fixed{Header: h}}))
		}
		off := uint64(i) * 64 << 10
		evs = append(evs, submit(t, e, s, engine.Work{Dst: raw.base + engine.DevPtr(off), Src: raw.host[off : off+64<<10]}))
	}
	for i, r := range rs {
		wait(t, evs[2*i])
		if got := readBack(t, e, r.base, len(values)); !bytes.Equal(got, values) {
			t.Fatalf("payload %d: the decode did not see its copies, or its event came before it", i)
		}
	}
	for _, ev := range evs {
		wait(t, ev)
	}
	if got := readBack(t, e, raw.base, len(raw.host)); !bytes.Equal(got, raw.host) {
		t.Fatal("raw copies queued behind decodes did not land")
	}
}

// entropyDecodeInPlace decodes entropy payloads of BF16 and FP8 (whole
// bytes) values in place, and reports one whose records are damaged.
func entropyDecodeInPlace(t *testing.T, e engine.Engine) {
	rng := rand.New(rand.NewPCG(3, 4))
	bf := synth.Normal(rng, 7*codec.ChunkValues+77, 0.02)
	for _, c := range []struct {
		field  int
		values []byte
	}{{0, bf}, {4, synth.Cast(bf, "F8_E4M3", 4096)}} {
		p, err := entropy.Encode(c.field, c.values, 0)
		if err != nil {
			t.Fatal(err)
		}
		ph, err := payload.CheckBytes(payload.KindEntropy, p, payload.Sum(p), uint64(len(c.values)))
		if err != nil || !ph.InPlace() {
			t.Fatalf("%s: %v, in place %v", entropy.Fields[c.field].Name(), err, ph != nil && ph.InPlace())
		}
		h := ph.(*payload.Entropy)
		r := alloc(t, e, uint64(len(c.values)))
		copy(r.host, p)
		wait(t, submit(t, e, 0, engine.Work{Dst: r.base, Src: r.host[:len(p)], Decode: h}))
		if got := readBack(t, e, r.base, len(c.values)); !bytes.Equal(got, c.values) {
			t.Fatalf("%s: in-place entropy decode differs from the reference", entropy.Fields[c.field].Name())
		}
		// A damaged symbol chunk (its mode byte and header), the head
		// trusted: an error on the event or from DecodeErrors, and the
		// engine goes on.
		bad := bytes.Clone(p)
		sym := h.Others + uint64(codec.ChunkValues*entropy.Fields[c.field].Other()/8) // chunk 0's symbols
		for i := sym; i < sym+8; i++ {
			bad[i] ^= 0xFF
		}
		copy(r.host, bad)
		err = submit(t, e, 1, engine.Work{Dst: r.base, Src: r.host[:len(bad)], Decode: h}).Wait()
		if de, ok := e.(engine.DecodeErrorer); ok && err == nil {
			err = de.DecodeErrors()
		}
		if err == nil {
			t.Errorf("%s: a damaged entropy payload decoded without an error", entropy.Fields[c.field].Name())
		}
	}
}

func scatterPack(t *testing.T, e engine.Engine) {
	values, p, h := Payload(t, 3*codec.ChunkValues+5)
	raw := []byte("raw bytes of a small tensor, 37 bytes")
	dst := alloc(t, e, 1<<20)
	table := scatter.TableBytes(2)
	align := func(n uint64) uint64 { return (n + 15) &^ 15 }
	offRaw := align(table)
	offPay := align(offRaw + uint64(len(raw)))
	packed := make([]byte, align(offPay+uint64(len(p))))
	staged, err := e.Pinned(uint64(len(packed)))
	if err != nil {
		t.Fatal(err)
	}
	defer e.FreePinned(staged)
	copy(staged[offRaw:], raw)
	copy(staged[offPay:], p)
	hc := h
	items := []scatter.Item{
		{Name: "raw", Dst: uint64(dst.base) + 1, Src: offRaw, Stored: uint64(len(raw)), Size: uint64(len(raw))},
		{Name: "payload", Dst: uint64(dst.base) + 4096, Src: offPay, Stored: uint64(len(p)), Size: uint64(len(values)), Header: &hc},
	}
	ev := submit(t, e, 1, engine.Work{Src: staged[:len(packed)], Items: items})
	// Submit keeps neither the items nor their headers (engine.Work):
	// the caller reuses them at once.
	hc = codec.Header{}
	for i := range items {
		items[i] = scatter.Item{Name: "reused", Dst: uint64(dst.base), Size: 1 << 20}
	}
	wait(t, ev)
	items = []scatter.Item{
		{Name: "raw", Dst: uint64(dst.base) + 1, Src: offRaw, Stored: uint64(len(raw)), Size: uint64(len(raw))},
		{Name: "payload", Dst: uint64(dst.base) + 4096, Src: offPay, Stored: uint64(len(p)), Size: uint64(len(values)), Header: &h},
	}
	if got := readBack(t, e, dst.base+1, len(raw)); !bytes.Equal(got, raw) {
		t.Errorf("scattered raw item: %q", got)
	}
	if got := readBack(t, e, dst.base+4096, len(values)); !bytes.Equal(got, values) {
		t.Error("scattered payload differs from the reference")
	}
	// The table apart (engine.Work.Table), as from a buffer this process
	// must not write: the room in Src is left as it is and overwritten
	// on the device.
	room := staged[:table]
	for i := range room {
		room[i] = 0xA5
	}
	tb, err := e.Pinned(table)
	if err != nil {
		t.Fatal(err)
	}
	defer e.FreePinned(tb)
	dst2 := alloc(t, e, 1<<20)
	items2 := []scatter.Item{
		{Name: "raw", Dst: uint64(dst2.base) + 3, Src: offRaw, Stored: uint64(len(raw)), Size: uint64(len(raw))},
		{Name: "payload", Dst: uint64(dst2.base) + 8192, Src: offPay, Stored: uint64(len(p)), Size: uint64(len(values)), Header: &h},
	}
	wait(t, submit(t, e, 0, engine.Work{Src: staged[:len(packed)], Items: items2, Table: tb}))
	if got := readBack(t, e, dst2.base+3, len(raw)); !bytes.Equal(got, raw) {
		t.Errorf("scattered raw item, table apart: %q", got)
	}
	if got := readBack(t, e, dst2.base+8192, len(values)); !bytes.Equal(got, values) {
		t.Error("scattered payload, table apart, differs from the reference")
	}
	if bytes.Count(room, []byte{0xA5}) != len(room) {
		t.Error("a scatter with its table apart wrote the room in Src")
	}
	// A Table too short for the items is refused, nothing written.
	short := tb[:table-1]
	for i := range short {
		short[i] = 0x5A
	}
	if ev, err := e.Submit(0, engine.Work{Src: staged[:len(packed)], Items: items2, Table: short}); err == nil || ev != nil {
		t.Errorf("a scatter with a table of %d bytes for %d: event %v, error %v; want no event and an error", len(short), table, ev, err)
	}
	if bytes.Count(short, []byte{0x5A}) != len(short) || bytes.Count(room, []byte{0xA5}) != len(room) {
		t.Error("a refused scatter wrote its table or the room in Src")
	}
	// An item outside the staging buffer is refused before anything runs.
	items[0].Src = uint64(len(packed))
	if ev, err := e.Submit(1, engine.Work{Src: staged[:len(packed)], Items: items}); err == nil || ev != nil {
		t.Errorf("a scatter item outside its buffer: event %v, error %v; want no event and an error", ev, err)
	}
}

func corruptPayload(t *testing.T, e engine.Engine) {
	values, p, h := Payload(t, 9*codec.ChunkValues)
	bad := bytes.Clone(p)
	// Corrupt a chunk entry table: the header stays trusted (hosts parse
	// it) and the decode itself must find the damage.
	for i := h.DataStart(); i < h.DataStart()+64 && i < uint64(len(bad)); i++ {
		bad[i] = 0xFF
	}
	r := alloc(t, e, uint64(len(values)))
	copy(r.host, bad)
	err := submit(t, e, 0, engine.Work{Dst: r.base, Src: r.host[:len(bad)], Decode: &payload.Fixed{Header: h}}).Wait()
	if de, ok := e.(engine.DecodeErrorer); ok && err == nil {
		err = de.DecodeErrors()
	}
	if err == nil {
		t.Fatal("neither the event after a corrupt payload's decode nor DecodeErrors reported an error")
	}
	// Later work on the engine runs.
	good := alloc(t, e, uint64(len(values)))
	copy(good.host, p)
	wait(t, submit(t, e, 1, engine.Work{Dst: good.base, Src: good.host[:len(p)], Decode: &payload.Fixed{Header: h}}))
	if de, ok := e.(engine.DecodeErrorer); ok {
		if err := de.DecodeErrors(); err != nil {
			t.Fatalf("DecodeErrors after a good decode: %v", err)
		}
	}
	if got := readBack(t, e, good.base, len(values)); !bytes.Equal(got, values) {
		t.Fatal("a decode after a failed one differs from the reference")
	}
}

// batchPayloads returns entropy payloads for a batch decode, each with
// its values: every field, single and pair symbols, a chunk's worth and
// odd lengths, more chunks than a unit of work (scatter.EntropyUnitChunks), and raw
// and constant chunks (random bytes, zeros).
func batchPayloads(t *testing.T) (ps, vals [][]byte, hs []*entropy.Head) {
	rng := rand.New(rand.NewPCG(5, 6))
	C := codec.ChunkValues
	bf := synth.Normal(rng, 7*C+77, 0.02)
	random := make([]byte, 2*C+30)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	for _, c := range []struct {
		field  int
		values []byte
	}{
		{0, bf}, {0, bf[:2000]}, {0, random}, {0, make([]byte, 2*C)},
		{1, synth.Cast(bf, "F16", 4096)}, {2, synth.Cast(bf[:2*(C+3)], "F32", 4096)},
		{3, synth.Cast(bf, "F8_E4M3", 4096)}, {4, synth.Cast(synth.Normal(rng, 16*C, 0.02), "F8_E4M3", 4096)},
		{5, synth.Cast(bf[:2*3001], "F8_E5M2", 4096)}, {6, synth.Cast(bf, "F8_E5M2", 4096)},
	} {
		p, err := entropy.Encode(c.field, c.values, 0)
		if err != nil {
			t.Fatal(err)
		}
		h, err := entropy.Check(p)
		if err != nil {
			t.Fatal(err)
		}
		ps, vals, hs = append(ps, p), append(vals, c.values), append(hs, h)
	}
	pairs := 0
	for _, h := range hs {
		if h.Pairs {
			pairs++
		}
	}
	if pairs == 0 || pairs == len(hs) {
		t.Fatalf("%d of %d payloads of pair symbols: the batch must hold both kinds", pairs, len(hs))
	}
	return ps, vals, hs
}

// entropyBatch: entropy payloads of a staging buffer (engine.Work.Entropy),
// beside a scatter's items and without any, decode into their
// destinations and nowhere else; Submit keeps neither them nor their
// heads; bad descriptors' room or payloads are refused before anything
// runs; a payload damaged after its check is reported, and the others of
// its batch still decode.
func entropyBatch(t *testing.T, e engine.Engine) {
	ps, vals, hs := batchPayloads(t)
	raw := []byte("raw bytes beside the entropy payloads")
	align := func(n uint64) uint64 { return (n + 15) &^ 15 }
	// The staging buffer: a table of one raw item, the raw bytes, the
	// payloads, then their descriptors.
	offRaw := align(scatter.TableBytes(1))
	at := align(offRaw + uint64(len(raw)))
	offs := make([]uint64, len(ps))
	for i, p := range ps {
		offs[i], at = at, align(at+uint64(len(p)))
	}
	staged, err := e.Pinned(at + scatter.EntropyBytes(len(ps)))
	if err != nil {
		t.Fatal(err)
	}
	defer e.FreePinned(staged)
	copy(staged[offRaw:], raw)
	for i, p := range ps {
		copy(staged[offs[i]:], p)
	}
	// Destinations 4 KiB apart past their values, the gaps filled with a
	// guard pattern the decodes must leave.
	dsts := make([]uint64, len(ps))
	var size uint64
	for i, v := range vals {
		dsts[i], size = size, size+align(uint64(len(v)))+4096
	}
	dst := alloc(t, e, size+4096)
	guard := bytes.Repeat([]byte{0xCC}, int(size+4096))
	copy(dst.host, guard)
	run := func(s int, items []scatter.Item, ents []scatter.Entropy) error {
		wait(t, submit(t, e, s, engine.Work{Dst: dst.base, Src: dst.host[:len(guard)]}))
		ev, err := e.Submit(s, engine.Work{Src: staged, Items: items, Entropy: ents, EntropyAt: at})
		if err != nil {
			return err
		}
		// Submit keeps neither the payloads nor their heads.
		for i := range ents {
			*ents[i].Head = entropy.Head{}
			ents[i] = scatter.Entropy{Name: "reused", Dst: uint64(dst.base), Head: &entropy.Head{}}
		}
		err = ev.Wait()
		if de, ok := e.(engine.DecodeErrorer); ok && err == nil {
			err = de.DecodeErrors()
		}
		return err
	}
	entsFor := func() []scatter.Entropy {
		ents := make([]scatter.Entropy, len(ps))
		for i := range ps {
			h := *hs[i]
			ents[i] = scatter.Entropy{Name: fmt.Sprintf("payload %d (%s)", i, entropy.Fields[h.Field].Name()), Dst: uint64(dst.base) + dsts[i], Src: offs[i], Size: h.ValueBytes(), Head: &h}
		}
		return ents
	}
	check := func(what string, bad int) {
		t.Helper()
		got := readBack(t, e, dst.base, len(guard))
		for i, v := range vals {
			if i == bad {
				continue
			}
			if !bytes.Equal(got[dsts[i]:dsts[i]+uint64(len(v))], v) {
				t.Errorf("%s: payload %d (%s, pairs %v, %d values) differs from the reference", what, i, entropy.Fields[hs[i].Field].Name(), hs[i].Pairs, hs[i].Values)
			}
		}
		for i := range vals {
			end := dsts[i] + uint64(len(vals[i]))
			next := size // the raw item lies after the last gap
			if i+1 < len(vals) {
				next = dsts[i+1]
			}
			if !bytes.Equal(got[end:next], guard[end:next]) {
				t.Fatalf("%s: bytes written past payload %d's values", what, i)
			}
		}
	}
	items := []scatter.Item{{Name: "raw", Dst: uint64(dst.base) + size, Src: offRaw, Stored: uint64(len(raw)), Size: uint64(len(raw))}}
	if err := run(0, items, entsFor()); err != nil {
		t.Fatal(err)
	}
	check("with a scatter", -1)
	if got := readBack(t, e, dst.base+engine.DevPtr(size), len(raw)); !bytes.Equal(got, raw) {
		t.Errorf("the scatter's raw item beside the entropy payloads: %q", got)
	}
	if err := run(1, nil, entsFor()); err != nil {
		t.Fatal(err)
	}
	check("alone", -1)

	// Refused before anything runs.
	for _, c := range []struct {
		name string
		w    func(ents []scatter.Entropy) engine.Work
	}{
		{"no room for the descriptors", func(ents []scatter.Entropy) engine.Work {
			return engine.Work{Src: staged[:len(staged)-1], Entropy: ents, EntropyAt: at}
		}},
		{"a payload over the descriptors' room", func(ents []scatter.Entropy) engine.Work {
			return engine.Work{Src: staged, Entropy: ents, EntropyAt: offs[len(offs)-1]}
		}},
		{"a table apart", func(ents []scatter.Entropy) engine.Work {
			return engine.Work{Src: staged, Items: items, Table: make([]byte, scatter.TableBytes(1)), Entropy: ents, EntropyAt: at}
		}},
		{"a head whose index was not checked", func(ents []scatter.Entropy) engine.Work {
			ents[0].Head.MaxRecord = 0
			return engine.Work{Src: staged, Entropy: ents, EntropyAt: at}
		}},
		{"an unaligned destination", func(ents []scatter.Entropy) engine.Work {
			ents[1].Dst++
			return engine.Work{Src: staged, Entropy: ents, EntropyAt: at}
		}},
		{"a payload whose values are not its tensor's", func(ents []scatter.Entropy) engine.Work {
			ents[2].Size -= 2
			return engine.Work{Src: staged, Entropy: ents, EntropyAt: at}
		}},
		{"a scatter item refused beside valid payloads", func(ents []scatter.Entropy) engine.Work {
			bad := []scatter.Item{{Name: "raw", Dst: uint64(dst.base) + size, Src: at, Stored: uint64(len(raw)), Size: uint64(len(raw))}}
			return engine.Work{Src: staged, Items: bad, Entropy: ents, EntropyAt: at}
		}},
	} {
		before := bytes.Clone(staged)
		if ev, err := e.Submit(0, c.w(entsFor())); err == nil || ev != nil {
			t.Errorf("%s: event %v, error %v; want no event and an error", c.name, ev, err)
		}
		if !bytes.Equal(staged, before) {
			t.Errorf("%s: the refused submission wrote the staging buffer", c.name)
		}
	}

	// One payload's symbol chunk damaged after its check: reported, and
	// the others decoded all the same.
	h := hs[0]
	sym := offs[0] + h.Others + uint64(codec.ChunkValues*entropy.Fields[h.Field].Other()/8)
	for i := sym; i < sym+8; i++ {
		staged[i] ^= 0xFF
	}
	if err := run(0, nil, entsFor()); err == nil {
		t.Error("a damaged entropy payload of a batch decoded without an error")
	}
	check("beside a damaged payload", 0)
}
