"""Load a cached checkpoint into numpy arrays (host memory).

numpy has no bfloat16 and no FP8: BF16 tensors come back as uint16 arrays
holding the exact bits, F8_E4M3 and F8_E5M2 as uint8 arrays of their shape
(view them with ml_dtypes.bfloat16, float8_e4m3fn or float8_e5m2 if you
have it).
"""

from typing import Dict, Optional

try:
    import numpy as np
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("splitzip.numpy needs numpy (pip install numpy, or apt-get install python3-numpy)") from e

from ._lib import Cache

DTYPES = {
    "BF16": np.uint16, "F16": np.float16, "F32": np.float32, "F64": np.float64,
    "I8": np.int8, "I16": np.int16, "I32": np.int32, "I64": np.int64,
    "U8": np.uint8, "U16": np.uint16, "U32": np.uint32, "U64": np.uint64, "BOOL": np.bool_,
    "F8_E4M3": np.uint8, "F8_E5M2": np.uint8,
}


def _empty(t) -> np.ndarray:
    """An array to hold tensor t (a TensorInfo) bit for bit."""
    dt = DTYPES.get(t.dtype)
    a = np.empty(t.nbytes, dtype=np.uint8) if dt is None else np.empty(t.shape, dtype=dt)
    if a.nbytes != t.nbytes:
        raise ValueError(f"{t.name}: shape {t.shape} of {t.dtype} is {a.nbytes} bytes, tensor has {t.nbytes}")
    return a


def load_file(cache: str, source: Optional[str] = None) -> Dict[str, np.ndarray]:
    """Every tensor of the checkpoint, bit for bit, as numpy arrays.
    BF16 and FP8 come back as unsigned integers of their width, with their
    shapes; unknown dtypes as flat uint8 arrays of their bytes."""
    out, items = {}, []
    with Cache(cache, source) as c:
        for t in c.infos():
            a = _empty(t)
            items.append((t.index, a.ctypes.data, a.nbytes))
            out[t.name] = a
        c.read_many(items)
    return out


def get_tensor(cache: Cache, name: str) -> np.ndarray:
    """One tensor of an open Cache, bit for bit, as load_file gives it
    (safetensors' get_tensor); NotFoundError (a KeyError) when the
    checkpoint has no tensor called name."""
    t = cache.info(name)
    a = _empty(t)
    if a.nbytes:
        cache.read_into_ptr(t.index, a.ctypes.data, a.nbytes)
    return a
