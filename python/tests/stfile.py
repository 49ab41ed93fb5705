"""Safetensors files written and read by the Python tests themselves, so
they need neither the library under test nor the safetensors package."""

import json
import os
import struct


def write(path, tensors, metadata=None):
    """Write tensors, a list of (name, dtype, shape, bytes), back to back,
    with metadata (a dict of strings) as the header's __metadata__."""
    header, off = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, b in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(t[3] for t in tensors))


def read(path):
    """name -> (dtype, shape, bytes) straight from the file."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    head = json.loads(data[8:8 + n])
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        out[name] = (t["dtype"], tuple(t["shape"]), data[8 + n + b:8 + n + e])
    return out


def read_dir(folder: str) -> dict:
    """Every tensor of the .safetensors files of folder, by name (as read)."""
    out = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            out.update(read(os.path.join(folder, f)))
    return out
