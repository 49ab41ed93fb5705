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


def gpu_stack_missing():
    """Why the GPU tests of transformers models cannot run here (torch,
    transformers, accelerate or a CUDA device missing), or None."""
    try:
        import torch
        import transformers  # noqa: F401
        import accelerate  # noqa: F401
    except ImportError as e:
        return f"{e.name} is not installed (the GPU machine has it)"
    return None if torch.cuda.is_available() else "no CUDA device"


def generated(tmp: str, size: str = "3MiB", shards: int = 2):
    """A generated checkpoint in tmp/ck compressed into tmp/cache with the
    splitzip binary: returns (source dir, cache dir)."""
    src, cache = os.path.join(tmp, "ck"), os.path.join(tmp, "cache")
    subprocess.run([BIN, "gen", src, "--size", size, "--shards", str(shards), "-q"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([BIN, "compress", src, "-o", cache, "--no-sync", "-q"], check=True, stdout=subprocess.DEVNULL)
    return src, cache
