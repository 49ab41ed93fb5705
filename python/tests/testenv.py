"""What the test modules of this directory share: the repository root,
the splitzip binary to run, and the package they test (the installed
wheel when SPLITZIP_TEST_INSTALLED is set, as make python-test sets it,
else the source tree). Import it before splitzip."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
INSTALLED = bool(os.environ.get("SPLITZIP_TEST_INSTALLED"))
if not INSTALLED and os.path.join(ROOT, "python") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "python"))
BIN = os.environ.get("SPLITZIP_BIN") or os.path.join(ROOT, ".dev", "splitzip")

# GPU_SKIP starts the reason of every skip for want of a GPU: the only
# reason a test here may skip (run.py fails on any other and counts these).
GPU_SKIP = "needs a CUDA GPU"


def gpu_missing(what: str = ""):
    """Why the tests that need a CUDA GPU cannot run here, or None."""
    import torch
    if torch.cuda.is_available():
        return None
    return f"{GPU_SKIP}{' ' + what if what else ''} (the GPU machine): none here"


def gpu_stack_missing():
    """Why the GPU tests of transformers models cannot run here, or None:
    no CUDA device (a skip), or, on a GPU machine, transformers or
    accelerate not installed (pip; a failure under run.py)."""
    why = gpu_missing("with transformers and accelerate")
    if why:
        return why
    try:
        import transformers  # noqa: F401
        import accelerate  # noqa: F401
    except ImportError as e:
        return f"{e.name} is not installed: pip install transformers accelerate"
    return None


def generated(tmp: str, size: str = "3MiB", shards: int = 2):
    """A generated checkpoint in tmp/ck compressed into tmp/cache with the
    splitzip binary: returns (source dir, cache dir)."""
    src, cache = os.path.join(tmp, "ck"), os.path.join(tmp, "cache")
    subprocess.run([BIN, "gen", src, "--size", size, "--shards", str(shards), "-q"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([BIN, "compress", src, "-o", cache, "--no-sync", "-q"], check=True, stdout=subprocess.DEVNULL)
    return src, cache
