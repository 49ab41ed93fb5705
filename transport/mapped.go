package transport

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/vmm"
)

// errRegister reports that the engine could not register a file mapping;
// the upload is retried through the staging ring.
var errRegister = errors.New("registering a file mapping failed")

// streamMapped uploads a payload straight from its object file's page
// cache: the file is mapped read-only, each 8 MiB piece checksummed (which
// reads the pages once) and registered with the engine, and the copy
// engine reads the pages itself; no CPU copy. The decode follows the
// copies on one stream, as in stream. The pieces are unregistered and the
// mapping removed once the event after the upload has completed.
func (z *SplitZip) streamMapped(t target) (Fence, error) {
	key := t.hit.Tensor.Key
	f, o, err := z.cache.OpenObject(key)
	if err != nil {
		return nil, err
	}
	name := f.Name()
	if o.Size < codec.HeaderSize {
		f.Close()
		return nil, fmt.Errorf("%s: %w: %d bytes", name, codec.ErrCorrupt, o.Size)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(o.Size), unix.PROT_READ, unix.MAP_SHARED)
	f.Close() // the mapping keeps the file
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	z.mu.Lock()
	stream := z.next % z.eng.Streams()
	z.next++
	z.mu.Unlock()
	n := int((o.Size + readPiece - 1) / readPiece)
	crcs := make([]uint32, n)
	errs := make([]error, n)
	regs := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		z.io <- struct{}{}
		wg.Go(func() {
			defer func() { <-z.io }()
			off := uint64(i) * readPiece
			q := m[off:min(off+readPiece, o.Size)]
			t0 := time.Now()
			crcs[i] = codec.PieceChecksum(q, off)
			t1 := time.Now()
			if err := z.eng.RegisterReadOnly(q); err != nil {
				errs[i] = fmt.Errorf("%w: %s: %v", errRegister, name, err)
				return
			}
			regs[i] = q
			t2 := time.Now()
			z.mu.Lock()
			defer z.mu.Unlock()
			z.stats.Verify += t1.Sub(t0)
			z.stats.Read += t2.Sub(t1)
			if err := z.eng.CopyHtoD(stream, t.b.Addr+vmm.Ptr(off), q); err != nil {
				errs[i] = err
				return
			}
			z.stats.Bytes += uint64(len(q))
			z.stats.Submit += time.Since(t2)
		})
	}
	wg.Wait()
	err = errors.Join(errs...)
	var h codec.Header
	if err == nil {
		var sum uint32
		for i, c := range crcs {
			sum = codec.CombineChecksums(sum, c, min(readPiece, o.Size-uint64(i)*readPiece))
		}
		if h, err = codec.ParseHeader(m[:codec.HeaderSize]); err == nil {
			err = checkPayload(&h, o.Size, sum, t.b.Size)
		}
		if err == nil && !h.InPlace {
			err = fmt.Errorf("%w: payload %s", codec.ErrNotInPlace, key)
		}
		if err != nil {
			err = fmt.Errorf("%s: %w", name, err)
		}
	}
	z.mu.Lock()
	if err == nil {
		err = z.eng.DecodeInPlace(stream, t.b.Addr, &h)
	}
	ev, rerr := z.eng.Record(stream)
	z.mu.Unlock()
	if rerr != nil {
		// Copies from the mapping may still be in flight and nothing
		// tells when they end: keep the mapping rather than free it.
		return nil, errors.Join(err, rerr)
	}
	z.cleanups.Go(func() {
		ev.Wait()
		for _, q := range regs {
			if q != nil {
				z.eng.Unregister(q)
			}
		}
		unix.Munmap(m)
	})
	if err != nil {
		if errors.Is(err, errRegister) {
			ev.Wait() // the retry must not race copies of this attempt
		}
		return nil, err
	}
	return ev, nil
}
