"""Load a cached checkpoint onto the ranks of a torch.distributed process
group, each stored object read from disk once per node.

    import torch.distributed as dist
    from splitzip.distributed import load
    dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=5))
    tensors = load("llama.sz", rules="*.q_proj.weight=shard:0,*.o_proj.weight=shard:1")

Every rank calls load with the same arguments, on a cache of the same
contents (its own copy, or the node's shared folder): before any bytes
travel, one all-reduce checks that every rank opened the cache and
planned the load alike (the plan names each tensor's content key), so
that ranks that disagree (other rules, another checkpoint, a cache
compressed with another codec) or a rank that cannot open its cache
make every rank raise, rather than their collectives mismatching. The
plan (splitzip plan, docs/DESIGN.md section 6) gives each tensor a
reader rank, which reads
its stored bytes (a payload, checked whole, or the raw bytes). A tensor
sharded along its first dimension is a byte range a rank: the reader
cuts each rank's part (the payload chunks covering its range, with a
checksum of their own, or its raw bytes; a version 1 entropy payload,
which has no chunk records, whole) and scatters the parts, so each rank
receives about 1/N of the tensor; every other tensor goes whole,
compressed, to every rank in one broadcast a batch. Every rank decodes
on its host and keeps its part: the whole tensor when replicated, its
equal part along the dimension when sharded (torch.chunk's part for rank
r; a sharded dimension must divide evenly among the ranks, and a rule
whose dimension no tensor it matches has is refused). A rank that fails
to read a tensor tells the others
before the bytes would be sent, so every rank raises an error naming the
tensor and none waits; a rank that fails to decode (a part damaged on
the wire) is known to all at the batch's end, and every rank raises an
error naming the tensor. The other ranks' error is of the failing rank's
kind, the class its sz_status names (an IntegrityError for a damaged
payload, a FileError for a file that could not be read; RuntimeError
where its error was not splitzip's), with its words and the file it
named (filename). A rank that dies is the process
group's timeout.

With the NCCL backend the bytes travel in CUDA memory (the current device).
Tensors sent whole then go as one pack a batch (the stored bytes behind a
scatter table, as splitzip.offload's packs, built by the reader with
placeholder destinations): each rank writes its own tensors' addresses
and sizes into the table it received and decodes the whole batch in
place with one scatter kernel launch, so nothing is decoded on the host;
a damaged pack is named by the tensor whose bytes differ from the pack
the rank builds from its own copy of the cache. Row parts (tensors
sharded along dimension 0) are decoded on the host. Tested with the gloo
backend on the CPU, several processes, and with NCCL at world size 1 on
one GPU (python/tests/test_distributed.py).
"""

import hashlib
import json
import os
import warnings
from typing import Dict, Optional

try:
    import torch
    import torch.distributed as dist
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("splitzip.distributed needs PyTorch") from e

from ._lib import Cache, Error, PackInfo, error
from ._packs import ENTRY, owner
from .torch import torch_dtype


def load(cache: str, rules: str = "", group=None, device=None, source: Optional[str] = None,
         batch_bytes: int = 64 << 20, stats: Optional[dict] = None) -> Dict[str, "torch.Tensor"]:
    """This rank's tensors of the checkpoint (name -> tensor on device:
    the CPU for gloo, the current CUDA device for NCCL, unless given),
    equal bit for bit to the source's values or this rank's part of them.
    Each reader sends its tensors in batches of about batch_bytes stored
    bytes, a broadcast and a scatter a batch (a tensor larger than that
    alone). With stats (a dict), adds to it this rank's "read_bytes"
    (stored bytes read from disk) and "received_bytes" (bytes received
    from other ranks)."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    comm = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(group) == "nccl" else torch.device("cpu")
    device = torch.device(device) if device is not None else comm
    out = {}
    st = stats if stats is not None else {}
    st.setdefault("read_bytes", 0)
    st.setdefault("received_bytes", 0)
    # Whole tensors are decoded where they land when that is the GPU they
    # are kept on.
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    gpu = comm.type == "cuda" and device == comm
    c, plan = _open(cache, source, rules, batch_bytes, gpu, rank, world, group, comm)
    with c:
        if rank == 0:  # a mistyped rule places nothing: said once
            for r in plan.get("unmatched_rules") or []:
                warnings.warn(f"splitzip: rule {r!r} matches no tensor of {cache}", stacklevel=2)
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
            _batch(c, reader, items, rank, world, group, comm, device, out, st, gpu)
    return out


def _open(cache: str, source: Optional[str], rules: str, batch_bytes: int, gpu: bool, rank: int, world: int,
          group, comm):
    """The cache and its plan onto world ranks, once every rank has opened
    and planned it alike (_agree): a rank that cannot makes every rank
    raise, none waits."""
    c, plan, failure, what = None, None, None, f"cannot open {cache}"
    try:
        c = Cache(cache, source)
        if gpu:
            what = f"cannot prepare GPU {comm.index} for {cache}"
            c.gpu_prepare(comm.index)
        what = f"cannot plan {cache} onto {world} ranks"
        plan = c.plan(world, rules)
    except Error as e:  # the library's class, with what failed
        message = e.message if e.message.startswith(cache) else f"{what}: {e.message}"
        failure = error(e.status, message, e.filename)
        failure.__cause__ = e
    except Exception as e:  # noqa: BLE001 - told to every rank (as a RuntimeError), then raised
        failure = e
    try:
        _agree(plan, failure, batch_bytes, gpu, cache, rules, rank, world, group, comm)
    except BaseException:
        if c is not None:
            c.close()
        raise
    return c, plan


def _fingerprint(plan: dict, batch_bytes: int, gpu: bool) -> list:
    """Two 63-bit words of a hash of what every rank must agree on before
    the first collective: the plan (the tensors, their content keys,
    stored kinds and sizes, readers and placements), the batch size and
    whether packs travel in CUDA memory."""
    text = json.dumps([plan, batch_bytes, gpu], sort_keys=True).encode()
    h = hashlib.blake2b(text, digest_size=16).digest()
    return [int.from_bytes(h[:8], "little") >> 1, int.from_bytes(h[8:], "little") >> 1]


def _agree(plan: Optional[dict], failure: Optional[Exception], batch_bytes: int, gpu: bool, cache: str, rules: str,
           rank: int, world: int, group, comm) -> None:
    """One all-reduce that makes every rank raise when one could not plan
    the load or the ranks' plans differ (other rules, a cache of other
    contents or codec, another batch size), rather than their collectives
    mismatching later (which aborts a gloo process or waits out the
    process group's timeout)."""
    fp = _fingerprint(plan, batch_bytes, gpu) if failure is None else [0, 0]
    # The maximum and (negated) minimum of each word, and who failed.
    word = torch.tensor(fp + [-fp[0], -fp[1], _failed(1, failure, rank, world)], dtype=torch.int64).to(comm)
    dist.all_reduce(word, op=dist.ReduceOp.MAX, group=group)
    hi0, hi1, lo0, lo1, failed = (int(x) for x in word.cpu())
    _raise_agreed(failed, failure, rank, world, group, comm, lambda item, who: f"rank {who} could not open or plan its cache")
    if (hi0, hi1) != (-lo0, -lo1):
        raise error(1, f"the ranks' plans of {cache} differ: every rank must call load with the same rules, "
                       f"batch_bytes and device kind, on a cache of the same contents (the same checkpoint "
                       f"compressed the same way); this rank {rank} of {world} has rules={rules!r}, "
                       f"batch_bytes={batch_bytes}")


def _rows(t: dict, info) -> bool:
    """Whether a tensor's parts are byte ranges: sharded along dimension
    0, not empty."""
    p = t["placement"]
    return bool(p.get("shard")) and p.get("dim", 0) == 0 and info.nbytes > 0


def _byte_range(t: dict, info, r: int):
    """Rank r's bytes [lo, hi) of a tensor sharded along dimension 0."""
    v0, v1 = t["parts"][r]["values"]
    n = 1
    for d in info.shape:
        n *= d
    size = info.nbytes // n
    return v0 * size, v1 * size


# Where a batch's status starts its part sizes (after failed, pack bytes,
# pack units, pack sum, the failure's status).
_PARTS = 5
# Above every sz_status code: a failed item and its status share a word.
_CODES = 64


def _status(e: BaseException) -> int:
    """The sz_status of a failure, told to the other ranks (0 for an error
    not of the library)."""
    return e.status if isinstance(e, Error) and 0 < e.status < _CODES else 0


def _peer(status: int, what: str, filename: Optional[str] = None) -> Exception:
    """The error a rank raises for another rank's failure: of the class
    that rank raised (an IntegrityError for a damaged payload), with the
    file it named, or RuntimeError when that was not the library's."""
    return error(status, what, filename) if status else RuntimeError(f"splitzip: {what}")


def _failed(item: int, failure: Optional[BaseException], rank: int, world: int) -> int:
    """This rank's word for _raise_agreed: 0, or the failed item (from 1),
    the failure's status and the rank in one number, so that the maximum
    over the ranks keeps them together."""
    return (item * _CODES + _status(failure)) * world + rank if failure is not None else 0


def _raise_agreed(failed: int, failure: Optional[BaseException], rank: int, world: int, group, comm, what) -> None:
    """Raise, on every rank alike, once the maximum of the ranks' _failed
    words (failed) says one failed: the failing rank it names tells the
    others its words and file (_tell), then each raises its own failure,
    or one of the failing rank's class whose text is what(item, rank)
    and that rank's words."""
    if not failed:
        return
    word, who = divmod(failed, world)
    item, code = divmod(word, _CODES)
    words, filename = _tell(failure if rank == who else None, who, rank, group, comm)
    if failure is not None:
        raise failure
    raise _peer(code, f"{what(item, who)}: {words}", filename)


def _global(group, r: int) -> int:
    """The global rank of rank r of group, which collectives' src takes."""
    return r if group is None else dist.get_global_rank(group, r)


def _tell(failure: Optional[BaseException], src: int, rank: int, group, comm):
    """Rank src's failure, told to every rank (all call it alike): its
    words (the library's message, else the exception's text) and the file
    it named, if any."""
    if rank == src:
        try:  # nothing here may keep the others waiting
            words = failure.message if isinstance(failure, Error) else f"{type(failure).__name__}: {failure}"
            filename = getattr(failure, "filename", None)
            filename = os.fsdecode(filename) if isinstance(filename, (str, bytes)) else None
            data = json.dumps([str(words), filename]).encode()
        except Exception:  # noqa: BLE001 - the words are lost, not the agreement
            data = json.dumps([type(failure).__name__, None]).encode()
        n = torch.tensor([len(data)], dtype=torch.int64).to(comm)
    else:
        n = torch.zeros(1, dtype=torch.int64).to(comm)
    dist.broadcast(n, src=_global(group, src), group=group)
    buf = torch.zeros(int(n.cpu()[0]), dtype=torch.uint8)
    if rank == src:
        buf[:] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    wire = buf.to(comm)
    dist.broadcast(wire, src=_global(group, src), group=group)
    words, filename = json.loads(bytes(wire.cpu().numpy()).decode())
    return words, filename


# Placeholder destination of a pack's entries until a rank writes its own
# (non-null and 16-byte aligned, as the pack's table wants).
_PLACEHOLDER = 16


def _batch(c: Cache, reader: int, items: list, rank: int, world: int, group, comm, device, out: dict,
           st: dict, gpu: bool) -> None:
    """One batch: the reader reads the stored bytes of items (with gpu,
    those sent whole as one pack), cuts the parts of the row-sharded ones,
    and broadcasts whether that worked (0, or 1 + the item that failed)
    with the pack's size and units of work and every part's size; then it
    broadcasts the items sent whole in one buffer and scatters each rank's
    parts in another; every rank decodes its items, and an all-reduce of
    what failed (0, or 1 + the item) makes every rank raise when one
    did."""
    rows = [k for k, (t, _, info, _) in enumerate(items) if _rows(t, info)]
    whole = [k for k in range(len(items)) if k not in set(rows)]
    packed = gpu and bool(whole)
    # failed, pack bytes, pack units, pack sum, the failure's status, part sizes
    status = torch.zeros(_PARTS + world * len(rows), dtype=torch.int64)
    stored, parts, failure, wire = {}, [[] for _ in range(world)], None, None
    if rank == reader and packed:
        try:
            pack, info = _pack(c, [items[k] for k in whole])
            st["read_bytes"] += sum(items[k][3] for k in whole)
            wire = pack[:info.staged].to(comm)
            status[1], status[2], status[3] = info.staged, info.units, _sum(wire)
        except Exception as e:  # told to every rank, then raised
            failure, status[0], status[4] = e, 1 + whole[_unreadable(c, [items[k] for k in whole])], _status(e)
    if rank == reader and failure is None:
        j = 0
        for k, (t, index, info, n) in enumerate(items):
            if packed and k not in rows:
                continue
            try:
                b = torch.empty(n, dtype=torch.uint8)
                if n:
                    c.read_stored_into_ptr(index, b.data_ptr(), n)
                st["read_bytes"] += n
                stored[k] = b
                if j < len(rows) and rows[j] == k:
                    for r in range(world):
                        lo, hi = _byte_range(t, info, r)
                        pb = torch.empty(c.part_bound(n, info.nbytes), dtype=torch.uint8)
                        m = c.part_into_ptr(index, b.data_ptr(), n, lo, hi, pb.data_ptr(), pb.numel())
                        parts[r].append(pb[:m])
                        status[_PARTS + r * len(rows) + j] = m
                    j += 1
            except Exception as e:  # told to every rank, then raised
                failure, status[0], status[4] = e, k + 1, _status(e)
                break
    status = status.to(comm)
    dist.broadcast(status, src=_global(group, reader), group=group)
    status = status.cpu()
    bad = int(status[0])
    if bad:
        words, filename = _tell(failure, reader, rank, group, comm)
        if failure is not None:
            raise failure
        raise _peer(int(status[4]), f"rank {reader} failed to read tensor {items[bad - 1][0]['name']}: {words}",
                    filename)
    # The collectives first, every rank in the same order; then decoding,
    # and one all-reduce that makes every rank raise when one failed.
    buf, recv, sizes = None, None, None
    offs = []
    if packed:
        staged = int(status[1])
        buf = wire if rank == reader else torch.empty(staged, dtype=torch.uint8, device=comm)
        dist.broadcast(buf, src=_global(group, reader), group=group)
        if rank != reader:
            st["received_bytes"] += staged
    elif whole:
        total = 0
        for k in whole:
            offs.append(total)
            total += items[k][3]
        buf = torch.empty(total, dtype=torch.uint8)
        if rank == reader:
            for k, o in zip(whole, offs):
                buf[o:o + items[k][3]] = stored[k]
        if total:
            wire = buf.to(comm)
            dist.broadcast(wire, src=_global(group, reader), group=group)
            buf = wire.cpu()
            if rank != reader:
                st["received_bytes"] += total
    if rows:
        sizes = status[_PARTS:].view(world, len(rows))
        width = int(sizes.sum(1).max())
        recv = torch.empty(width, dtype=torch.uint8)
        if width:
            got = torch.empty(width, dtype=torch.uint8, device=comm)
            send = None
            if rank == reader:
                send = []
                for r in range(world):
                    b = torch.zeros(width, dtype=torch.uint8)
                    if parts[r]:
                        cat = torch.cat(parts[r])
                        b[:cat.numel()] = cat
                    send.append(b.to(comm))
            dist.scatter(got, send, src=_global(group, reader), group=group)
            recv = got.cpu()
            if rank != reader:
                st["received_bytes"] += int(sizes[rank].sum())
    failed, failure = 0, None
    try:
        if packed:
            failed = whole[0] + 1
            k = _scatter_whole(c, [items[k] for k in whole], buf, int(status[2]), int(status[3]), rank, world,
                               comm, out)
            if k is not None and k >= 0:
                failed = whole[k] + 1
                raise error(3, f"tensor {items[whole[k]][0]['name']}: its bytes arrived damaged "
                               f"(they differ from this rank's copy of the cache)")
            if k is not None:
                raise error(7, f"the pack of {len(whole)} tensors from {items[whole[0]][0]['name']} "
                               f"failed on the device, and equals this rank's copy of the cache")
        for k, o in zip(whole, offs):  # none when packed
            failed = k + 1
            _keep_whole(c, items[k], buf.data_ptr() + o, rank, world, device, out)
        off = 0
        for j, k in enumerate(rows):
            failed = k + 1
            t, index, info, _ = items[k]
            m, (lo, hi) = int(sizes[rank, j]), _byte_range(t, info, rank)
            raw = torch.empty(hi - lo, dtype=torch.uint8)
            c.decode_part_ptr(index, recv.data_ptr() + off, m, lo, hi, raw.data_ptr(), hi - lo)
            off += m
            shape = (info.shape[0] // world,) + tuple(info.shape[1:])
            out[t["name"]] = raw.view(_dtype(t, info)).reshape(shape).to(device)
        failed = 0
    except Exception as e:  # agreed on with the other ranks, then raised
        failure = e
    flag = torch.tensor([_failed(failed, failure, rank, world)], dtype=torch.int64).to(comm)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    _raise_agreed(int(flag.cpu()[0]), failure, rank, world, group, comm,
                  lambda item, who: f"rank {who} failed to decode tensor {items[item - 1][0]['name']}")


def _dtype(t: dict, info) -> "torch.dtype":
    return torch_dtype(t["name"], info.dtype)


def _keep_whole(c: Cache, item: tuple, src: int, rank: int, world: int, device, out: dict) -> None:
    """Decode a tensor sent whole and keep this rank's part of it."""
    t, index, info, n = item
    dt = _dtype(t, info)
    raw = torch.empty(info.nbytes, dtype=torch.uint8)
    c.decode_host_ptr(index, src, n, raw.data_ptr(), info.nbytes)
    full = raw.view(dt).reshape(info.shape) if info.nbytes else torch.empty(info.shape, dtype=dt)
    p = t["placement"]
    if p.get("shard"):
        full = torch.chunk(full, world, dim=p.get("dim", 0))[rank].contiguous()
    out[t["name"]] = full.to(device)


def _pack(c: Cache, items: list):
    """The pack of items (tensors sent whole) in host memory, with
    placeholder destinations, and its PackInfo."""
    idx = [index for _, index, _, _ in items]
    buf = torch.empty(c.pack_size(idx), dtype=torch.uint8)
    info = c.pack_into_ptr(idx, [_PLACEHOLDER] * len(idx), [info.nbytes for _, _, info, _ in items],
                           buf.data_ptr(), buf.numel())
    return buf, info


def _unreadable(c: Cache, items: list) -> int:
    """The first of items whose stored bytes do not read (the one a
    failed pack stopped at); 0 when all read now."""
    for k, (_, index, _, n) in enumerate(items):
        try:
            b = torch.empty(n, dtype=torch.uint8)
            if n:
                c.read_stored_into_ptr(index, b.data_ptr(), n)
        except Exception:  # noqa: BLE001 - that one
            return k
    return 0


def _sum(buf: "torch.Tensor") -> int:
    """A checksum of a pack in CUDA memory (a multiple of 16 bytes): the
    sum of its 32-bit words, computed where it lies."""
    return int(buf.view(torch.int32).sum(dtype=torch.int64))


def _scatter_whole(c: Cache, items: list, buf: "torch.Tensor", units: int, want: int, rank: int, world: int,
                   comm, out: dict):
    """Decode the pack buf (CUDA memory, as broadcast) of items in place
    on the GPU into this rank's tensors, after checking it against the
    reader's sum (want); the tensors' addresses and sizes are written into
    the pack's table first, so that a damaged table cannot send a write
    elsewhere. Returns None, or, when the sum differs or the kernel found
    an invalid entry, the item whose bytes differ from the pack this rank
    builds from the cache (-1 when none does)."""
    n = len(items)
    table = buf[:ENTRY * n].view(torch.int64).view(n, ENTRY // 8)
    if _sum(buf) != want:
        return _damaged(c, items, buf, None)
    full = []
    for t, _, info, _ in items:
        full.append(torch.empty(info.shape, dtype=_dtype(t, info), device=comm))
    table[:, 0] = torch.tensor([x.data_ptr() for x in full], dtype=torch.int64).to(comm)
    table[:, 3] = torch.tensor([info.nbytes for _, _, info, _ in items], dtype=torch.int64).to(comm)
    stream = torch.cuda.current_stream(comm)
    info = PackInfo(buf.numel(), n, units)
    c.scatter(comm.index, buf.data_ptr(), info, stream.cuda_stream)
    try:
        c.scatter_check(comm.index, stream.cuda_stream)
    except Error:
        return _damaged(c, items, buf, table)
    for (t, _, _, _), x in zip(items, full):
        p = t["placement"]
        if p.get("shard"):
            x = torch.chunk(x, world, dim=p.get("dim", 0))[rank].contiguous()
        out[t["name"]] = x
    return None


def _damaged(c: Cache, items: list, buf: "torch.Tensor", table) -> int:
    """The item of a pack that arrived damaged: where it first differs
    from the pack built here (with the table fields this rank wrote, if it
    did); -1 when nothing differs."""
    fresh, _ = _pack(c, items)
    fresh = fresh[:buf.numel()]
    got = buf.cpu()
    n = len(items)
    if table is not None:
        ft = fresh[:ENTRY * n].view(torch.int64).view(n, ENTRY // 8)
        ft[:, 0], ft[:, 3] = table[:, 0].cpu(), table[:, 3].cpu()
    if got.numel() != fresh.numel():
        return 0  # the broadcast's size came from the reader's status: its first tensor
    diff = (got != fresh).nonzero()
    if diff.numel() == 0:
        return -1
    k = owner(fresh[:ENTRY * n].numpy().tobytes(), n, int(diff[0]))
    return k if k is not None else -1
