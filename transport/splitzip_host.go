package transport

// Entropy payloads whose source is absent: no GPU decoder reads them yet,
// so they are decoded on the host into the staging ring and copied raw.

import (
	"context"
	"fmt"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/vmm"
)

// hostItem is the packer's item for a small tensor stored as an entropy
// payload whose source is absent: its raw bytes, decoded into the staging
// buffer, packed with other small tensors.
func (z *SplitZip) hostItem(i int, b *vmm.Binding, hit shardcache.SliceHit) smallItem {
	key := hit.Tensor.Key
	return smallItem{i: i, b: b, stored: b.Size, fill: func(dst []byte) (*codec.Header, error) {
		p, o, err := z.cache.ReadObject(key)
		switch {
		case err != nil:
			return nil, err
		case o.Kind != shardcache.KindEntropy:
			return nil, fmt.Errorf("payload %s: a %s object, the tensor is an entropy payload", key, o.Kind)
		}
		if err := entropy.Decode(dst, p, 1); err != nil {
			return nil, fmt.Errorf("payload %s: %w", key, err)
		}
		return nil, nil
	}}
}

// hostDecode decodes an entropy payload a chunk at a time into staging
// pieces and submits each full piece's copy on one stream. The payload's
// checksum is checked at its end: a payload that fails it has had some
// pieces copied, and its binding stays evicted.
func (z *SplitZip) hostDecode(ctx context.Context, t target) (Fence, error) {
	loc, o, r, closeFile, err := z.openPayload(t.hit.Tensor.Key)
	if err != nil {
		return nil, err
	}
	defer closeFile()
	if o.Kind != shardcache.KindEntropy || o.RawSize != t.b.Size {
		return nil, fmt.Errorf("%s: a %s object of %d raw bytes, the tensor is an entropy payload of %d", loc.Name, o.Kind, o.RawSize, t.b.Size)
	}
	stream := z.streams.pick(z.eng)
	var evs allFence
	var s *slot
	var fill, done uint64 // bytes in s, bytes submitted before them
	flush := func() error {
		ev, err := z.eng.Submit(stream, engine.Work{Dst: t.b.Addr + vmm.Ptr(done), Src: s.buf[:fill]})
		if err != nil {
			return err
		}
		s.ev = ev
		evs = append(evs, ev)
		z.ring <- s
		s, done, fill = nil, done+fill, 0
		return nil
	}
	err = entropy.DecodeStream(r, o.Size, func(off uint64, vals []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if off != done+fill || uint64(len(vals)) > t.b.Size-off {
			return fmt.Errorf("values at byte %d past the tensor's %d", off, t.b.Size)
		}
		for len(vals) > 0 {
			if s == nil {
				s = z.takeSlot()
			}
			k := copy(s.buf[fill:], vals)
			fill, vals = fill+uint64(k), vals[k:]
			if fill == uint64(len(s.buf)) {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err == nil && s != nil {
		err = flush()
	}
	if s != nil {
		z.ring <- s
	}
	if err == nil && done != t.b.Size {
		err = fmt.Errorf("decodes to %d bytes, the tensor has %d", done, t.b.Size)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", loc.Name, err)
	}
	z.mu.Lock()
	z.stats.Bytes += done
	z.mu.Unlock()
	return evs, nil
}
