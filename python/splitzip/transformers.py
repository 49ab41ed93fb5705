"""Load a transformers model from a splitzip cache straight into GPU memory.

    from splitzip.transformers import from_pretrained
    model = from_pretrained("llama.sz", "path/to/model", device="cuda:0")

The model is built from its config with its parameters on the meta device
(accelerate's init_empty_weights, buffers built as usual, so non-persistent
ones such as a rotary embedding's inv_freq are computed by the model's own
code); each parameter and persistent buffer is then allocated on the device
in the checkpoint's dtype and filled from the cache in one batch (payloads
copied compressed and decoded in place); the other buffers are moved to the
device, and tied weights are tied again. The logits equal those of
transformers' from_pretrained(model_dir, device_map=device) bit for bit
(checked by python/tests/test_transformers.py on the GPU machine).
"""

from typing import Optional, Union

try:
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("splitzip.transformers needs torch, transformers and accelerate") from e

from ._lib import Cache
from .torch import DTYPES, _fill, _finish


def _owner(model: "torch.nn.Module", name: str):
    """The module holding the parameter or buffer name, and its leaf name."""
    path, _, leaf = name.rpartition(".")
    return (model.get_submodule(path) if path else model), leaf


def from_pretrained(cache: str, config: Union[str, "PretrainedConfig"], device: Union[str, int, "torch.device"] = "cuda:0",
                    source: Optional[str] = None, model_class=None, skip=None) -> "torch.nn.Module":
    """The model of config (a directory with config.json, or a config)
    with its weights from cache on device, in eval mode. model_class
    defaults to AutoModelForCausalLM. Every parameter must be in the
    cache, except those tied to one that is; a tensor of the cache of
    another shape is an error naming it. skip (for splitzip.offload), a
    function of the model returning a name prefix, leaves the parameters
    under that prefix on the meta device."""
    device = torch.device(f"cuda:{device}" if isinstance(device, int) else device)
    if not isinstance(config, PretrainedConfig):
        config = AutoConfig.from_pretrained(config)
    cls = model_class or AutoModelForCausalLM
    with init_empty_weights(include_buffers=False):
        model = cls.from_config(config)
    persistent = set(model.state_dict().keys())
    prefix = skip(model) if skip else None
    with Cache(cache, source) as c:
        known = set(c.names())
        items, missing = [], []
        # Parameters once each (tied ones share one), then persistent buffers.
        named = [(n, p) for n, p in model.named_parameters() if not (prefix and n.startswith(prefix))]
        named += [(n, b) for n, b in model.named_buffers() if n in persistent]
        for name, old in named:
            if name not in known:
                missing.append(name)
                continue
            info = c.info(name)
            dt = DTYPES.get(info.dtype)
            if dt is None:
                raise ValueError(f"{name}: dtype {info.dtype} has no torch equivalent")
            if tuple(info.shape) != tuple(old.shape):
                raise ValueError(f"{name}: shape {tuple(info.shape)} in the cache, {tuple(old.shape)} in the model")
            t = torch.empty(info.shape, dtype=dt, device=device)
            mod, leaf = _owner(model, name)
            if isinstance(old, torch.nn.Parameter):
                mod._parameters[leaf] = torch.nn.Parameter(t, requires_grad=old.requires_grad)
            else:
                mod._buffers[leaf] = t
            items.append((info, t))
        _finish(_fill(c, items))
    # Non-persistent buffers, computed on the host by the model's own code.
    for name, b in list(model.named_buffers()):
        if name not in persistent:
            mod, leaf = _owner(model, name)
            mod._buffers[leaf] = b.to(device)
    model.tie_weights()
    still = [n for n in missing if _on_meta(model, n)]
    if still:
        raise ValueError(f"{len(still)} parameters are not in the cache: {', '.join(still[:8])}")
    return model.eval()


def _on_meta(model: "torch.nn.Module", name: str) -> bool:
    mod, leaf = _owner(model, name)
    t = mod._parameters.get(leaf)
    if t is None:
        t = mod._buffers.get(leaf)
    return t is not None and t.device.type == "meta"
