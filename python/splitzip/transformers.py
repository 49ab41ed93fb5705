"""Load a transformers model from a splitzip cache, through transformers.

    from splitzip.transformers import from_pretrained
    model = from_pretrained("mixtral.sz", "path/to/model", device_map="cuda:0")

transformers does the loading: from_pretrained here calls transformers'
own from_pretrained with the checkpoint's tensors as its state_dict, so
every key rename, expert fusion and other weight conversion, tied weight,
dtype cast, device map (including "auto" with CPU placement) and buffer
is handled by transformers itself, as it would be from the safetensors
files. splitzip keeps no table of renames.

Why the state_dict argument is the seam: it is a documented argument of
transformers' from_pretrained, it sits before the conversions (the
tensors it takes are in the checkpoint's names and layout, which is what
a cache holds), and it accepts tensors already in GPU memory, so the
weights can arrive at the loader's rate. A patched safe_open would also
sit before the conversions but could only hand over host tensors, which
transformers then copies to the GPU from pageable memory at a fraction of
PCIe's rate; transformers' later hooks (after conversion) see fused
tensors the cache does not hold.

Two ways the tensors arrive:
- device_map one CUDA device (or a dict mapping everything to one): all
  checkpoint tensors are allocated on it and filled from the cache in one
  batch (payloads copied compressed and decoded in place, small tensors
  packed), then handed to transformers, which renames, fuses and assigns
  them there. Tensors that need no conversion become the parameters
  without a copy.
- any other device_map ("auto", "cpu", a dict over several devices): each
  tensor is read into host memory when transformers asks for it (decoded
  on the CPU) and transformers moves it where its map says.

The result equals transformers' from_pretrained of the original files bit
for bit (scripts/hf-matrix.py checks it across architectures). A
parameter transformers reports missing (the cache lacks a tensor the
model needs) is an error naming it, not a random initialisation.
"""

import contextlib
import os
import threading
from typing import Optional, Union

try:
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("splitzip.transformers needs torch and transformers (pip install transformers)") from e

from ._lib import Cache
from ._source import Source, device_of, dtype_of, single_device
from .torch import _fill, _finish


def _owner(model: "torch.nn.Module", name: str):
    """The module holding the parameter or buffer name, and its leaf name."""
    path, _, leaf = name.rpartition(".")
    return (model.get_submodule(path) if path else model), leaf


def _config(path, kwargs) -> "PretrainedConfig":
    if isinstance(path, PretrainedConfig):
        return path
    keys = ("trust_remote_code", "revision", "local_files_only", "token", "cache_dir")
    return AutoConfig.from_pretrained(path, **{k: kwargs[k] for k in keys if k in kwargs})


_warmup_lock = threading.Lock()


@contextlib.contextmanager
def _no_allocator_warmup():
    """transformers reserves GPU memory for the whole model before it
    loads (caching_allocator_warmup), so that its copies need no further
    cudaMalloc. With the tensors already in GPU memory that block is never
    used: it would only double the memory torch holds and cost a large
    cudaMalloc. Turned off while a GPU state_dict is handed over (one such
    load at a time in a process); a transformers without it is left as
    it is."""
    mu = getattr(transformers, "modeling_utils", None)
    with _warmup_lock:
        orig = getattr(mu, "caching_allocator_warmup", None)
        if orig is None:
            yield
            return
        mu.caching_allocator_warmup = lambda *args, **kwargs: None
        try:
            yield
        finally:
            mu.caching_allocator_warmup = orig


def _concrete(cls, config):
    """The model class an auto class (AutoModelForCausalLM, ...) picks for
    config: transformers takes a state_dict only through a model class's
    own from_pretrained."""
    mapping = getattr(cls, "_model_mapping", None)
    if mapping is None:
        return cls
    try:
        from transformers.models.auto.auto_factory import _get_model_class
        return _get_model_class(config, mapping)
    except ImportError:  # pragma: no cover - an older or newer transformers
        return mapping[type(config)]


def device_map_of(device_map, device) -> object:
    """The device_map a load uses: device_map, or device (this module's
    older argument), or cuda:0 when neither is given."""
    if device is not None:
        if device_map is not None and single_device(device_map) != device_of(device):
            raise ValueError(f"device={device!r} and device_map={device_map!r} disagree: give one of them")
        return device_of(device) or device
    return "cuda:0" if device_map is None else device_map


def load(cache: Cache, path, model_class=None, model_args=(), keep: bool = False, **kwargs):
    """transformers' from_pretrained of the model at path (a folder with
    config.json, such as a hub snapshot, or a config) with the weights of
    an open cache as its state_dict; kwargs go to transformers. Returns
    (model, Source or None, loading info)."""
    config = kwargs.pop("config", None) or _config(path, kwargs)
    cls = _concrete(model_class or AutoModelForCausalLM, config)
    device_map = kwargs.pop("device_map")
    dev = single_device(device_map)
    want_info = kwargs.pop("output_loading_info", False)
    src = None
    if dev is not None and dev.type == "cuda" and not keep:
        sd, items = {}, []
        with torch.cuda.device(dev):
            for info in cache.infos():
                t = torch.empty(info.shape, dtype=dtype_of(info), device=dev)
                sd[info.name] = t
                items.append((info, t))
            _finish(_fill(cache, items))
        del items
    else:
        src = Source(cache, keep)
        sd = src.lazy()
    with _no_allocator_warmup() if src is None else contextlib.nullcontext():
        model, info = cls.from_pretrained(None, *model_args, config=config, state_dict=sd, device_map=device_map,
                                          output_loading_info=True, **kwargs)
    del sd
    missing = sorted(info.get("missing_keys") or ())
    if missing:
        raise ValueError(f"{len(missing)} parameters are not in the cache: {', '.join(missing[:8])}"
                         f"{', ...' if len(missing) > 8 else ''}")
    bad = info.get("mismatched_keys") or ()
    if bad and not kwargs.get("ignore_mismatched_sizes"):
        k = sorted(bad)[0]
        raise ValueError(f"{len(bad)} tensors differ in shape from the model's, first {k}")
    if isinstance(path, (str, os.PathLike)) and os.path.isfile(os.path.join(path, "generation_config.json")) \
            and getattr(model, "can_generate", lambda: False)():
        model.generation_config = transformers.GenerationConfig.from_pretrained(path)
    model.eval()
    return (model, src, info) if want_info else (model, src, None)


def from_pretrained(cache: str, pretrained_model_name_or_path: Union[str, "os.PathLike", "PretrainedConfig"],
                    *model_args, source: Optional[str] = None, model_class=None,
                    device: Union[str, int, "torch.device", None] = None, **kwargs):
    """The model at pretrained_model_name_or_path (a local folder with
    config.json, such as a hub snapshot, or a config) with its weights
    from the splitzip cache, loaded by transformers' own from_pretrained
    (model_class, default AutoModelForCausalLM): kwargs are its arguments
    (dtype or torch_dtype, device_map, attn_implementation, trust_remote_code,
    output_loading_info, ...). device_map defaults to cuda:0 (device= is
    the older name for a single device). In eval mode. A parameter the
    cache lacks is a ValueError naming it."""
    kwargs["device_map"] = device_map_of(kwargs.get("device_map"), device)
    with Cache(cache, source) as c:
        model, _, info = load(c, pretrained_model_name_or_path, model_class, model_args, **kwargs)
    return (model, info) if info is not None else model
