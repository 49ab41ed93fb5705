"""The ctypes bindings the H2D probes share (scripts/h2d-*-probe.py):
libcuda's and libc's functions they call, with their argument types,
after torch has made the device's primary context current."""
import ctypes

import torch


def bind():
    """Returns (cuda, libc): libcuda.so.1 and libc.so.6 with mmap, madvise,
    memset, memcpy, pread, cuMemHostRegister_v2, cuMemHostAlloc and
    cuMemcpyHtoDAsync_v2 typed."""
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    cuda = ctypes.CDLL("libcuda.so.1")
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    libc.memcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    libc.pread.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long]
    libc.pread.restype = ctypes.c_ssize_t
    cuda.cuMemHostRegister_v2.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
    cuda.cuMemHostAlloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_uint]
    cuda.cuMemcpyHtoDAsync_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    return cuda, libc
