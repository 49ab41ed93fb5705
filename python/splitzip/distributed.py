"""Load a cached checkpoint onto the ranks of a torch.distributed process
group, each stored object read from disk once per node.

    import torch.distributed as dist
    from splitzip.distributed import load
    dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=5))
    tensors = load("llama.sz", rules="*.q_proj.weight=shard:0,*.o_proj.weight=shard:1")

Every rank calls load with the same arguments. The plan (splitzip plan,
docs/splitzip.md section 13) gives each tensor a reader rank, which reads
its stored bytes (a payload, checked whole, or the raw bytes) and
broadcasts them, compressed, to the others; every rank decodes them on its
host and keeps its part: the whole tensor when replicated, its equal part
along the dimension when sharded (what torch.chunk gives rank r). A rank
that fails to read a tensor tells the others before the bytes would be
sent, so every rank raises an error naming the tensor and none waits; a
rank that dies is the process group's timeout.

With the NCCL backend the bytes travel in CUDA memory (the current device)
and are decoded on the host; decoding on the GPU where they land is not
built yet. Tested with the gloo backend on the CPU
(python/tests/test_distributed.py).
"""

from typing import Dict, Optional

try:
    import torch
    import torch.distributed as dist
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("splitzip.distributed needs PyTorch") from e

from ._lib import Cache
from .torch import DTYPES


def load(cache: str, rules: str = "", group=None, device=None, source: Optional[str] = None) -> Dict[str, "torch.Tensor"]:
    """This rank's tensors of the checkpoint (name -> tensor on device:
    the CPU for gloo, the current CUDA device for NCCL, unless given),
    equal bit for bit to the source's values or this rank's part of them."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    comm = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(group) == "nccl" else torch.device("cpu")
    device = torch.device(device) if device is not None else comm
    out = {}
    with Cache(cache, source) as c:
        try:
            plan = c.plan(world, rules)
        except Exception as e:
            raise ValueError(f"splitzip: cannot plan {cache} onto {world} ranks: {e}") from e
        for t in plan["tensors"]:
            name = t["name"]
            index = c.find(name)
            info = c.info_at(index)
            dt = DTYPES.get(info.dtype)
            if dt is None:
                raise ValueError(f"{name}: dtype {info.dtype} has no torch equivalent")
            size = c.stored_size(index)
            buf = torch.empty(size, dtype=torch.uint8)
            status = torch.zeros(1, dtype=torch.int64)
            failure = None
            if rank == t["reader"]:
                try:
                    if size:
                        c.read_stored_into_ptr(index, buf.data_ptr(), size)
                except Exception as e:  # told to every rank, then raised
                    failure = e
                    status[0] = 1
            status = status.to(comm)
            dist.broadcast(status, src=t["reader"], group=group)
            if int(status[0]) != 0:
                if failure is not None:
                    raise failure
                raise RuntimeError(f"splitzip: rank {t['reader']} failed to read tensor {name}")
            if size:
                wire = buf.to(comm)
                dist.broadcast(wire, src=t["reader"], group=group)
                buf = wire.cpu()
            raw = torch.empty(info.nbytes, dtype=torch.uint8)
            c.decode_host_ptr(index, buf.data_ptr(), size, raw.data_ptr(), info.nbytes)
            full = raw.view(dt).reshape(info.shape) if info.nbytes else torch.empty(info.shape, dtype=dt)
            p = t["placement"]
            if p.get("shard"):
                full = torch.chunk(full, world, dim=p.get("dim", 0))[rank].contiguous()
            out[name] = full.to(device)
    return out
