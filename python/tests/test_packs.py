"""Naming the tensor behind a damaged pack byte (splitzip._packs), without
torch: a table of three items with padded stored bytes, every byte of the
pack mapped to its item, bytes outside every item to none."""

import struct
import unittest

import testenv  # noqa: F401  (python/tests; before splitzip)
from splitzip._packs import ENTRY, owner


def table(items):
    """A pack table of (src, stored) entries, as loader/pack.go writes
    them (dst, src, stored, size, then the payload fields)."""
    return b"".join(struct.pack("<4Q", 16, src, stored, stored) + bytes(ENTRY - 32) for src, stored in items)


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


if __name__ == "__main__":
    unittest.main()
