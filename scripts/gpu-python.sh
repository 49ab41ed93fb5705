#!/usr/bin/env bash
# The Python binding on the GPU machine (torch there): the Python tests
# with torch, and a self-contained cache loaded to cuda:0 with its source
# gone, compared with safetensors.torch.load_file of the source.
#   scripts/gpu-python.sh D   (D holds splitzip and libsplitzip.so)
set -uo pipefail
cd "$(dirname "$0")/.."
D=$1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/python.log") 2>&1
export SPLITZIP_BIN=$PWD/$D/splitzip SPLITZIP_LIB=$PWD/$D/libsplitzip.so
status=0
python3 -c 'import torch, numpy, safetensors; print("torch", torch.__version__, "numpy", numpy.__version__, "safetensors", safetensors.__version__)'
python3 -m unittest discover -s python/tests -v || status=1
rm -rf /tmp/py-src /tmp/py-keep /tmp/py-cache
"$SPLITZIP_BIN" gen /tmp/py-src --size 1GiB --shards 2 -q
"$SPLITZIP_BIN" compress /tmp/py-src -o /tmp/py-cache --self-contained --no-sync -q
mv /tmp/py-src /tmp/py-keep
PYTHONPATH=python python3 - <<'PY' || status=1
import glob, torch
from safetensors.torch import load_file as st_load
from splitzip.torch import load_file
want = {}
for f in sorted(glob.glob("/tmp/py-keep/*.safetensors")):
    want.update(st_load(f, device="cuda:0"))
got = load_file("/tmp/py-cache", device="cuda:0")
assert set(got) == set(want), (len(got), len(want))
bad = [k for k in want if not torch.equal(got[k].view(torch.uint8), want[k].view(torch.uint8))]
print("self-contained cache, source gone: %d tensors on cuda:0, %d differ from safetensors" % (len(got), len(bad)))
assert not bad, bad[:5]
PY
"$SPLITZIP_BIN" load /tmp/py-cache --check | grep -E "run 1|matches|settings" || status=1
echo "gpu-python status: $status"
exit $status
