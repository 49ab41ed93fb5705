"""splitzip.distributed with the gloo backend on the CPU, several processes
(run where torch is installed: CI installs Debian's python3-torch): every
rank's tensors equal the source's values or its part of them, bit for bit,
replicated and sharded along dimension 0 and 1; a corrupt payload makes
every rank raise an error naming the tensor; a rank receives only the
payload chunks covering its rows of a tensor sharded along dimension 0."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import testenv  # noqa: E402  (python/tests; before splitzip)
import stfile  # noqa: E402  (python/tests)

BIN = testenv.BIN

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

DT = {"BF16": "bfloat16", "F32": "float32", "F16": "float16", "I64": "int64", "I32": "int32"}


def _worker(rank, world, pg, cache, rules, src_dir, result, batch, corrupt_rank=-1, backend="gloo", members=None,
            fault=None):
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"file://{pg}", rank=rank, world_size=world)
    group = None
    if members is not None:  # a load in a group of these global ranks; the others only make the group
        group = dist.new_group(members)
        if rank not in members:
            with open(f"{result}.{rank}", "w") as f:
                f.write("not a member")
            dist.destroy_process_group()
            return
        world = len(members)
    if fault == "plan-memoryerror" and rank == 1:  # an error not splitzip's while planning, on rank 1
        from splitzip._lib import Cache

        def plan(self, ranks, rules=""):
            raise MemoryError("no memory for the plan")
        Cache.plan = plan
    if isinstance(rules, (list, tuple)):  # each rank its own (ranks that disagree)
        rules = rules[rank]
    if isinstance(cache, (list, tuple)):
        cache = cache[rank]
    try:
        import splitzip.distributed as sd
        from splitzip.distributed import load
        if rank == corrupt_rank and backend == "nccl":  # a pack damaged on the wire, on this rank only
            scatter_whole = sd._scatter_whole

            def damaged_pack(c, items, buf, *args):
                buf[buf.numel() - 16 * (buf.numel() // 32)] ^= 1  # inside the stored bytes
                return scatter_whole(c, items, buf, *args)
            sd._scatter_whole = damaged_pack
        elif rank == corrupt_rank:  # a part damaged on the wire, on this rank only
            import ctypes
            from splitzip._lib import Cache
            decode = Cache.decode_part_ptr

            def damaged(self, index, part, partlen, lo, hi, dst, capacity):
                if partlen:
                    b = ctypes.c_uint8.from_address(part + partlen - 1)
                    b.value ^= 1
                return decode(self, index, part, partlen, lo, hi, dst, capacity)
            Cache.decode_part_ptr = damaged
        stats = {}
        import warnings
        try:
            with warnings.catch_warnings(record=True) as ws:
                warnings.simplefilter("always")
                got = load(cache, rules=rules, batch_bytes=batch, stats=stats, group=group)
        except Exception as e:  # noqa: BLE001 - reported to the parent
            with open(f"{result}.{rank}", "w") as f:
                f.write(f"error: {type(e).__module__}.{type(e).__name__}: {e} [filename={getattr(e, 'filename', None)}]")
            return
        with open(f"{result}.{rank}.warnings", "w") as f:
            f.write("\n".join(str(w.message) for w in ws))
        want = {}
        for name in sorted(os.listdir(src_dir)):
            if name.endswith(".safetensors"):
                want.update(stfile.read(os.path.join(src_dir, name)))
        bad = []
        import fnmatch
        for name, (dtype, shape, b) in want.items():
            t = torch.frombuffer(bytearray(b), dtype=getattr(torch, DT[dtype])).reshape(shape) if b else None
            dim = None
            for r in [x for x in rules.split(",") if x]:
                pat, what = r.split("=")
                if fnmatch.fnmatchcase(name, pat):
                    dim = int(what.split(":")[1]) if what.startswith("shard:") else None
                    if dim is not None and dim >= len(shape) and any(c in pat for c in "*?["):
                        dim = None  # a wildcard's shard passes over a tensor without the dimension
                        continue
                    break
            if t is not None and dim is not None:
                t = torch.chunk(t, world, dim=dim)[dist.get_rank(group)].contiguous()
            g = got.get(name)
            if g is not None and backend == "nccl":
                if g.device.type != "cuda":
                    bad.append(name + " (not on the GPU)")
                g = g.cpu()
            if g is None or (t is not None and not torch.equal(g.view(torch.uint8) if g.dtype == torch.bfloat16 else g,
                                                               t.view(torch.uint8) if t.dtype == torch.bfloat16 else t)):
                bad.append(name)
        with open(f"{result}.{rank}", "w") as f:
            f.write("ok" if not bad else "differ: " + ", ".join(bad[:5]))
        with open(f"{result}.{rank}.received", "w") as f:
            f.write(str(stats["received_bytes"]))
    finally:
        dist.destroy_process_group()


class TestDistributed(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.src, cls.cache = testenv.generated(cls.tmp.name)
        big = os.path.join(cls.tmp.name, "big")
        os.mkdir(big)
        cls.big_src, cls.big = testenv.generated(big, size="32MiB")  # tensors of several chunks
        cls.big_entropy = os.path.join(big, "entropy")
        subprocess.run([BIN, "compress", cls.big_src, "-o", cls.big_entropy, "--codec", "entropy", "--no-sync", "-q"],
                       check=True, stdout=subprocess.DEVNULL)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    backend = "gloo"

    def ranks(self, world):
        """How many ranks run_ranks(world, ...) starts."""
        return world

    def run_ranks(self, world, rules, cache=None, batch=64 << 20, src=None, corrupt_rank=-1, members=None, fault=None):
        d = tempfile.mkdtemp(dir=self.tmp.name)
        result = os.path.join(d, "result")
        mp.spawn(_worker, args=(world, os.path.join(d, "pg"), cache or self.cache, rules, src or self.src, result, batch,
                                corrupt_rank, self.backend, members, fault),
                 nprocs=world, join=True)
        out = []
        self.received = 0
        self.warned = []
        for r in range(world):
            if os.path.exists(f"{result}.{r}.warnings"):
                with open(f"{result}.{r}.warnings") as f:
                    self.warned += [line for line in f.read().split("\n") if line]
            with open(f"{result}.{r}") as f:
                out.append(f.read())
            if os.path.exists(f"{result}.{r}.received"):
                with open(f"{result}.{r}.received") as f:
                    self.received += int(f.read())
        return out

    def test_replicated(self):
        for world in (1, 3):
            self.assertEqual(self.run_ranks(world, ""), ["ok"] * world)
        # Batches of one tensor each (every one larger than a byte).
        self.assertEqual(self.run_ranks(2, "", batch=1), ["ok"] * 2)

    def test_sharded(self):
        rules = "*embed*=replicate,*lm_head*=replicate,*norm*=replicate,*.weight=shard:0"
        self.assertEqual(self.run_ranks(2, rules), ["ok"] * 2)
        self.assertEqual(self.run_ranks(4, rules, batch=1), ["ok"] * 4)
        # Row shards travel as the chunks covering each rank's rows: on
        # tensors of several chunks, about half of what the replicated
        # load sends, two ranks.
        self.assertEqual(self.run_ranks(2, "", cache=self.big, src=self.big_src), ["ok"] * 2)
        replicated = self.received
        self.assertEqual(self.run_ranks(2, rules, cache=self.big, src=self.big_src), ["ok"] * 2)
        self.assertLess(self.received, 0.7 * replicated, (self.received, replicated))
        print(f"fixed-rate: received {self.received} bytes sharded, {replicated} replicated", file=sys.stderr)
        self.assertEqual(self.run_ranks(2, "", cache=self.big_entropy, src=self.big_src), ["ok"] * 2)
        replicated = self.received
        self.assertEqual(self.run_ranks(4, rules, cache=self.big_entropy, src=self.big_src), ["ok"] * 4)
        self.assertEqual(self.run_ranks(2, rules, cache=self.big_entropy, src=self.big_src), ["ok"] * 2)
        self.assertLess(self.received, 0.7 * replicated, (self.received, replicated))
        print(f"entropy: received {self.received} bytes sharded, {replicated} replicated", file=sys.stderr)
        rules = "*_proj.weight=shard:1"
        self.assertEqual(self.run_ranks(2, rules), ["ok"] * 2)

    def test_corrupt_payload(self):
        bad = os.path.join(self.tmp.name, "bad")
        shutil.copytree(self.cache, bad)
        objs = []
        for root, _, files in os.walk(os.path.join(bad, "objects")):
            objs += [os.path.join(root, f) for f in files]
        victim = max(objs, key=os.path.getsize)  # a payload of its own file
        with open(victim, "r+b") as f:
            f.seek(os.path.getsize(victim) // 2)
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 0x40]))
        got = self.run_ranks(2, "", cache=bad)
        for r in got:  # the reading rank's error, and the same class, words and file on the other
            self.assertTrue(r.startswith("error: splitzip.IntegrityError: ") and "tensor" in r
                            and "checksum" in r and f"[filename={victim}]" in r, got)

    def test_damaged_part(self):
        """A part damaged on the wire on one rank: every rank raises an
        error naming a tensor, none waits."""
        rules = "*embed*=replicate,*lm_head*=replicate,*norm*=replicate,*.weight=shard:0"
        got = self.run_ranks(2, rules, cache=self.big, src=self.big_src, corrupt_rank=1)
        self.assertTrue(got[1].startswith("error: splitzip.IntegrityError: ") and "tensor" in got[1]
                        and "checksum" in got[1], got)
        self.assertTrue(got[0].startswith("error: splitzip.IntegrityError: ")
                        and "rank 1 failed to decode tensor" in got[0] and "checksum" in got[0], got)

    def test_bad_rules(self):
        """A rule naming a tensor outright that lacks its dimension fails
        every rank; a wildcard one passes over such tensors (a scalar
        under "*=shard:0"), which are then replicated."""
        got = self.run_ranks(2, "model.norm.weight=shard:7")
        for r in got:
            self.assertTrue(r.startswith("error: splitzip.InvalidArgumentError: splitzip: ") and "cannot plan" in r
                            and r.count("splitzip:") == 1, got)
        got = self.run_ranks(2, "*=shard:1")
        self.assertEqual(got, ["ok"] * self.ranks(2), got)
        self.assertEqual(self.warned, [], self.warned)
        # A wildcard rule whose dimension no tensor it matches has (a
        # mistyped dimension) fails every rank rather than replicating.
        got = self.run_ranks(2, "*.weight=shard:7")
        for r in got:
            self.assertTrue(r.startswith("error: splitzip.InvalidArgumentError: ") and "none of the" in r
                            and "dimension 7" in r, got)
        # A rule that matches no tensor (mistyped) is said once, by rank 0.
        got = self.run_ranks(2, "nosuch*=shard:0")
        self.assertEqual(got, ["ok"] * self.ranks(2), got)
        self.assertEqual(len(self.warned), 1, self.warned)
        self.assertIn("rule 'nosuch*' matches no tensor", self.warned[0])


    def test_ranks_disagree(self):
        """Ranks that would plan differently (other rules, a cache of
        other contents) or that cannot open the cache raise on every rank
        before any collective could mismatch; none aborts or waits."""
        got = self.run_ranks(2, ("*_proj.weight=shard:0", ""), cache=self.big, src=self.big_src)
        for r in got:
            self.assertTrue(r.startswith("error: splitzip.InvalidArgumentError: ") and "plans of" in r
                            and "differ" in r, got)
        got = self.run_ranks(2, "", cache=(self.big, self.big_entropy), src=self.big_src)
        for r in got:
            self.assertTrue(r.startswith("error: splitzip.InvalidArgumentError: ") and "differ" in r, got)
        # Two checkpoints of the same shapes, stored raw (F32 under the
        # fixed codec): plans alike but for the tensors' content keys.
        f32 = []
        for seed in ("1", "2"):
            d = os.path.join(self.tmp.name, "f32-" + seed)
            subprocess.run([BIN, "gen", d + "/ck", "--size", "1MiB", "--dtype", "F32", "--seed", seed, "-q"],
                           check=True, stdout=subprocess.DEVNULL)
            subprocess.run([BIN, "compress", d + "/ck", "-o", d + "/cache", "--no-sync", "-q"], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            f32.append(d + "/cache")
        got = self.run_ranks(2, "", cache=tuple(f32), src=os.path.dirname(f32[0]) + "/ck")
        for r in got:
            self.assertTrue(r.startswith("error: splitzip.InvalidArgumentError: ") and "differ" in r, got)
        gone = os.path.join(self.tmp.name, "no-such-cache")
        got = self.run_ranks(2, "", cache=(self.cache, gone))
        self.assertTrue(got[1].startswith("error: splitzip.MissingFileError: ") and f"[filename={gone}]" in got[1], got)
        self.assertTrue(got[0].startswith("error: splitzip.MissingFileError: ") and "rank 1 could not open or plan" in got[0]
                        and f"[filename={gone}]" in got[0], got)
        # An error not splitzip's on one rank: a RuntimeError with its words on the others, no wait.
        got = self.run_ranks(2, "", fault="plan-memoryerror")
        self.assertTrue(got[1].startswith("error: builtins.MemoryError: no memory for the plan"), got)
        self.assertTrue(got[0].startswith("error: builtins.RuntimeError: ") and "MemoryError: no memory" in got[0], got)

    def test_subgroup(self):
        """A load in a group that leaves out global rank 0: collectives
        name their source by its global rank."""
        self.assertEqual(self.run_ranks(3, "*_proj.weight=shard:0", members=[1, 2]), ["not a member", "ok", "ok"])


def _gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _nccl_missing():
    """Why the NCCL loads cannot run here, or None."""
    why = testenv.gpu_missing("and NCCL")
    if why is None and not dist.is_nccl_available():
        why = "this torch has no NCCL"
    return why


@unittest.skipIf(_nccl_missing() is not None, _nccl_missing() or "")
class TestDistributedNCCL(TestDistributed):
    """The same loads over NCCL, one rank a GPU (as many ranks as there
    are GPUs, up to the world each test asks for): tensors sent whole
    travel as a pack and are decoded on the GPU by one scatter a batch."""
    backend = "nccl"

    def test_ranks_disagree(self):
        if _gpus() < 2:
            self.skipTest("ranks that disagree need two GPUs")
        super().test_ranks_disagree()

    def test_subgroup(self):
        if _gpus() < 3:
            self.skipTest("a group leaving out rank 0 needs three GPUs")
        super().test_subgroup()

    def ranks(self, world):
        return min(world, _gpus())

    def run_ranks(self, world, rules, **kw):
        world = self.ranks(world)
        if kw.get("corrupt_rank", -1) >= world:
            kw["corrupt_rank"] = world - 1
        return super().run_ranks(world, rules, **kw)

    def test_replicated(self):
        self.assertEqual(self.run_ranks(3, ""), ["ok"] * self.ranks(3))
        self.assertEqual(self.run_ranks(2, "", batch=1), ["ok"] * self.ranks(2))  # a batch a tensor
        self.assertEqual(self.run_ranks(2, "", cache=self.big_entropy, src=self.big_src), ["ok"] * self.ranks(2))

    def test_sharded(self):
        rules = "*embed*=replicate,*lm_head*=replicate,*norm*=replicate,*.weight=shard:0"
        for cache, src in ((self.cache, self.src), (self.big, self.big_src), (self.big_entropy, self.big_src)):
            self.assertEqual(self.run_ranks(2, rules, cache=cache, src=src), ["ok"] * self.ranks(2))
        self.assertEqual(self.run_ranks(2, "*_proj.weight=shard:1"), ["ok"] * self.ranks(2))

    def test_damaged_part(self):
        """A pack damaged on the wire (after the broadcast, before the
        scatter): the rank raises an error naming the tensor."""
        got = self.run_ranks(2, "", cache=self.big, src=self.big_src, corrupt_rank=1)
        self.assertTrue(got[-1].startswith("error: splitzip.IntegrityError: ") and "arrived damaged" in got[-1], got)


if __name__ == "__main__":
    unittest.main()
