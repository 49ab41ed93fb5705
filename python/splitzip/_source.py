"""The checkpoint tensors of a splitzip cache as transformers' from_pretrained
takes them in its state_dict argument: lazy values read into host memory
when transformers asks (t[...], as of a safetensors slice), and what a
device_map value means. Needs torch, not transformers, so that the tests
run it on a machine without either a GPU or transformers."""

import threading
from typing import Dict, Optional

import torch

from ._lib import Cache, TensorInfo
from .torch import torch_dtype

_SPREAD = {"auto", "balanced", "balanced_low_0", "sequential"}


def device_of(d) -> Optional["torch.device"]:
    """The one device a device_map value names, or None ("disk", "auto")."""
    if isinstance(d, bool):
        return None
    if isinstance(d, int):
        return torch.device("cuda", d)
    if isinstance(d, torch.device):
        dev = d
    elif isinstance(d, str) and d not in _SPREAD and d != "disk":
        dev = torch.device(d)
    else:
        return None
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def single_device(device_map) -> Optional["torch.device"]:
    """The device a device_map puts everything on, or None when it spreads
    the model ("auto", several devices, disk)."""
    if isinstance(device_map, dict):
        devs = {device_of(v) for v in device_map.values()}
        return devs.pop() if len(devs) == 1 else None
    return device_of(device_map)


def dtype_of(info: TensorInfo) -> "torch.dtype":
    return torch_dtype(info.name, info.dtype)


class Lazy:
    """One checkpoint tensor, read from the cache into host memory when
    transformers asks for it (t[...]), as a safetensors slice is. Its
    shape and dtype are known before: shape, dtype, get_shape(),
    get_dtype(). A Source with keep=True remembers what it handed out."""

    __slots__ = ("source", "info", "shape", "dtype")

    def __init__(self, source: "Source", info: TensorInfo):
        self.source, self.info = source, info
        self.shape, self.dtype = torch.Size(info.shape), dtype_of(info)

    def get_shape(self):
        return list(self.shape)

    def get_dtype(self) -> str:
        return self.info.dtype

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def __len__(self) -> int:
        return self.shape[0] if len(self.shape) else 0

    def __getitem__(self, index):
        t = self.source.host(self.info)
        return t if index is Ellipsis or index == () else t[index]

    def __repr__(self) -> str:
        return f"splitzip._source.Lazy({self.info.name!r}, {self.info.dtype}, {tuple(self.shape)})"


class Source:
    """The checkpoint tensors of an open cache, read on demand into host
    memory (several of transformers' threads at a time; the library
    releases the GIL)."""

    def __init__(self, cache: Cache, keep: bool = False):
        self.cache, self.keep = cache, keep
        self.kept: Dict[str, "torch.Tensor"] = {}
        self.lock = threading.Lock()

    def host(self, info: TensorInfo) -> "torch.Tensor":
        t = torch.empty(info.shape, dtype=dtype_of(info))
        if info.nbytes:
            self.cache.read_into_ptr(info.index, t.data_ptr(), info.nbytes)
        if self.keep:
            with self.lock:
                self.kept[info.name] = t
        return t

    def lazy(self) -> Dict[str, Lazy]:
        return {i.name: Lazy(self, i) for i in self.cache.infos()}
