package hostengine

// The operations a stream runs: copies, in-place decodes by the Go
// reference decoders, and scatters, each first shown to the fault hooks.

import (
	"errors"
	"fmt"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/codec/payload"
	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/scatter"
)

// copyHtoD runs a copy.
func (e *Engine) copyHtoD(dst engine.DevPtr, src []byte) error {
	if e.hooks.Copy != nil {
		if err := e.hooks.Copy(dst, len(src)); err != nil {
			return err
		}
	}
	d, err := e.mem(dst, uint64(len(src)))
	if err != nil {
		return err
	}
	copy(d, src)
	return nil
}

// copyDtoD runs a copy within device memory.
func (e *Engine) copyDtoD(dst, src engine.DevPtr, n uint64) error { return e.copyFrom(e, dst, src, n) }

// copyPeer runs a copy of n bytes at src in p's memory to dst (a copy
// from another device, which fault hooks see as a copy).
func (e *Engine) copyPeer(dst engine.DevPtr, p *Engine, src engine.DevPtr, n uint64) error {
	if e.hooks.Copy != nil {
		if err := e.hooks.Copy(dst, int(n)); err != nil {
			return err
		}
	}
	return e.copyFrom(p, dst, src, n)
}

// copyFrom copies n bytes at src in p's memory to dst in e's.
func (e *Engine) copyFrom(p *Engine, dst, src engine.DevPtr, n uint64) error {
	from, err := p.mem(src, n)
	if err != nil {
		return err
	}
	to, err := e.mem(dst, n)
	if err != nil {
		return err
	}
	copy(to, from)
	return nil
}

// AllowPeers implements engine.Peered: host engines copy from each
// other's memory without setup; peers must be host engines.
func (e *Engine) AllowPeers(peers []engine.Engine) error {
	for _, p := range peers {
		if _, ok := p.(*Engine); !ok {
			return fmt.Errorf("cpu engine: peer %s is not a cpu engine", p.Name())
		}
	}
	return nil
}

// decodeInPlace runs a payload's decode in place with the Go reference:
// an entropy payload's in place (entropy.DecodeInPlace, the invariant a
// device relies on), a fixed one's out of place from a copy set aside
// (its reference decoder works out of place).
func (e *Engine) decodeInPlace(dst engine.DevPtr, h payload.Head) error {
	if e.hooks.Decode != nil {
		if err := e.hooks.Decode(dst, h); err != nil {
			return err
		}
	}
	d, err := e.mem(dst, h.DecodedSize())
	if err != nil {
		return err
	}
	if h.Kind() == payload.KindEntropy {
		return entropy.DecodeInPlace(d, h.Size())
	}
	return h.Decode(d, append([]byte(nil), d[:h.Size()]...), 0)
}

// scatter writes checked items of packed to their ranges; the hooks see
// each raw item as a copy and each payload as a decode.
func (e *Engine) scatter(packed []byte, its []scatter.Item) error {
	if e.hooks.Scatter != nil {
		if err := e.hooks.Scatter(its); err != nil {
			return err
		}
	}
	for _, it := range its {
		d, err := e.mem(engine.DevPtr(it.Dst), it.Size)
		if err != nil {
			return err
		}
		src := packed[it.Src : it.Src+it.Stored]
		if it.Header == nil {
			if e.hooks.Copy != nil {
				if err := e.hooks.Copy(engine.DevPtr(it.Dst), len(src)); err != nil {
					return err
				}
			}
			copy(d, src)
			continue
		}
		if e.hooks.Decode != nil {
			if err := e.hooks.Decode(engine.DevPtr(it.Dst), &payload.Fixed{Header: *it.Header}); err != nil {
				return err
			}
		}
		if err := codec.Decode(d, src); err != nil {
			return err
		}
	}
	return nil
}

// decodeEntropy decodes checked entropy payloads of packed out of place
// into their ranges, each whatever the others hold (as a device's batch
// does), and returns their errors; the hooks see each as a decode.
func (e *Engine) decodeEntropy(packed []byte, ents []scatter.Entropy) error {
	var errs []error
	for _, it := range ents {
		if e.hooks.Decode != nil {
			if err := e.hooks.Decode(engine.DevPtr(it.Dst), &payload.Entropy{Head: it.Head}); err != nil {
				return err
			}
		}
		d, err := e.mem(engine.DevPtr(it.Dst), it.Head.ValueBytes())
		if err == nil {
			err = entropy.Decode(d, packed[it.Src:it.Src+it.Head.Size], 1)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("tensor %q: %w", it.Name, err))
		}
	}
	return errors.Join(errs...)
}
