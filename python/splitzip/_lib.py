"""ctypes binding of libsplitzip.so (capi/splitzip.h, ABI version 13)."""

import concurrent.futures
import ctypes
import errno
import operator
import os
import threading
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

ABI_VERSION = 13

_STATUS = {
    0: "ok", 1: "invalid argument", 2: "not found", 3: "corrupt", 4: "source changed",
    5: "too small", 6: "no GPU", 7: "CUDA error", 8: "I/O error", 9: "internal error",
}


class Error(Exception):
    """A failed call: status is the sz_status code, message the library's
    text, filename the file the failure is about (a damaged cache object,
    a source shard that changed or is missing, a file that could not be
    read; sz_last_error_file), or None when it is about no file. Every
    error the library reports is an instance of one of the subclasses
    below, each also the builtin exception Python code expects (KeyError,
    ValueError, OSError, ...), so both `except splitzip.Error` and
    `except KeyError` catch a missing tensor. For the OSError subclasses
    filename is OSError's own."""

    def __init__(self, status: int, message: str, filename: Optional[str] = None):
        name = str(_STATUS.get(status, status))
        # The status's name, unless the library's text already says it.
        text = f"splitzip: {message}" if name in message else f"splitzip: {name}: {message}"
        if isinstance(self, OSError):
            OSError.__init__(self, getattr(self, "_errno", None), text, filename)
        else:
            Exception.__init__(self, text)
            self.filename = filename
        self.status = status
        self.message = message
        self._text = text

    def __str__(self) -> str:
        return self._text  # KeyError and OSError would quote or prefix it

    def __reduce__(self):
        # Its class and the library's words, so that an error raised in a
        # worker process reaches the parent as itself (multiprocessing
        # pickles it; the default would call __init__ with the text alone).
        return (_rebuild, (type(self), self.status, self.message, self.filename))


def _rebuild(cls, status: int, message: str, filename: Optional[str]) -> "Error":
    e = cls.__new__(cls)
    Error.__init__(e, status, message, filename)
    return e


class InvalidArgumentError(Error, ValueError):
    """An argument the library refuses: an index out of range, a null or
    misaligned pointer, a buffer too small, a cache of several sources
    opened without source=, a folder that is not a splitzip cache."""


class NotFoundError(Error, KeyError):
    """A tensor (by name, content key or source slice) that the cache does
    not hold."""


class IntegrityError(Error):
    """Corrupt data: a payload failing its checksum, a damaged object or
    index. The bytes were not returned. filename is the damaged file,
    where the library knows it: the object's file under the cache's
    objects/ folder (a pack's, for a payload packed with others), which
    may be deleted and compressed or fetched again; else None."""


class SourceChangedError(Error, OSError):
    """A source shard changed or vanished since compression, and the
    tensor's bytes are only there; filename is the shard."""


class FileError(Error, OSError):
    """A file could not be read; filename names it where the library
    knows it."""


class MissingFileError(FileError, FileNotFoundError):
    """A file or folder that is not there."""
    _errno = errno.ENOENT


class FilePermissionError(FileError, PermissionError):
    """A file or folder that may not be read."""
    _errno = errno.EACCES


class DeviceError(Error, RuntimeError):
    """No usable GPU, or a CUDA call that failed."""


class InternalError(Error, RuntimeError):
    """A bug in the library."""


_CLASSES = {1: InvalidArgumentError, 2: NotFoundError, 3: IntegrityError, 4: SourceChangedError,
            5: InvalidArgumentError, 6: DeviceError, 7: DeviceError, 8: FileError, 9: InternalError}

# The library's messages are shared with the command line; these are said
# with the Python argument names instead.
_CLI_WORDS = (("--source ROOT", "source=ROOT"), ("--source", "source="), ("as the source argument", "as source=ROOT"))


def error(status: int, message: str, filename: Optional[str] = None) -> Error:
    """The exception for a status and message of the library: an Error of
    the subclass the status (and for files the system's reason) names,
    its message in Python's words."""
    for cli, py in _CLI_WORDS:
        message = message.replace(cli, py)
    said = _STATUS.get(status, "") + ": "
    if message.startswith(said):  # the library's own words for the status, said once
        message = message[len(said):]
    if status == 4 and "source shard missing" in message and "relocate" not in message:
        message += (" (if the source moved, open the cache with source= the folder it is in now, or record its "
                    "new place with 'splitzip relocate CACHE DIR')")
    cls = _CLASSES.get(status, Error)
    if cls is FileError:
        low = message.lower()
        if "no such file or directory" in low:
            cls = MissingFileError
        elif "permission denied" in low:
            cls = FilePermissionError
    return cls(status, message, filename)


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("index", ctypes.c_uint64), ("nbytes", ctypes.c_uint64), ("offset", ctypes.c_uint64),
        ("stored", ctypes.c_uint64), ("ndim", ctypes.c_uint32), ("compressed", ctypes.c_uint32),
        ("shape", ctypes.c_uint64 * 8), ("dtype", ctypes.c_char * 16),
    ]


class PackInfo(ctypes.Structure):
    """What Cache.pack_into_ptr wrote: the pack's bytes (staged), its
    tensors (count) and the scatter kernel's units of work; with
    entropy=True, the entropy payloads it keeps (entropy_count) and their
    batch decode's arguments (zero when it keeps none)."""
    _fields_ = [("staged", ctypes.c_uint64), ("count", ctypes.c_uint64), ("units", ctypes.c_uint64),
                ("entropy_at", ctypes.c_uint64), ("entropy_count", ctypes.c_uint64),
                ("entropy_units", ctypes.c_uint64), ("entropy_buf", ctypes.c_uint64),
                ("entropy_chunks", ctypes.c_uint64)]


# sz_pack's flags (splitzip.h).
_PACK_ENTROPY = 1


@dataclass(frozen=True)
class TensorInfo:
    """What the cache knows of one tensor. payload: how it is stored,
    "fixed" (a fixed-rate payload), "entropy" (an entropy payload) or
    "raw". compressed: a fixed-rate payload exists (an upload decodes it
    in place on the GPU; what splitzip.nn's fused kernel reads), and stored
    is its size, else nbytes; an entropy payload's tensor reads
    compressed=False and payload="entropy" (Cache.stored_size gives its
    payload's size)."""
    index: int
    name: str
    dtype: str
    shape: Tuple[int, ...]
    nbytes: int
    offset: int
    stored: int
    compressed: bool
    payload: str = "raw"


_lib = None
_lib_lock = threading.Lock()
# Set in a child forked after the library was loaded: the Go runtime
# inside it does not survive fork (its threads are not copied), and a
# call would hang.
_forked = False


def _after_fork() -> None:
    global _forked
    _forked = True


def _not_forked() -> None:
    if _forked:
        raise RuntimeError("splitzip: this process was forked after it loaded libsplitzip.so, whose Go runtime does "
                           "not survive fork: use multiprocessing's 'spawn' or 'forkserver' start method (for torch "
                           "DataLoader workers, multiprocessing_context='spawn'), and exec for other children; "
                           "a forked child can use splitzip only if its parent never loaded the library")


def _candidates() -> List[str]:
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    if os.environ.get("SPLITZIP_LIB"):
        out.append(os.environ["SPLITZIP_LIB"])
    out.append(os.path.join(here, "libsplitzip.so"))
    return out


def lib():
    """Load libsplitzip.so once and declare its functions."""
    global _lib
    loaded = _lib  # set last, once declared: no lock on the hot path (every call into the library)
    if loaded is not None:
        if _forked:
            _not_forked()
        return loaded
    with _lib_lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in _candidates():
            if os.path.exists(path):
                l = ctypes.CDLL(os.path.abspath(path))
                break
            tried.append(path)
        else:
            raise OSError("libsplitzip.so not found (install the wheel from `make wheel`, run `make capi` in a "
                          "checkout, or set SPLITZIP_LIB); tried " + ", ".join(tried))
        u64, up, cp, st = ctypes.c_uint64, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_int
        P = ctypes.POINTER
        sig = {
            "sz_abi_version": ([], ctypes.c_int),
            "sz_open": ([cp, cp, P(ctypes.c_size_t), ctypes.c_char_p, ctypes.c_size_t], st),
            "sz_close": ([up], st),
            "sz_last_error": ([up, ctypes.c_char_p, ctypes.c_size_t], st),
            "sz_last_error_file": ([up, ctypes.c_char_p, ctypes.c_size_t, P(ctypes.c_size_t)], st),
            "sz_count": ([up, P(u64)], st),
            "sz_info": ([up, u64, P(_Tensor), ctypes.c_char_p, ctypes.c_size_t], st),
            "sz_shape": ([up, u64, P(u64), ctypes.c_size_t, P(ctypes.c_uint32)], st),
            "sz_name": ([up, u64, ctypes.c_char_p, ctypes.c_size_t, P(ctypes.c_size_t)], st),
            "sz_find_name": ([up, cp, P(u64)], st),
            "sz_find_name_len": ([up, cp, ctypes.c_size_t, P(u64)], st),
            "sz_find_slice": ([up, cp, u64, u64, P(u64)], st),
            "sz_find_key": ([up, cp, P(u64)], st),
            "sz_read_host": ([up, u64, ctypes.c_void_p, u64], st),
            "sz_upload": ([up, u64, ctypes.c_int, u64, u64, up, P(ctypes.c_size_t)], st),
            "sz_upload_batch": ([up, u64, P(u64), ctypes.c_int, P(u64), P(u64), up, P(ctypes.c_size_t)], st),
            "sz_event_wait": ([up, up], st),
            "sz_event_release": ([up, up], st),
            "sz_set_resident": ([up, ctypes.c_int], st),
            "sz_set_shared": ([up, ctypes.c_int], st),
            "sz_stored_size": ([up, u64, P(u64)], st),
            "sz_read_stored": ([up, u64, ctypes.c_void_p, u64, P(u64)], st),
            "sz_decode_host": ([up, u64, ctypes.c_void_p, u64, ctypes.c_void_p, u64], st),
            "sz_plan": ([up, ctypes.c_int, cp, ctypes.c_char_p, ctypes.c_size_t, P(ctypes.c_size_t)], st),
            "sz_metadata": ([up, ctypes.c_char_p, ctypes.c_size_t, P(ctypes.c_size_t)], st),
            "sz_part": ([up, u64, ctypes.c_void_p, u64, u64, u64, ctypes.c_void_p, u64, P(u64)], st),
            "sz_decode_part": ([up, u64, ctypes.c_void_p, u64, u64, u64, ctypes.c_void_p, u64], st),
            "sz_pack_size": ([up, u64, P(u64), u64, P(u64)], st),
            "sz_pack": ([up, u64, P(u64), P(u64), P(u64), ctypes.c_void_p, u64, u64, P(PackInfo)], st),
            "sz_gpu_prepare": ([up, ctypes.c_int], st),
            "sz_scatter": ([up, ctypes.c_int, u64, P(PackInfo), up], st),
            "sz_scatter_check": ([up, ctypes.c_int, up], st),
            "sz_scatter_routed": ([up, ctypes.c_int, u64, u64, u64, u64, up], st),
            "sz_release_idle": ([P(ctypes.c_int)], st),
            "sz_gemv_prepare": ([up, ctypes.c_int], st),
            "sz_gemv": ([up, ctypes.c_int, u64, u64, ctypes.c_char_p, u64, u64, u64, u64, ctypes.c_int, up], st),
            "sz_gemv_check": ([up, ctypes.c_int, up], st),
        }
        for name, (args, res) in sig.items():
            f = getattr(l, name)
            f.argtypes, f.restype = args, res
        if l.sz_abi_version() != ABI_VERSION:
            raise OSError(f"libsplitzip.so has ABI {l.sz_abi_version()}, this package needs {ABI_VERSION}")
        os.register_at_fork(after_in_child=_after_fork)
        _lib = l
        return l


class Event:
    """An upload's completion; wait() blocks until the bytes are in place."""

    def __init__(self, cache: "Cache", handle: int):
        self._cache, self.handle = cache, handle

    def wait(self) -> None:
        self._cache._check(lib().sz_event_wait(self._cache._h, self.handle))

    def release(self) -> None:
        if self.handle:
            self._cache._check(lib().sz_event_release(self._cache._h, self.handle))
            self.handle = 0


def _ints(**args):
    """The values of args (name=value) as ints (numpy and torch integers
    too), in order; TypeError naming the first that is not an integer (a
    bool is not), InvalidArgumentError (a ValueError) the first outside 0
    to 2**64 - 1 (sizes and addresses: ctypes would take -1 as 2**64 - 1)."""
    out = []
    for name, v in args.items():
        if type(v) is not int:  # the checks below cost a load of many tensors little
            if isinstance(v, bool) or str(getattr(v, "dtype", "")) in ("bool", "torch.bool"):
                raise TypeError(f"{name} must be an int, not a bool")
            try:
                v = operator.index(v)
            except TypeError:
                raise TypeError(f"{name} must be an int, not {type(v).__name__}") from None
        if not 0 <= v < 1 << 64:
            raise error(1, f"{name} is {v}: want 0 to 2**64 - 1")
        out.append(v)
    return out


def _strs(**args) -> None:
    """Raise TypeError naming the first of args that is not a str."""
    for name, v in args.items():
        if not isinstance(v, str):
            raise TypeError(f"{name} must be a str, not {type(v).__name__}")


class Cache:
    """An open splitzip cache. Safe to use from several threads. With
    resident, uploads keep what they read in pinned host memory (per
    upload stream), so uploading a tensor again reads no file: the
    pinned-host tier of splitzip.offload. With shared (which implies
    resident), the payloads' pinned copies are one host copy that every
    process of this machine loading the same payloads shares: the first
    reads and checks them into it, later ones attach and read none; the
    memory is freed when the last process holding it closes or exits.
    The holders' folder is os.environ["SPLITZIP_SHARE_DIR"] when the Cache
    is made (unset: /dev/shm/splitzip-UID).

    What is read is what the cache holds: every payload (fixed codec or
    entropy) is decoded from the cache and checked, even when its source
    checkpoint is there, so a corrupt payload raises IntegrityError naming
    the tensor; only tensors stored raw are read from their source file
    (checked unchanged since compression by size and time).

    An open Cache holds the cache open for reading until close(), so that
    `splitzip gc` removes nothing meanwhile (it refuses the cache); while
    a gc runs, opening waits for it to finish (up to two minutes).

    A cache of several checkpoints needs source= (the root of one of
    them). Errors are subclasses of Error: NotFoundError (a KeyError) for
    a missing tensor, InvalidArgumentError (a ValueError) for a bad
    argument, MissingFileError (a FileNotFoundError) and FileError (an
    OSError) for files, IntegrityError for corrupt data; each has
    filename, the file it is about (a damaged object, a missing shard)
    or None. After close() every method raises ValueError("the cache is
    closed")."""

    def __init__(self, path: str, source: Optional[str] = None, resident: bool = False, shared: bool = False):
        self._hv = 0
        self._index = None
        self.path, self.source = None, None
        l = lib()
        path = os.fspath(path)
        if not path:
            raise error(1, "the cache path is empty")
        # Opened by its absolute path: the library reads the cache's files
        # by path as it goes, so a later os.chdir must not move it.
        path = os.path.abspath(path)
        if not os.path.exists(path):
            raise error(8, f"{path}: no such file or directory", path)
        if source is not None:
            # Not checked for here: a recorded checkpoint's path names it
            # even where its folder is gone (a self-contained cache).
            source = os.fspath(source)
        h = ctypes.c_size_t()
        err = ctypes.create_string_buffer(4096)
        src = os.fsencode(source) if source is not None else None
        status = l.sz_open(os.fsencode(path), src, ctypes.byref(h), err, len(err))
        if status:
            msg = err.value.decode(errors="replace")
            if status == 2 and source is not None:  # source= names none of the cache's checkpoints
                if not os.path.exists(source):
                    raise error(8, f"source={source}: no such file or directory", source)
                status = 1
            # sz_open has no handle to ask sz_last_error_file with: an
            # index that is damaged or cannot be read is named in the
            # message.
            index = os.path.join(path, "splitzip.json")
            raise error(status, msg, index if index + ":" in msg else path)
        self._hv = h.value
        # As absolute as path: what the library resolved at open.
        self.path, self.source = path, os.path.abspath(source) if source is not None else None
        if resident or shared:
            try:
                if shared:
                    self._check(l.sz_set_shared(self._h, 1))
                else:
                    self._check(l.sz_set_resident(self._h, 1))
            except Exception:
                self.close()
                raise

    @property
    def closed(self) -> bool:
        """Whether close() was called."""
        return not self._hv

    @property
    def _h(self) -> int:
        """The library's handle; ValueError once closed."""
        if not self._hv:
            raise ValueError("the cache is closed")
        return self._hv

    def close(self) -> None:
        """Free the cache's files and memory. Closing twice is no error;
        any other call on a closed cache raises ValueError."""
        h, self._hv = self._hv, 0
        self._index = None
        if h and not _forked:  # a forked child's copy of the handle is its parent's to close
            lib().sz_close(h)

    def __reduce__(self):
        raise TypeError("a splitzip.Cache cannot be pickled or copied: it is a handle of this process's library; "
                        "open the cache (splitzip.Cache(path)) in each process that reads it")

    def __copy__(self):
        self.__reduce__()

    def __deepcopy__(self, memo):
        self.__reduce__()

    def __enter__(self):
        self._h  # ValueError when closed, as for files
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _check(self, status: int) -> None:
        if status:
            buf = ctypes.create_string_buffer(4096)
            lib().sz_last_error(self._h, buf, len(buf))
            raise error(status, buf.value.decode(errors="replace"), self._last_error_file())

    def _last_error_file(self) -> Optional[str]:
        """The file this thread's last failed call is about, or None."""
        size = ctypes.c_size_t(4096)
        while True:
            buf = ctypes.create_string_buffer(size.value)
            status = lib().sz_last_error_file(self._h, buf, len(buf), ctypes.byref(size))
            if status != 5 or size.value <= len(buf):  # 5: too small, with the size
                break
        # Bytes as the file system holds them, as Python's own OSErrors give them.
        return os.fsdecode(buf.value) if status == 0 and buf.value else None

    def __len__(self) -> int:
        n = ctypes.c_uint64()
        self._check(lib().sz_count(self._h, ctypes.byref(n)))
        return n.value

    def __contains__(self, name) -> bool:
        """Whether the checkpoint has a tensor called name."""
        if not isinstance(name, str):
            return False
        try:
            self.find(name)
        except NotFoundError:
            return False
        return True

    def __iter__(self):
        """The tensors' names, in index order (as names())."""
        return iter(self.names())

    def __repr__(self) -> str:
        # No library call in a forked child, where it would hang (and a
        # traceback's repr must not).
        state = "closed" if self.closed else "a forked copy" if _forked else f"{len(self)} tensors"
        source = f", source={self.source!r}" if self.source is not None else ""
        return f"<splitzip.Cache {self.path!r}{source}: {state}>"

    def info_at(self, index: int) -> TensorInfo:
        """What the cache knows of tensor index (0 <= index < len(cache))."""
        index = self._index_arg(index)
        t = _Tensor()
        self._check(lib().sz_info(self._h, index, ctypes.byref(t), None, 0))
        # The name's every byte (it may hold NUL characters), by its length;
        # a second call where it is longer than the first buffer.
        n = ctypes.c_size_t()
        name = ctypes.create_string_buffer(256)
        status = lib().sz_name(self._h, index, name, len(name), ctypes.byref(n))
        if status == 5:  # too small, with the length
            name = ctypes.create_string_buffer(n.value + 1)
            status = lib().sz_name(self._h, index, name, len(name), ctypes.byref(n))
        self._check(status)
        raw = name.raw[:n.value]
        payload = "fixed" if t.compressed else "raw"
        if not t.compressed and t.nbytes > 0 and self.stored_size(index) < t.nbytes:
            payload = "entropy"  # the only other payload: smaller than its tensor, as compress keeps them
        return TensorInfo(index=t.index, name=raw.decode(errors="surrogateescape"), dtype=t.dtype.decode(),
                          shape=self._shape(index, t), nbytes=t.nbytes,
                          offset=t.offset, stored=t.stored, compressed=bool(t.compressed), payload=payload)

    def _shape(self, index: int, t: "_Tensor") -> Tuple[int, ...]:
        if t.ndim <= 8:
            return tuple(t.shape[i] for i in range(t.ndim))
        dims = (ctypes.c_uint64 * t.ndim)()
        ndim = ctypes.c_uint32()
        self._check(lib().sz_shape(self._h, index, dims, t.ndim, ctypes.byref(ndim)))
        return tuple(dims[i] for i in range(ndim.value))

    def infos(self) -> List[TensorInfo]:
        """What the cache knows of every tensor, in index order."""
        self._h
        index = self._index
        if index is None:
            index = [self.info_at(i) for i in range(len(self))]
            self._index = index
        return index

    def names(self) -> List[str]:
        return [t.name for t in self.infos()]

    def _index_arg(self, index: int) -> int:
        if type(index) is not int:
            if isinstance(index, bool) or str(getattr(index, "dtype", "")) in ("bool", "torch.bool"):
                raise TypeError("tensor index must be an int, not a bool")
            try:
                index = operator.index(index)  # numpy and torch integers too
            except TypeError:
                raise TypeError(f"tensor index must be an int, not {type(index).__name__}") from None
        if index < 0 or index >= 1 << 63:
            raise error(1, f"tensor index {index}: want 0 to {len(self) - 1}")
        return index

    def find(self, name: str) -> int:
        """The index of the tensor called name; NotFoundError (a KeyError)
        when there is none."""
        self._h
        if not isinstance(name, str):
            raise TypeError(f"tensor name must be a str, not {type(name).__name__}")
        try:
            b = name.encode(errors="surrogateescape")
        except UnicodeEncodeError:
            # A lone surrogate: no safetensors file can name a tensor so.
            raise error(2, f"tensor {name!r}: not in the cache (the name is not valid UTF-8)") from None
        i = ctypes.c_uint64()
        self._check(lib().sz_find_name_len(self._h, b, len(b), ctypes.byref(i)))
        return i.value

    def find_slice(self, shard: str, offset: int, size: int) -> int:
        """The index of the tensor stored at bytes [offset, offset + size)
        of the source shard file shard (a path or its base name);
        NotFoundError (a KeyError) when none is."""
        if isinstance(shard, os.PathLike):
            shard = os.fspath(shard)
        _strs(shard=shard)
        offset, size = _ints(offset=offset, size=size)
        i = ctypes.c_uint64()
        self._check(lib().sz_find_slice(self._h, shard.encode(), offset, size, ctypes.byref(i)))
        return i.value

    def find_key(self, key: str) -> int:
        """The index of a tensor whose content key (hex, as inspect and
        plan print it) is key; NotFoundError (a KeyError) when none is."""
        _strs(key=key)
        i = ctypes.c_uint64()
        self._check(lib().sz_find_key(self._h, key.encode(), ctypes.byref(i)))
        return i.value

    def info(self, name: str) -> TensorInfo:
        return self.info_at(self.find(name))

    def read_into_ptr(self, index: int, ptr: int, capacity: int) -> None:
        """Write tensor index's bytes to host memory at ptr (capacity bytes)."""
        if not (type(index) is type(ptr) is type(capacity) is int and 0 <= index < 1 << 63
                and 0 <= ptr < 1 << 64 and 0 <= capacity < 1 << 64):  # else checked (a call a tensor)
            index = self._index_arg(index)
            ptr, capacity = _ints(ptr=ptr, capacity=capacity)
        self._check(lib().sz_read_host(self._h, index, ctypes.c_void_p(ptr), capacity))

    def stored_size(self, index: int) -> int:
        """The bytes read_stored_into_ptr writes for tensor index: its
        payload's, or its raw size."""
        index = self._index_arg(index)
        n = ctypes.c_uint64()
        self._check(lib().sz_stored_size(self._h, index, ctypes.byref(n)))
        return n.value

    def read_stored_into_ptr(self, index: int, ptr: int, capacity: int) -> int:
        """Write tensor index's stored bytes (a payload, checked whole, or
        the raw bytes) to host memory at ptr; returns their number."""
        index = self._index_arg(index)
        ptr, capacity = _ints(ptr=ptr, capacity=capacity)
        n = ctypes.c_uint64()
        self._check(lib().sz_read_stored(self._h, index, ctypes.c_void_p(ptr), capacity, ctypes.byref(n)))
        return n.value

    def decode_host_ptr(self, index: int, src: int, srclen: int, dst: int, capacity: int) -> None:
        """Decode srclen stored bytes of tensor index at src (as
        read_stored_into_ptr gives them, perhaps on another rank) into
        host memory at dst (capacity >= nbytes), checking them."""
        index = self._index_arg(index)
        src, srclen, dst, capacity = _ints(src=src, srclen=srclen, dst=dst, capacity=capacity)
        self._check(lib().sz_decode_host(self._h, index, ctypes.c_void_p(src), srclen, ctypes.c_void_p(dst), capacity))

    @staticmethod
    def part_bound(stored: int, nbytes: int) -> int:
        """Bytes enough for any part of a tensor of nbytes with stored
        bytes of that size (part_into_ptr)."""
        return stored + 128 + 16 * (nbytes // 32768 + 2)

    def part_into_ptr(self, index: int, src: int, srclen: int, lo: int, hi: int, dst: int, capacity: int) -> int:
        """Cut from srclen stored bytes of tensor index at src (as
        read_stored_into_ptr gives them) the part that rebuilds its bytes
        [lo, hi) into host memory at dst; returns its size. A payload's
        part is the chunks covering the range, checksummed (a version 1
        entropy payload's, the payload); a raw tensor's, the bytes."""
        index = self._index_arg(index)
        src, srclen, lo, hi, dst, capacity = _ints(src=src, srclen=srclen, lo=lo, hi=hi, dst=dst, capacity=capacity)
        n = ctypes.c_uint64()
        self._check(lib().sz_part(self._h, index, ctypes.c_void_p(src), srclen, lo, hi, ctypes.c_void_p(dst), capacity,
                                  ctypes.byref(n)))
        return n.value

    def decode_part_ptr(self, index: int, part: int, partlen: int, lo: int, hi: int, dst: int, capacity: int) -> None:
        """Write tensor index's bytes [lo, hi) into host memory at dst from
        a part (part_into_ptr, perhaps on another rank), checking it."""
        index = self._index_arg(index)
        part, partlen, lo, hi, dst, capacity = _ints(part=part, partlen=partlen, lo=lo, hi=hi, dst=dst,
                                                     capacity=capacity)
        self._check(lib().sz_decode_part(self._h, index, ctypes.c_void_p(part), partlen, lo, hi, ctypes.c_void_p(dst),
                                         capacity))

    def plan(self, ranks: int, rules: str = "") -> dict:
        """The plan of a load onto ranks ranks under placement rules
        ("PATTERN=replicate|shard:DIM,..."): each tensor's reader and
        parts, each rank's sums (docs/DESIGN.md, section 6)."""
        ranks, = _ints(ranks=ranks)
        _strs(rules=rules)
        return self._json(lib().sz_plan, ranks, rules.encode())

    def shard_metadata(self) -> List[Tuple[str, Optional[Dict[str, str]]]]:
        """Each source shard's file name and its header's __metadata__ (a
        dict of strings, or None where the header has none), in the
        checkpoint's order, read from the headers the cache holds: no
        source file is needed."""
        return [(s["shard"], s["metadata"]) for s in self._json(lib().sz_metadata)]

    def _json(self, fn, *args):
        """The JSON document fn (sz_plan, sz_metadata) writes after args:
        asked once for its size, then into a buffer of it."""
        import json
        n = ctypes.c_size_t()
        status = fn(self._h, *args, None, 0, ctypes.byref(n))
        if status not in (0, 5):  # 5: too small, with the size
            self._check(status)
        buf = ctypes.create_string_buffer(n.value)
        self._check(fn(self._h, *args, buf, len(buf), ctypes.byref(n)))
        return json.loads(buf.value.decode())

    def read_many(self, items, threads: Optional[int] = None) -> None:
        """read_into_ptr for many (index, ptr, capacity) items, on several
        threads (the library call releases the GIL)."""
        self._h
        items = list(items)
        workers = threads or min(8, os.cpu_count() or 1)
        if workers <= 1 or len(items) <= 1:
            for i, p, n in items:
                self.read_into_ptr(i, p, n)
            return
        # Small items go in runs, a run a task: a future and its locks cost
        # more than reading a small tensor (100,000 tiny tensors: 1.6 s of
        # 4.7 in futures). A run ends at 1 MiB or 1,024 items; larger items
        # are a task each, so the threads take them as they free up.
        runs, run, size = [], [], 0
        for it in items:
            if it[2] >= 1 << 18:
                runs.append([it])
                continue
            run.append(it)
            size += it[2]
            if size >= 1 << 20 or len(run) >= 1024:
                runs.append(run)
                run, size = [], 0
        if run:
            runs.append(run)

        def read_run(run):
            for i, p, n in run:
                self.read_into_ptr(i, p, n)

        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as ex:
            for f in [ex.submit(read_run, r) for r in runs]:
                f.result()

    def read_into(self, name: str, buf) -> None:
        """Write a tensor's original bytes into a writable buffer."""
        self._h
        mv = memoryview(buf).cast("B")
        if mv.readonly:
            raise ValueError("read_into needs a writable buffer")
        i = self.find(name)
        if mv.nbytes == 0:
            self.read_into_ptr(i, 0, 0)
            return
        c = (ctypes.c_char * mv.nbytes).from_buffer(mv)
        self.read_into_ptr(i, ctypes.addressof(c), mv.nbytes)

    def upload(self, index: int, device_ptr: int, capacity: int, device: int = 0, stream: int = 0) -> Event:
        """Enqueue tensor index into device memory [device_ptr, +capacity) on a CUDA stream."""
        ev = ctypes.c_size_t()
        self._check(lib().sz_upload(self._h, index, device, device_ptr, capacity, stream, ctypes.byref(ev)))
        return Event(self, ev.value)

    def upload_batch(self, indices: List[int], device_ptrs: List[int], capacities: List[int],
                     device: int = 0, stream: int = 0) -> Event:
        """Enqueue tensors indices[k] into device memory [device_ptrs[k], +capacities[k])
        on a CUDA stream; one event covers them all. Reads run in parallel
        and small tensors are packed, so this is much faster than one
        upload() per tensor."""
        n = len(indices)
        if len(device_ptrs) != n or len(capacities) != n:
            raise ValueError("indices, device_ptrs and capacities differ in length")
        arr = ctypes.c_uint64 * n
        ev = ctypes.c_size_t()
        self._check(lib().sz_upload_batch(self._h, n, arr(*indices), device, arr(*device_ptrs), arr(*capacities),
                                          stream, ctypes.byref(ev)))
        return Event(self, ev.value)

    def pack_size(self, indices: List[int], entropy: bool = False) -> int:
        """The bytes pack_into_ptr needs for the pack of tensors indices
        (made with the same entropy)."""
        arr = (ctypes.c_uint64 * len(indices))(*indices)
        n = ctypes.c_uint64()
        self._check(lib().sz_pack_size(self._h, len(indices), arr, _PACK_ENTROPY if entropy else 0, ctypes.byref(n)))
        return n.value

    def pack_into_ptr(self, indices: List[int], device_ptrs: List[int], capacities: List[int],
                      ptr: int, capacity: int, entropy: bool = False) -> PackInfo:
        """Write into host memory at ptr (capacity bytes) the pack of
        tensors indices bound for device memory [device_ptrs[k],
        +capacities[k]): their stored bytes, checked, behind the table
        scatter() follows. An entropy payload is packed decoded (BF16 as
        a fixed-rate payload, others raw), or with entropy=True kept as
        it is stored, for scatter() to decode on the device after the
        scatter: fewer bytes a copy, a slower decode (not for
        scatter_routed). pack_size() bounds the pack; the returned
        info.staged is what it took."""
        n = len(indices)
        if len(device_ptrs) != n or len(capacities) != n:
            raise ValueError("indices, device_ptrs and capacities differ in length")
        arr = ctypes.c_uint64 * n
        info = PackInfo()
        self._check(lib().sz_pack(self._h, n, arr(*indices), arr(*device_ptrs), arr(*capacities),
                                  ctypes.c_void_p(ptr), capacity, _PACK_ENTROPY if entropy else 0,
                                  ctypes.byref(info)))
        return info

    def gpu_prepare(self, device: int = 0) -> None:
        """Load the scatter kernel on device, so that scatter() later only
        enqueues (and can be captured in a CUDA graph)."""
        self._check(lib().sz_gpu_prepare(self._h, device))

    def scatter(self, device: int, base: int, info: PackInfo, stream: int = 0) -> None:
        """Enqueue on stream one kernel that writes every tensor of the
        pack in device memory at base to its range (and, for a pack that
        keeps entropy payloads, one that decodes them). Entries the
        kernels find invalid write nothing; scatter_check reports them."""
        self._check(lib().sz_scatter(self._h, device, base, ctypes.byref(info), stream))

    def scatter_routed(self, device: int, packs: int, want: int, n: int, active: int, stream: int = 0) -> None:
        """Enqueue on stream one kernel that writes, of n candidate packs,
        those whose byte at want + k (device memory) is nonzero. packs is
        device memory with n rows of four uint64s: a pack's base (device
        memory or pinned host memory) and its info's staged, count and
        units. The kernel reads both tables when it runs, so a captured
        launch follows them at each replay. active: candidates wanted at
        once (the launch's shape). Errors as scatter()'s."""
        self._check(lib().sz_scatter_routed(self._h, device, packs, want, n, active, stream))

    def scatter_check(self, device: int = 0, stream: int = 0) -> None:
        """Wait for stream and raise Error (corrupt) if a scatter on
        device found an invalid entry since the last check."""
        self._check(lib().sz_scatter_check(self._h, device, stream))

    def gemv_prepare(self, device: int = 0) -> None:
        """Load the matrix-vector kernels on device, so that gemv() later
        only enqueues (and can be captured in a CUDA graph)."""
        self._check(lib().sz_gemv_prepare(self._h, device))

    def gemv(self, device: int, w: int, w_len: int, head: bytes, rows: int, cols: int, x: int, y: int, batch: int,
             stream: int = 0) -> None:
        """Enqueue on stream y = W x for batch (1 to 16) vectors: W is the
        rows x cols BF16 matrix whose fixed payload lies in the w_len bytes
        at w (device memory, 16-byte aligned), head the payload's first 64
        bytes (the size it gives must fit in w_len); x is
        batch x cols BF16 (16-byte aligned) and y batch x rows BF16,
        row-major. The weights are decoded in registers, never written
        out. A payload the kernel finds bad is reported by gemv_check."""
        if len(head) != 64:
            raise ValueError(f"head is a payload's 64-byte header, got {len(head)} bytes")
        self._check(lib().sz_gemv(self._h, device, w, w_len, head, rows, cols, x, y, batch, stream))

    def gemv_check(self, device: int = 0, stream: int = 0) -> None:
        """Wait for stream and raise Error (corrupt) if a gemv on device
        found a bad payload since the last check."""
        self._check(lib().sz_gemv_check(self._h, device, stream))


def release_idle() -> int:
    """Free what closed Caches' GPU uploads left for later ones (a device
    context reference, the decode kernel, up to 1 GiB of pinned staging
    per device and stream), kept so that the next Cache uploads at once.
    Returns how many such sets it freed."""
    n = ctypes.c_int()
    st = lib().sz_release_idle(ctypes.byref(n))
    if st:
        raise error(st, "release_idle failed")
    return n.value
