"""Naming the tensor behind a damaged pack byte (splitzip._packs), without
torch: a table of three items with padded stored bytes, every byte of the
pack mapped to its item, bytes outside every item to none."""

import struct
import unittest

import testenv  # noqa: F401  (python/tests; before splitzip)
from splitzip._packs import DESCRIPTOR, ENTRY, owner


def table(items, dsts=None):
    """A pack table of (src, stored) entries, as loader/pack.go writes
    them (dst, src, stored, size, then the payload fields)."""
    dsts = dsts or [16] * len(items)
    return b"".join(struct.pack("<4Q", d, src, stored, stored) + bytes(ENTRY - 32)
                    for d, (src, stored) in zip(dsts, items))


class TestOwner(unittest.TestCase):
    def test_owner(self):
        # Stored bytes after the 192-byte table: 100 (padded to 112), 16, 1.
        items = [(192, 100), (304, 16), (320, 1)]
        t = table(items)
        for off in range(3 * ENTRY):
            self.assertEqual(owner(t, 3, off), off // ENTRY)
        for k, (src, stored) in enumerate(items):
            for off in range(src, src + ((stored + 15) & ~15)):
                self.assertEqual(owner(t, 3, off), k, off)
        self.assertIsNone(owner(t, 3, 336))
        self.assertIsNone(owner(t, 3, 10 ** 9))

    def test_owner_kept_entropy(self):
        # Items: a raw 100 bytes, a kept entropy payload of 200 bytes (its
        # entry stores nothing), another kept one of 48, then their two
        # descriptors (dst first: the second's, then the first's).
        dsts = [1 << 20, 2 << 20, 3 << 20]
        items = [(192, 100), (304, 0), (512, 0)]
        at = 560
        pack = bytearray(table(items, dsts))
        pack += bytes(at - len(pack))
        pack += struct.pack("<Q", dsts[2]) + bytes(DESCRIPTOR - 8) + struct.pack("<Q", dsts[1]) + bytes(DESCRIPTOR - 8)
        pack = bytes(pack)
        kw = dict(entropy_at=at, entropy_count=2)
        for off, want in ((0, 0), (191, 2), (192, 0), (303, 0), (304, 1), (511, 1), (512, 2), (559, 2),
                          (at, 2), (at + DESCRIPTOR - 1, 2), (at + DESCRIPTOR, 1), (at + 2 * DESCRIPTOR - 1, 1)):
            self.assertEqual(owner(pack, 3, off, **kw), want, off)
        self.assertIsNone(owner(pack, 3, at + 2 * DESCRIPTOR, **kw))
        # Without the entropy fields, a kept payload's bytes have no owner.
        self.assertIsNone(owner(pack, 3, 400))


if __name__ == "__main__":
    unittest.main()
