package transport

// Pinned staging of a load: how many buffers each ring gets, sized from
// what the checkpoint needs and capped by a limit.

import (
	"fmt"

	"github.com/splitzip/splitzip/scatter"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/vmm"
)

// DefaultPinnedLimit is the default cap on a load's pinned staging.
const DefaultPinnedLimit = 256 << 20

// capStaging shrinks the rings, the one holding the most bytes first, until
// they fit limit, keeping at least one raw slot, two pieces and two pack
// buffers; a limit below that is an error.
func capStaging(s Staging, limit uint64, raw bool) (Staging, error) {
	minPieces := 2
	if raw {
		s.Pieces, minPieces = 0, 0
	}
	for s.PinnedBytes() > limit {
		r := uint64(s.RawSlots-1) * rawSlotBytes
		p := uint64(max(s.Pieces-minPieces, 0)) * s.piece()
		k := uint64(s.PackSlots-2) * packBytes
		switch {
		case r == 0 && p == 0 && k == 0:
			given := fmt.Sprintf("%d bytes", limit)
			if limit%(1<<20) == 0 {
				given = fmt.Sprintf("%d MiB", limit>>20) // as the flag was most likely given
			}
			return s, badOption("PinnedLimit", given,
				fmt.Sprintf("at least %.1f MiB (%d bytes), the smallest staging these settings need", float64(s.PinnedBytes())/(1<<20), s.PinnedBytes()))
		case r >= p && r >= k:
			s.RawSlots--
		case p >= k:
			s.Pieces--
		default:
			s.PackSlots--
		}
	}
	return s, nil
}

// need is what a load stages in pinned memory at most: the bytes of the
// raw tensors and of the payloads that are not packed, and of the packed
// ones. Load caps each staging ring by it (one buffer more than the bytes
// fill, for overlap), so a small checkpoint pins little; a large one gets
// the rings' full sizes.
type need struct {
	raw, payload, small uint64
	// resident is what a resident load holds in the slab's shared
	// blocks: its payloads (each once), or with raw its tensors, each
	// rounded as slabBytes rounds it; residentItems how many those are.
	resident      uint64
	residentItems int
	// device is what the device tier holds: the streamed payloads (each
	// once), each rounded up to a binding's alignment; smallResident what
	// the slab holds beside it, the small payloads.
	device, smallResident uint64
}

// rawSlots is the raw ring: 16 MiB slots for the raw bytes, plus one.
func (n need) rawSlots() int { return int((n.raw+rawSlotBytes-1)/rawSlotBytes) + 1 }

// payloadPieces is the payload ring: pieces of piece bytes for the
// payload bytes, plus two.
func (n need) payloadPieces(piece uint64) int { return int((n.payload+piece-1)/piece) + 2 }

// packSlots is the packer's ring: 4 MiB buffers for the packed bytes,
// plus two.
func (n need) packSlots() int { return int((n.small+packBytes-1)/packBytes) + 2 }

// stagingNeed sums what a load of specs stages: through the raw path
// only with raw, else payloads through the payload path.
func stagingNeed(c *shardcache.Cache, specs []vmm.Spec, small int64, raw, streamed bool) need {
	var n need
	seen := map[shardcache.Key]bool{}
	for _, s := range specs {
		size := s.Size
		payload := false
		if !raw {
			hit, err := c.LookupSpec(s.Ref, s.Shard, s.Offset, s.Size)
			if err == nil && hit.Tensor.Stored == shardcache.StoredEntropy {
				// Read raw from its source, or, with that absent, decoded
				// on the host into payload pieces: staged by either ring.
				n.payload += size
			}
			// A raw tensor read from its copy: in pieces of the payload
			// ring on a streamed load (a remote cache's raw tensors all
			// are; sized as raw, they took two pieces and loaded at a
			// fifth of the rate).
			payload = err == nil && streamed && hit.Tensor.Stored == shardcache.StoredRaw && streamsCopy(c, hit, s.Shard, s.Offset, s.Size)
			if err == nil && hit.Tensor.Stored == shardcache.StoredFixed {
				if o, err := c.Lookup(hit.Tensor.Key); err == nil {
					size, payload = o.Size, true
					if !seen[hit.Tensor.Key] {
						seen[hit.Tensor.Key] = true
						n.resident += slabBytes(o.Size)
						n.residentItems += btoi(slabBytes(o.Size) > 0)
						if small <= 0 || o.Size > uint64(small) {
							n.device += (o.Size + vmm.Align - 1) / vmm.Align * vmm.Align
						} else {
							n.smallResident += slabBytes(o.Size)
						}
					}
				}
			}
		} else {
			n.resident += slabBytes(s.Size)
			n.residentItems += btoi(slabBytes(s.Size) > 0)
		}
		switch {
		case small > 0 && size <= uint64(small):
			n.small += size
		case payload:
			n.payload += size
		default:
			n.raw += size
		}
	}
	return n
}

// ResidentPacked is Resident for a load with resident packs (raw: runs,
// with raw set): room, beyond the items' own bytes, for the packs' scatter
// tables and alignment (at most an item's entry and 16 bytes an item),
// or for the alignment gaps between a run's tensors (less than vmm.Align
// an item).
func (s Staging) ResidentPacked(raw bool) uint64 {
	per := scatter.TableBytes(1) + 16
	if raw {
		per = vmm.Align
	}
	return s.Resident + uint64(s.ResidentItems)*per
}

// Staging is how many pinned buffers each staging ring of a transport
// gets (RawOptions.Slots and PackSlots, PayloadOptions.RingPieces and
// PackSlots), and the cap they were fitted to.
type Staging struct {
	RawSlots  int    // 16 MiB raw slots
	Pieces    int    // payload pieces (0 for a raw-only load)
	PackSlots int    // 4 MiB pack buffers
	Limit     uint64 // the cap; 0: none
	// PieceBytes is the size of a payload piece: 8 MiB, 16 MiB for a
	// remote cache (0: 8 MiB).
	PieceBytes uint64
	// Resident is what a resident load keeps in shared pinned blocks
	// (its buffers of up to 16 MiB, each rounded up to 16 bytes); larger
	// buffers are pinned one by one. It is not staging and not capped.
	// ResidentItems is how many buffers Resident counts.
	Resident      uint64
	ResidentItems int
	// Device is what the device tier of a load with DeviceResident holds:
	// its streamed payloads, each once and aligned; SmallResident what
	// such a load keeps in pinned memory beside it, its small payloads.
	Device, SmallResident uint64
	// Shared, for a load whose payloads' resident copies are shared by
	// the processes of a machine (load.Options.Share), is where they go.
	Shared *SharedLayout
}

// PinnedBytes returns the pinned bytes of the rings: raw slots and, for a
// load through the raw path only, the raw packer's buffers; else raw
// slots, payload pieces and the payload packer's (the raw packer is then
// unused).
func (s Staging) PinnedBytes() uint64 {
	return uint64(s.RawSlots)*rawSlotBytes + uint64(s.Pieces)*s.piece() + uint64(s.PackSlots)*packBytes
}

// piece is PieceBytes, its default filled in.
func (s Staging) piece() uint64 {
	if s.PieceBytes == 0 {
		return readPiece
	}
	return s.PieceBytes
}

// PlanStaging sizes the staging rings of a load of specs from c with
// readers reader goroutines: each ring holds what those tensors need (one
// buffer more than their bytes fill) up to two buffers per reader (four
// payload pieces), and
// all of them together fit limit (0: DefaultPinnedLimit; negative: no
// cap), the largest ring shrunk first. small is the packing threshold
// (SmallBytes, resolved); raw plans a load through the raw path only;
// streamed a load that keeps nothing resident (no Resident, ResidentPacks
// or DeviceResident), whose raw tensors read from their copies in the
// cache stream through the payload ring, checked (streamsCopy). A limit
// below the smallest staging is an ErrOption.
func PlanStaging(c *shardcache.Cache, specs []vmm.Spec, readers int, small int64, raw, streamed bool, limit int64) (Staging, error) {
	readers = max(readers, 1)
	n := stagingNeed(c, specs, small, raw, streamed)
	piece := pieceBytes(c)
	s := Staging{RawSlots: min(2*readers, n.rawSlots()), Pieces: min(piecesPerReader*readers+2, n.payloadPieces(piece)), PieceBytes: piece, PackSlots: min(2*readers+2, n.packSlots()),
		Resident: n.resident, ResidentItems: n.residentItems, Device: n.device, SmallResident: n.smallResident}
	var capped uint64
	if limit >= 0 {
		capped = uint64(limit)
		if capped == 0 {
			capped = DefaultPinnedLimit
		}
		var err error
		if s, err = capStaging(s, capped, raw); err != nil {
			return Staging{}, err
		}
	}
	s.Limit = capped
	return s, nil
}
