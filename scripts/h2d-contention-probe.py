"""Probe: do host-to-device copies slow down while the host's cores copy
memory, as a load's readers do?

Copies 4 MiB pieces of a 64 MiB registered (pinned) buffer to the GPU on
one stream and times them with CUDA events (median of 9 runs of 16
copies): first with the host idle, then while T threads (T = 4, 8, 16)
each copy 64 MiB between two buffers of their own in a loop (libc memcpy
through ctypes, which lets go of the GIL), then while T threads read a
256 MiB file in the page cache with pread into registered buffers (what a
load's readers do). Prints GB/s for each, and the threads' own rate.

    python3 scripts/h2d-contention-probe.py [FILE]
"""
import ctypes, os, statistics, sys, tempfile, threading, time
import torch
from h2d_probe_lib import bind
cuda, libc = bind()
N, PIECE = 64 << 20, 4 << 20


def anon(n, pin):
    p = libc.mmap(None, n, 3, 0x22, -1, 0)
    libc.memset(p, 7, n)
    if pin and cuda.cuMemHostRegister_v2(p, n, 1):
        raise RuntimeError("register")
    return p


src = anon(N, True)
dev = torch.empty(N, dtype=torch.uint8, device="cuda")
s = torch.cuda.Stream()


def h2d(reps=9, count=16):
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(s)
        for i in range(count):
            off = (i * PIECE) % N
            if cuda.cuMemcpyHtoDAsync_v2(dev.data_ptr() + off, src + off, PIECE, ctypes.c_void_p(s.cuda_stream)):
                raise RuntimeError("copy")
        b.record(s)
        b.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    return PIECE * count / statistics.median(ts) / 1e9


def busy(kind, threads, path):
    stop, done = threading.Event(), [0] * threads
    bufs = [(anon(N, kind == "pread"), anon(N, False)) for _ in range(threads)]
    fd = os.open(path, os.O_RDONLY) if kind == "pread" else -1
    size = os.path.getsize(path) if kind == "pread" else 0

    def work(k):
        a, b = bufs[k]
        off = (k * N) % max(size, N)
        while not stop.is_set():
            if kind == "memcpy":
                libc.memcpy(b, a, N)
                done[k] += N
            else:
                for j in range(0, N, 1 << 20):  # 1 MiB preads, as a load's parts
                    libc.pread(fd, a + j, 1 << 20, (off + j) % (size - (1 << 20)))
                done[k] += N
    ths = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    t0 = time.perf_counter()
    for t in ths:
        t.start()
    time.sleep(0.2)
    rate = h2d()
    stop.set()
    for t in ths:
        t.join()
    host = sum(done) / (time.perf_counter() - t0) / 1e9
    if fd >= 0:
        os.close(fd)
    return rate, host


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else None
    tmp = None
    if path is None:
        tmp = tempfile.NamedTemporaryFile(delete=False)
        tmp.write(os.urandom(1 << 20) * 256)
        tmp.close()
        path = tmp.name
    with open(path, "rb") as f:
        while f.read(16 << 20):
            pass
    print(f"{torch.cuda.get_device_name(0)}, {os.cpu_count()} cores; {PIECE >> 20} MiB copies on one stream")
    print(f"idle host: {h2d():.1f} GB/s")
    for kind in ("memcpy", "pread"):
        for t in (4, 8, 16):
            r, host = busy(kind, t, path)
            print(f"{kind:6s} x{t:2d}: {r:.1f} GB/s to the GPU; the threads {host:.1f} GB/s")
    print(f"idle host again: {h2d():.1f} GB/s")
    if tmp:
        os.unlink(tmp.name)


if __name__ == "__main__":
    main()
