"""Reading a layer pack's table (loader/pack.go writes it; the scatter
kernel follows it) on the host: shared by splitzip.offload and
splitzip.distributed to name the tensor behind a damaged pack byte."""

from typing import Optional

ENTRY = 64  # bytes of one table entry: dst, src, stored, size (uint64), ...
DESCRIPTOR = 832  # bytes of a kept entropy payload's descriptor (scatter.EntropyEntryBytes): dst first


def _u64(b: bytes, at: int) -> int:
    return int.from_bytes(b[at:at + 8], "little")


def owner(pack: bytes, count: int, off: int, entropy_at: int = 0, entropy_count: int = 0) -> Optional[int]:
    """The item (0 <= k < count) of a pack whose table entry, stored
    bytes (padded to 16) or entropy descriptor hold byte off, given the
    pack's bytes (at least its table's ENTRY * count; all of them for a
    pack that keeps entropy payloads: entropy_at and entropy_count from
    its PackInfo); None when no item does. A kept entropy payload's entry
    stores nothing; its bytes run from its entry's offset to the next
    item's (the last one's to the descriptors)."""
    if off < ENTRY * count:
        return off // ENTRY
    if entropy_count and entropy_at <= off < entropy_at + DESCRIPTOR * entropy_count:
        dst = _u64(pack, entropy_at + DESCRIPTOR * ((off - entropy_at) // DESCRIPTOR))
        for k in range(count):
            if _u64(pack, ENTRY * k) == dst:
                return k
        return None
    for k in range(count):
        src, stored = _u64(pack, ENTRY * k + 8), _u64(pack, ENTRY * k + 16)
        end = src + ((stored + 15) & ~15)
        if stored == 0 and entropy_count:
            end = _u64(pack, ENTRY * (k + 1) + 8) if k + 1 < count else entropy_at
        if src <= off < end:
            return k
    return None
