"""Reading a layer pack's table (loader/pack.go writes it; the scatter
kernel follows it) on the host: shared by splitzip.offload and
splitzip.distributed to name the tensor behind a damaged pack byte."""

from typing import Optional

ENTRY = 64  # bytes of one table entry: dst, src, stored, size (uint64), ...


def owner(table: bytes, count: int, off: int) -> Optional[int]:
    """The item (0 <= k < count) of a pack whose table entry or stored
    bytes (padded to 16) hold byte off, given the pack's first
    ENTRY * count bytes; None when no item does."""
    if off < ENTRY * count:
        return off // ENTRY
    for k in range(count):
        e = table[ENTRY * k:ENTRY * (k + 1)]
        src = int.from_bytes(e[8:16], "little")
        stored = int.from_bytes(e[16:24], "little")
        if src <= off < src + ((stored + 15) & ~15):
            return k
    return None
