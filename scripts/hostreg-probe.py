"""Probe: can page-cache pages be DMAed to the GPU without a host copy?

Issue 11's loads from page cache copy every byte twice in host memory
(read() from the page cache into pinned staging, then the DMA reads the
staging). This probe measures, on one host, the alternatives side by side:

  memcpy   host memory copy bandwidth (16 threads, torch), the ceiling of
           anything that copies in host memory
  pread    16 threads pread() 8 MiB pieces into pinned buffers, no DMA
  pread+h2d  the same, each piece then copied to the GPU on its thread's
           stream (what splitzip's transports do today)
  reg      mmap the file, cuMemHostRegister(READ_ONLY) it in ranges on T
           threads, cuMemcpyHtoDAsync from the mapping, unregister
  files    the same per small file (open, mmap, register, copy, unregister,
           munmap): the fixed cost a per-payload file would pay

Usage: python3 scripts/hostreg-probe.py [GiB] (default 16). Prints one line
per measurement; nothing is kept.
"""
import ctypes
import os
import sys
import threading
import time

import torch

GIB = 1 << 30
SIZE = int(float(sys.argv[1]) * GIB) if len(sys.argv) > 1 else 16 * GIB
PATH = "/tmp/hostreg-probe.bin"
PIECE = 8 << 20

cuda = ctypes.CDLL("libcuda.so.1")
libc = ctypes.CDLL("libc.so.6", use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
cuda.cuMemHostRegister_v2.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
cuda.cuMemHostUnregister.argtypes = [ctypes.c_void_p]
cuda.cuMemcpyHtoDAsync_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
cuda.cuCtxGetCurrent.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
cuda.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
PROT_READ, MAP_SHARED, MAP_POPULATE = 1, 1, 0x8000
REG_READ_ONLY, REG_PORTABLE = 0x08, 0x01


def check(r, what):
    if r != 0:
        raise RuntimeError(f"{what}: CUresult {r}")


def make_file(path, size):
    if os.path.exists(path) and os.path.getsize(path) == size:
        return
    block = torch.randint(0, 256, (64 << 20,), dtype=torch.uint8).numpy().tobytes()
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, len(block))
            f.write(block[:n])
            left -= n
        f.flush()
        os.fsync(f.fileno())


def warm(path):
    # read the file once so it sits in the page cache
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(64 << 20)
        while f.readinto(buf):
            pass


def rate(nbytes, secs):
    return f"{nbytes / secs / 1e9:7.1f} GB/s ({secs * 1e3:.0f} ms)"


def memcpy_probe():
    torch.set_num_threads(16)
    a = torch.empty(4 * GIB, dtype=torch.uint8)
    a.fill_(7)
    b = torch.empty_like(a)
    best = 1e9
    for _ in range(5):
        t = time.perf_counter()
        b.copy_(a)
        best = min(best, time.perf_counter() - t)
    print(f"memcpy 16 threads, 4 GiB: {rate(4 * GIB, best)} of bytes copied (read+write = 2x that)")


def run_threads(work, threads, errs):
    """Runs work(w) on threads threads, w = 0..threads-1, and returns the
    seconds they took; raises the first error a thread left in errs."""
    ts = [threading.Thread(target=work, args=(w,)) for w in range(threads)]
    t = time.perf_counter()
    for x in ts:
        x.start()
    for x in ts:
        x.join()
    el = time.perf_counter() - t
    if errs:
        raise errs[0]
    return el


def pread_probe(path, threads, h2d, dst):
    size = os.path.getsize(path)
    n = size // PIECE
    next_piece = [0]
    lock = threading.Lock()
    errs = []

    def work(_):
        try:
            fd = os.open(path, os.O_RDONLY)
            bufs = [torch.empty(PIECE, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
            views = [memoryview(b.numpy()) for b in bufs]
            stream = torch.cuda.Stream() if h2d else None
            evs = [None, None]
            k = 0
            while True:
                with lock:
                    i = next_piece[0]
                    next_piece[0] += 1
                if i >= n:
                    break
                s = k % 2
                if evs[s] is not None:
                    evs[s].synchronize()
                got = os.preadv(fd, [views[s]], i * PIECE)
                assert got == PIECE
                if h2d:
                    with torch.cuda.stream(stream):
                        dst[i * PIECE:(i + 1) * PIECE].copy_(bufs[s], non_blocking=True)
                        evs[s] = torch.cuda.Event()
                        evs[s].record(stream)
                k += 1
            if h2d:
                stream.synchronize()
            os.close(fd)
        except Exception as e:  # noqa: BLE001
            errs.append(e)

    el = run_threads(work, threads, errs)
    return n * PIECE, el


def reg_probe(path, threads, rng, populate, dst):
    """mmap the whole file; T threads each register ranges of rng bytes and
    copy them on their own stream; unregister at the end."""
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    ctx = ctypes.c_void_p()
    check(cuda.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
    t0 = time.perf_counter()
    flags = MAP_SHARED | (MAP_POPULATE if populate else 0)
    base = libc.mmap(None, size, PROT_READ, flags, fd, 0)
    if base in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap")
    t_map = time.perf_counter() - t0
    n = (size + rng - 1) // rng
    nxt = [0]
    lock = threading.Lock()
    reg_time = [0.0] * threads
    errs = []
    regs = []

    def work(w):
        try:
            check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
            stream = torch.cuda.Stream()
            while True:
                with lock:
                    i = nxt[0]
                    nxt[0] += 1
                if i >= n:
                    break
                off = i * rng
                ln = min(rng, size - off)
                a = time.perf_counter()
                check(cuda.cuMemHostRegister_v2(base + off, ln, REG_READ_ONLY | REG_PORTABLE), "register")
                reg_time[w] += time.perf_counter() - a
                with lock:
                    regs.append(base + off)
                check(cuda.cuMemcpyHtoDAsync_v2(dst.data_ptr() + off, base + off, ln, stream.cuda_stream), "copy")
            stream.synchronize()
        except Exception as e:  # noqa: BLE001
            errs.append(e)

    t_copy = run_threads(work, threads, errs)
    t2 = time.perf_counter()
    for p in regs:
        check(cuda.cuMemHostUnregister(p), "unregister")
    libc.munmap(base, size)
    os.close(fd)
    t_unreg = time.perf_counter() - t2
    total = time.perf_counter() - t0
    print(f"reg T={threads:2d} range={rng >> 20:4d} MiB populate={int(populate)}: {rate(size, total)} total;"
          f" mmap {t_map * 1e3:.0f} ms, register+copy {t_copy * 1e3:.0f} ms (register {sum(reg_time) * 1e3:.0f} ms summed),"
          f" unregister {t_unreg * 1e3:.0f} ms")


def files_probe(dirpath, count, fsize, dst):
    os.makedirs(dirpath, exist_ok=True)
    block = os.urandom(fsize)
    for i in range(count):
        p = f"{dirpath}/{i}"
        if not os.path.exists(p):
            with open(p, "wb") as f:
                f.write(block)
    for i in range(count):
        with open(f"{dirpath}/{i}", "rb") as f:
            f.read()
    stream = torch.cuda.Stream()
    t = time.perf_counter()
    held = []
    for i in range(count):
        fd = os.open(f"{dirpath}/{i}", os.O_RDONLY)
        base = libc.mmap(None, fsize, PROT_READ, MAP_SHARED, fd, 0)
        os.close(fd)
        check(cuda.cuMemHostRegister_v2(base, fsize, REG_READ_ONLY | REG_PORTABLE), "register")
        check(cuda.cuMemcpyHtoDAsync_v2(dst.data_ptr() + (i * fsize) % (8 * GIB), base, fsize, stream.cuda_stream), "copy")
        held.append(base)
    stream.synchronize()
    for base in held:
        check(cuda.cuMemHostUnregister(base), "unregister")
        libc.munmap(base, fsize)
    el = time.perf_counter() - t
    print(f"files {count} x {fsize >> 10} KiB, one thread: {el / count * 1e6:.1f} us a file, {rate(count * fsize, el)}")


def main():
    torch.zeros(1, device="cuda")
    make_file(PATH, SIZE)
    warm(PATH)
    dst = torch.empty(SIZE, dtype=torch.uint8, device="cuda")
    memcpy_probe()
    for rnd in range(2):
        nb, el = pread_probe(PATH, 16, False, dst)
        print(f"pread T=16 8 MiB pieces, no DMA: {rate(nb, el)}")
        nb, el = pread_probe(PATH, 16, True, dst)
        print(f"pread+h2d T=16 8 MiB pieces: {rate(nb, el)}")
        for threads, rng, pop in ((1, 64 << 20, False), (4, 64 << 20, False), (8, 64 << 20, False),
                                  (16, 16 << 20, False), (8, 256 << 20, False), (4, 64 << 20, True)):
            reg_probe(PATH, threads, rng, pop, dst)
    files_probe("/tmp/hostreg-files", 2000, 2 << 20, dst)
    files_probe("/tmp/hostreg-files-small", 2000, 64 << 10, dst)


if __name__ == "__main__":
    main()
