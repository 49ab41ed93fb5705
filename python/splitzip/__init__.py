"""splitzip: load tensors from a splitzip cache, bit for bit.

Pure Python over ctypes: the work is done by libsplitzip.so (the C ABI in
capi/splitzip.h), found through $SPLITZIP_LIB or next to this file (the
wheel carries it; `make capi` writes it there in a checkout). numpy and
torch are optional: see splitzip.numpy and splitzip.torch.

    import splitzip
    with splitzip.Cache("llama.sz") as cache:
        for name in cache.names():
            info = cache.info(name)          # dtype, shape, nbytes, compressed
            buf = bytearray(info.nbytes)
            cache.read_into(name, buf)       # original bytes, decoded on the CPU

Errors are splitzip.Error, each also the builtin exception Python code
expects: NotFoundError is a KeyError (no such tensor), InvalidArgumentError
a ValueError, MissingFileError a FileNotFoundError, FileError an OSError;
IntegrityError is corrupt data (a payload failing its checksum).
"""

from ._lib import (Cache, DeviceError, Error, Event, FileError, FilePermissionError, IntegrityError, InternalError,
                   InvalidArgumentError, MissingFileError, NotFoundError, SourceChangedError, TensorInfo,
                   release_idle)
from ._safe_open import Slice, safe_open
from ._version import __version__

# Tracebacks and reprs name the classes where users import them from.
for _c in (Cache, Error, TensorInfo, Event, safe_open, Slice, InvalidArgumentError, NotFoundError, IntegrityError, SourceChangedError,
           FileError, MissingFileError, FilePermissionError, DeviceError, InternalError):
    _c.__module__ = __name__
del _c

__all__ = ["Cache", "Error", "TensorInfo", "Event", "__version__", "release_idle", "safe_open", "Slice",
           "InvalidArgumentError", "NotFoundError", "IntegrityError", "SourceChangedError", "FileError",
           "MissingFileError", "FilePermissionError", "DeviceError", "InternalError"]
