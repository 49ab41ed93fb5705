package load

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/transport"
	"github.com/splitzip/splitzip/vmm"
)

// DevicesReport is what Devices did.
type DevicesReport struct {
	Devices []string `json:"devices"`
	// Peer: each device loaded a part and copied the others' from them.
	Peer     bool   `json:"peer"`
	Mode     string `json:"mode"` // each device's load mode, as Report.Mode
	Tensors  int    `json:"tensors"`
	RawBytes uint64 `json:"raw_bytes"` // the checkpoint's; every device holds them all
	// PeerBytes is what the peer copies moved between devices, all pairs.
	PeerBytes uint64 `json:"peer_bytes"`
	// Wall runs from every device being set up to every tensor being on
	// every device; GBps is RawBytes x devices over it (bytes placed).
	Wall time.Duration `json:"wall_ns"`
	GBps float64       `json:"placed_gb_per_s"`
	// Parts are the devices' own loads: a part each with Peer, everything
	// otherwise.
	Parts   []*Report `json:"parts"`
	Checked bool      `json:"checked"`
}

// Devices places every tensor of a cached source on each engine of
// engs, in an arena of the same layout on each. With peer, the arena's
// tensors are cut into len(engs) contiguous parts of about equal bytes:
// engine d faults part d in through its own transport (its own link from
// the host), and as each part is in, every other engine copies it from
// that engine (a peer copy a part, engine.Peered), so every byte crosses
// a host link once. Without peer, every engine faults in
// everything itself: the baseline of one loader a device. opts are each
// device's; with Check every device's whole arena is compared with the
// source at the end.
func Devices(ctx context.Context, engs []engine.Engine, c *shardcache.Cache, src *shardcache.Source, opts Options, peer bool) (*DevicesReport, error) {
	switch {
	case len(engs) == 0:
		return nil, badOption("engines", 0, "at least one")
	case opts.Resident || opts.DeviceResident:
		return nil, badOption("Resident", true, "false when loading onto several devices")
	}
	n := len(engs)
	if peer {
		for d, e := range engs {
			p, ok := e.(engine.Peered)
			if !ok {
				return nil, fmt.Errorf("device %d (%s) cannot copy from other devices", d, e.Name())
			}
			if err := p.AllowPeers(engs); err != nil {
				return nil, fmt.Errorf("device %d: %w", d, err)
			}
		}
	}
	specs, err := transport.Specs(c, src)
	if err != nil {
		return nil, err
	}
	// part[i] is the device that loads tensor i (arena order) with peer.
	part := make([]int, len(specs))
	var total, sum uint64
	for _, s := range specs {
		total += s.Size
	}
	for i, s := range specs {
		part[i] = min(n-1, int(sum*uint64(n)/max(total, 1)))
		sum += s.Size
	}
	rep := &DevicesReport{Peer: peer, Tensors: len(specs), RawBytes: total, Parts: make([]*Report, n)}
	for _, e := range engs {
		rep.Devices = append(rep.Devices, e.Name())
	}

	// Two barriers: every device set up (the clock starts), and every
	// device done copying (the clock stops). In between, device d's part
	// is in once in[d] is closed: the others copy it from then on, while
	// later parts still load. A device that fails releases the others
	// from waiting through abort, as does ctx; but no arena closes before
	// every device is done reading the others' (placed is waited for
	// whatever happened, and every device arrives at it once).
	var (
		abort     = make(chan struct{})
		abortOnce sync.Once
		errs      = make([]error, n)
		arenas    = make([]*vmm.Arena, n)
		in        = make([]chan struct{}, n)
		copied    = make([]uint64, n)
		setUp     = newBarrier(n)
		placed    = newBarrier(n)
	)
	for d := range in {
		in[d] = make(chan struct{})
	}
	fail := func() { abortOnce.Do(func() { close(abort) }) }
	until := func(c <-chan struct{}) error {
		select {
		case <-c:
			return nil
		case <-abort:
			return errAborted
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	wait := func(b *barrier) error {
		b.arrive()
		return until(b.all)
	}
	var wg sync.WaitGroup
	for d, e := range engs {
		wg.Go(func() {
			arrived := false
			defer func() {
				if !arrived { // failed before its part was in: it reads no arena
					placed.arrive()
				}
			}()
			r, err := loadPart(ctx, e, d, c, src, opts, peer, part, func() error { return wait(setUp) }, func(a *vmm.Arena) error {
				arenas[d] = a
				close(in[d])
				var err error
				if peer {
					copied[d], err = copyParts(e, d, engs, arenas, part, until, in)
				}
				arrived = true
				placed.arrive()
				<-placed.all // no device reads this arena any more
				return err
			})
			if err != nil {
				errs[d] = fmt.Errorf("device %d (%s): %w", d, e.Name(), err)
				fail()
				return
			}
			rep.Parts[d] = r
		})
	}
	wg.Wait()
	for _, err := range errs { // the failure, not the devices it stopped
		if err != nil && !errors.Is(err, errAborted) {
			return nil, err
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	rep.Mode = rep.Parts[0].Mode
	rep.Checked = opts.Check
	for _, x := range copied {
		rep.PeerBytes += x
	}
	rep.Wall = placed.at.Sub(setUp.at)
	rep.GBps = float64(total) * float64(n) / rep.Wall.Seconds() / 1e9
	return rep, nil
}

// loadPart is device d's load of Devices: its part with peer (else
// everything), ready called once it is set up and before the clock
// starts, placed once its part is in, before anything is freed; with
// Check, the whole arena (after the peer copies) or its own load is
// compared with the source.
func loadPart(ctx context.Context, e engine.Engine, d int, c *shardcache.Cache, src *shardcache.Source, opts Options, peer bool,
	part []int, ready func() error, placed func(a *vmm.Arena) error) (*Report, error) {
	if peer {
		opts.only = func(b *vmm.Binding) bool { return part[b.Index] == d }
	}
	l, err := Open(e, c, src, opts)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	if err := ready(); err != nil {
		return nil, err
	}
	if _, err := l.Run(ctx); err != nil {
		return nil, err
	}
	if err := placed(l.Arena()); err != nil {
		return nil, err
	}
	if opts.Check {
		if peer {
			if err := transport.CheckArenaOf(e, c, l.Arena().Bindings(), src); err != nil {
				return nil, err
			}
		} else if err := l.Check(); err != nil {
			return nil, err
		}
	}
	r := l.Report()
	r.Checked = opts.Check
	return r, nil
}

// barrier releases its waiters once n have arrived, and records when.
type barrier struct {
	mu   sync.Mutex
	left int
	all  chan struct{}
	at   time.Time
}

func newBarrier(n int) *barrier { return &barrier{left: n, all: make(chan struct{})} }

func (b *barrier) arrive() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.left--; b.left == 0 {
		b.at = time.Now()
		close(b.all)
	}
}

// errAborted is what a device returns that stopped because another one
// failed.
var errAborted = errors.New("another device failed")

// copyParts copies into device d's arena every other device's part, from
// that device's arena (the same layout), one peer copy a part spread over
// d's streams, each once until(in[j]) says part j is in, and waits for
// them; it returns the bytes copied. Device d takes the parts of d+1, d+2,
// ... in turn, so that the devices do not all read one device at once.
func copyParts(e engine.Engine, d int, engs []engine.Engine, arenas []*vmm.Arena, part []int,
	until func(<-chan struct{}) error, in []chan struct{}) (uint64, error) {
	var evs []engine.Event
	var bytes uint64
	mine := arenas[d]
	bs := mine.Bindings()
	wait := func() error {
		var errs []error
		for _, ev := range evs {
			errs = append(errs, ev.Wait())
		}
		return errors.Join(errs...)
	}
	for k := 1; k < len(engs); k++ {
		j := (d + k) % len(engs)
		if err := until(in[j]); err != nil {
			return bytes, errors.Join(err, wait())
		}
		peer := engs[j]
		lo, hi := -1, -1
		for i := range bs {
			if part[i] == j {
				if lo < 0 {
					lo = i
				}
				hi = i
			}
		}
		if lo < 0 {
			continue
		}
		off := uint64(bs[lo].Addr - mine.Base())
		size := uint64(bs[hi].Addr-bs[lo].Addr) + bs[hi].Size
		if size == 0 {
			continue
		}
		ev, err := e.Submit(j%e.Streams(), engine.Work{Dst: mine.Base() + vmm.Ptr(off), From: arenas[j].Base() + vmm.Ptr(off), N: size, Peer: peer})
		if err != nil {
			return bytes, errors.Join(err, wait())
		}
		evs = append(evs, ev)
		bytes += size
	}
	return bytes, wait()
}
