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
	"slices"
	"sync"

	"github.com/splitzip/splitzip/codec/payload"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/vmm"
)

// SharedLayout places the payloads of a load in one buffer, each at a
// 16-byte aligned offset, in key order.
type SharedLayout struct {
	Keys  []shardcache.Key
	Offs  []uint64
	Sizes []uint64
	Size  uint64 // the buffer's bytes
	// ID names the contents: a digest of every payload's key, kind, size
	// and checksum, so that processes loading the same payloads (from
	// one cache or from copies of it) find the same buffer.
	ID string
}

// LayoutShared lays out the payloads (fixed and entropy) of the tensors
// of specs that c stores compressed, each once.
func LayoutShared(c *shardcache.Cache, specs []vmm.Spec) SharedLayout {
	objs := map[shardcache.Key]*shardcache.Object{}
	for _, s := range specs {
		hit, err := c.LookupSpec(s.Ref, s.Shard, s.Offset, s.Size)
		if err != nil || (hit.Tensor.Stored != shardcache.StoredFixed && hit.Tensor.Stored != shardcache.StoredEntropy) {
			continue
		}
		if o, err := c.Lookup(hit.Tensor.Key); err == nil && payloadKind(o) != 0 {
			objs[hit.Tensor.Key] = o
		}
	}
	var l SharedLayout
	for k := range objs {
		l.Keys = append(l.Keys, k)
	}
	slices.Sort(l.Keys)
	h := sha256.New()
	var rec [16]byte
	for _, k := range l.Keys {
		o := objs[k]
		l.Offs, l.Sizes = append(l.Offs, l.Size), append(l.Sizes, o.Size)
		l.Size += align16(o.Size)
		h.Write([]byte(k))
		h.Write([]byte{0})
		binary.LittleEndian.PutUint64(rec[:], o.Size)
		binary.LittleEndian.PutUint32(rec[8:], o.Checksum)
		rec[12] = byte(payloadKind(o))
		h.Write(rec[:])
	}
	l.ID = "payloads-" + hex.EncodeToString(h.Sum(nil)[:16])
	return l
}

// FillShared reads and checks each payload of l into its place in b (of
// l.Size bytes), as a fault does, several at once.
func (z *Payloads) FillShared(l SharedLayout, b []byte) error {
	if uint64(len(b)) != l.Size {
		return fmt.Errorf("%w: a shared buffer of %d bytes for a layout of %d", ErrTooLarge, len(b), l.Size)
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
// from there, read nothing and pin nothing for them. Their heads are
// parsed and checked against the index and against the bytes (sizes,
// bounds, an entropy payload's chunk index); their checksums are the
// filler's, which checked them before the buffer was sealed. It is
// called before the first fault.
func (z *Payloads) UseShared(l SharedLayout, b []byte) error {
	if !z.opts.Resident {
		return badOption("Resident", false, "true, to use shared payloads")
	}
	if uint64(len(b)) != l.Size {
		return fmt.Errorf("%w: a shared buffer of %d bytes for a layout of %d", ErrTooLarge, len(b), l.Size)
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
	z.mu.Lock()
	defer z.mu.Unlock()
	for k, p := range shared {
		z.resident[k] = p
	}
	z.sharedBytes = l.Size
	return nil
}

// SharedBytes returns the bytes of shared payloads this transport uses
// (UseShared): host memory it holds without pinning its own copy.
func (z *Payloads) SharedBytes() uint64 {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.sharedBytes
}
