"""Load a cached checkpoint into torch tensors, like safetensors.torch.

    from splitzip.torch import load_file
    tensors = load_file("llama.sz", device="cuda:0")

On a CUDA device each tensor is allocated by torch and all are filled by
the library in one batch on the current stream: files are read by several
threads, payloads copied compressed and decoded in place, small tensors
packed several to a copy, other tensors copied raw. The tensors are
returned when the batch has completed.

For loaders that own their memory, upload_into fills existing tensors.
"""

from typing import Dict, Optional, Union

try:
    import torch
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("splitzip.torch needs PyTorch (pip install torch); splitzip.numpy works without it") from e

from ._lib import Cache, TensorInfo, error

DTYPES = {
    "BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64,
    "I8": torch.int8, "I16": torch.int16, "I32": torch.int32, "I64": torch.int64,
    "U8": torch.uint8, "BOOL": torch.bool,
}
for _name, _attr in (("U16", "uint16"), ("U32", "uint32"), ("U64", "uint64")):
    if hasattr(torch, _attr):  # torch 2.3 and later
        DTYPES[_name] = getattr(torch, _attr)
if hasattr(torch, "float8_e4m3fn"):
    DTYPES["F8_E4M3"] = torch.float8_e4m3fn
    DTYPES["F8_E5M2"] = torch.float8_e5m2

# The hint for a dtype that this torch lacks: the release that has it.
_NEEDS = {**dict.fromkeys(("U16", "U32", "U64"), " (U16, U32 and U64 need torch 2.3 or later)"),
          **dict.fromkeys(("F8_E4M3", "F8_E5M2"), " (FP8 dtypes need torch 2.1 or later)")}


def torch_dtype(name: str, dtype: str) -> "torch.dtype":
    """The torch dtype of a cache's tensor (name, safetensors dtype), or
    splitzip.InvalidArgumentError (a ValueError) naming the tensor and the
    torch release that has the dtype, where this one lacks it."""
    dt = DTYPES.get(dtype)
    if dt is None:
        raise error(1, f"{name}: dtype {dtype} has no equivalent in torch {torch.__version__}" + _NEEDS.get(dtype, ""))
    return dt


def check_tensor(info: TensorInfo, t: torch.Tensor) -> None:
    """Check that t can take the bytes of the cache's tensor info: a
    torch.Tensor of its dtype and shape, contiguous, on the CPU or a CUDA
    device. Raises ValueError (splitzip.InvalidArgumentError) naming the
    tensor and saying what was expected and what was found, TypeError for
    what is no tensor."""
    def bad(what: str):
        return error(1, f"tensor {info.name!r}: {what}")
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"tensor {info.name!r}: want a torch.Tensor, found {type(t).__name__}")
    want = torch_dtype(f"tensor {info.name!r}", info.dtype)
    if t.dtype != want:
        raise bad(f"dtype {t.dtype} given, the cache has {info.dtype} ({want})")
    if tuple(t.shape) != tuple(info.shape):
        raise bad(f"shape {tuple(t.shape)} given, the cache has {tuple(info.shape)}")
    if t.device.type not in ("cpu", "cuda"):
        raise bad(f"device {t.device} given, want the CPU or a CUDA device")
    if not t.is_contiguous():
        raise bad(f"not contiguous (strides {tuple(t.stride())}); give a contiguous tensor, such as t.contiguous()")
    if t.numel() * t.element_size() != info.nbytes:  # cannot differ once dtype and shape agree
        raise bad(f"{t.numel() * t.element_size()} bytes given, the cache has {info.nbytes}")


def _fill(c: Cache, items: list) -> list:
    """Fill (info, tensor) items, each checked first (check_tensor): CPU
    tensors now, CUDA tensors in one batch per device on its current
    stream. Returns the events."""
    events, batches, host = [], {}, []
    for info, t in items:
        check_tensor(info, t)
    for info, t in items:
        index, nbytes = info.index, info.nbytes
        if t.device.type == "cuda":
            dev = t.device.index if t.device.index is not None else torch.cuda.current_device()
            batches.setdefault(dev, []).append((index, nbytes, t))
        else:
            host.append((index, t.data_ptr(), nbytes))
    c.read_many(host)
    for dev, b in batches.items():
        stream = torch.cuda.current_stream(dev).cuda_stream
        events.append(c.upload_batch([i for i, _, _ in b], [t.data_ptr() for _, _, t in b],
                                     [n for _, n, _ in b], device=dev, stream=stream))
    return events


def _finish(events: list) -> None:
    for e in events:
        e.wait()
        e.release()


def _device(device) -> torch.device:
    """The device argument of load_file and get_tensor, checked before
    any tensor is made."""
    try:
        device = torch.device(f"cuda:{device}" if isinstance(device, int) else device)
    except (RuntimeError, TypeError) as e:  # torch's words for a string that names no device
        raise error(1, f"device={device!r}: {e}") from None
    if device.type not in ("cpu", "cuda"):
        raise error(1, f"device={device}: want the CPU or a CUDA device")
    if device.type == "cuda" and not torch.cuda.is_available():
        # torch's own AssertionError ("not compiled with CUDA") is no
        # splitzip.Error: say it as upload does.
        raise error(6, f"torch {torch.__version__} finds no CUDA device for {device}")
    return device


def load_file(cache: str, device: Union[str, int, torch.device] = "cpu", source: Optional[str] = None) -> Dict[str, torch.Tensor]:
    """Every tensor of the checkpoint on device, equal bit for bit to
    safetensors.torch.load_file(source, device=device)."""
    device = _device(device)
    out, items = {}, []
    with Cache(cache, source) as c:
        for info in c.infos():
            t = torch.empty(info.shape, dtype=torch_dtype(info.name, info.dtype), device=device)
            items.append((info, t))
            out[info.name] = t
        _finish(_fill(c, items))
    return out


def get_tensor(cache: Cache, name: str, device: Union[str, int, torch.device] = "cpu") -> torch.Tensor:
    """One tensor of an open Cache on device, bit for bit, as load_file
    gives it (safetensors' get_tensor); NotFoundError (a KeyError) when
    the checkpoint has no tensor called name."""
    device = _device(device)
    info = cache.info(name)
    t = torch.empty(info.shape, dtype=torch_dtype(info.name, info.dtype), device=device)
    _finish(_fill(cache, [(info, t)]))
    return t


def upload_into(cache: Cache, tensors: Dict[str, torch.Tensor], wait: bool = True) -> list:
    """Fill caller-owned tensors (name -> tensor of the cache's dtype and
    shape, contiguous, on the CPU or a CUDA device) from an open Cache.
    Every tensor is checked (check_tensor) before any is written: a
    mismatch raises ValueError naming the tensor, a name the cache lacks
    KeyError. With wait False, returns the events instead of waiting;
    work on the current stream is ordered after the uploads either way."""
    items = [(cache.info(name), t) for name, t in tensors.items()]
    events = _fill(cache, items)
    if wait:
        _finish(events)
        return []
    return events
