"""Load a cached checkpoint onto the ranks of a torch.distributed process
group, each stored object read from disk once per node.

    import torch.distributed as dist
    from splitzip.distributed import load
    dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=5))
    tensors = load("llama.sz", rules="*.q_proj.weight=shard:0,*.o_proj.weight=shard:1")

Every rank calls load with the same arguments. The plan (splitzip plan,
docs/splitzip.md section 13) gives each tensor a reader rank, which reads
its stored bytes (a payload, checked whole, or the raw bytes) and
broadcasts them, compressed, to the others, a batch of tensors a
broadcast; every rank decodes them on its
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


def load(cache: str, rules: str = "", group=None, device=None, source: Optional[str] = None,
         batch_bytes: int = 64 << 20) -> Dict[str, "torch.Tensor"]:
    """This rank's tensors of the checkpoint (name -> tensor on device:
    the CPU for gloo, the current CUDA device for NCCL, unless given),
    equal bit for bit to the source's values or this rank's part of them.
    Each reader sends its tensors in batches of about batch_bytes stored
    bytes, one broadcast a batch (a tensor larger than that alone)."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    comm = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(group) == "nccl" else torch.device("cpu")
    device = torch.device(device) if device is not None else comm
    out = {}
    with Cache(cache, source) as c:
        try:
            plan = c.plan(world, rules)
        except Exception as e:
            raise ValueError(f"splitzip: cannot plan {cache} onto {world} ranks: {e}") from e
        # (tensor plan, index, info, stored size), in batches per reader.
        batches = []
        for reader in range(world):
            cur, size = [], 0
            for t in plan["tensors"]:
                if t["reader"] != reader:
                    continue
                index = c.find(t["name"])
                n = c.stored_size(index)
                if cur and size + n > batch_bytes:
                    batches.append((reader, cur))
                    cur, size = [], 0
                cur.append((t, index, c.info_at(index), n))
                size += n
            if cur:
                batches.append((reader, cur))
        for reader, items in batches:
            _batch(c, reader, items, rank, world, group, comm, device, out)
    return out


def _batch(c: Cache, reader: int, items: list, rank: int, world: int, group, comm, device, out: dict) -> None:
    """One batch: the reader reads the stored bytes of items into one
    buffer and broadcasts whether that worked (0, or 1 + the item that
    failed), then the buffer; every rank decodes each item and keeps its
    part."""
    offs, total = [], 0
    for _, _, _, n in items:
        offs.append(total)
        total += n
    buf = torch.empty(total, dtype=torch.uint8)
    status = torch.zeros(1, dtype=torch.int64)
    failure = None
    if rank == reader:
        for k, (t, index, _, n) in enumerate(items):
            try:
                if n:
                    c.read_stored_into_ptr(index, buf.data_ptr() + offs[k], n)
            except Exception as e:  # told to every rank, then raised
                failure, status[0] = e, k + 1
                break
    status = status.to(comm)
    dist.broadcast(status, src=reader, group=group)
    bad = int(status[0])
    if bad:
        if failure is not None:
            raise failure
        raise RuntimeError(f"splitzip: rank {reader} failed to read tensor {items[bad - 1][0]['name']}")
    if total:
        wire = buf.to(comm)
        dist.broadcast(wire, src=reader, group=group)
        buf = wire.cpu()
    for k, (t, index, info, n) in enumerate(items):
        dt = DTYPES.get(info.dtype)
        if dt is None:
            raise ValueError(f"{t['name']}: dtype {info.dtype} has no torch equivalent")
        raw = torch.empty(info.nbytes, dtype=torch.uint8)
        c.decode_host_ptr(index, buf.data_ptr() + offs[k], n, raw.data_ptr(), info.nbytes)
        full = raw.view(dt).reshape(info.shape) if info.nbytes else torch.empty(info.shape, dtype=dt)
        p = t["placement"]
        if p.get("shard"):
            full = torch.chunk(full, world, dim=p.get("dim", 0))[rank].contiguous()
        out[t["name"]] = full.to(device)
