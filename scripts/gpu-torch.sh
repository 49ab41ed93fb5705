#!/usr/bin/env bash
# PyTorch check on the GPU machine (issue 5): bit-for-bit comparison with
# safetensors.torch.load_file, threaded uploads, and timing, on the
# checkpoint scripts/gpu-load.sh generates (made here if missing). Needs
# `make gpu-build capi`; carry .dev and python/splitzip/libsplitzip.so.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/splitzip-gpu-torch}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/torch.log") 2>&1
CK=/tmp/sz-load-ck; CACHE=/tmp/sz-load-cache
if [ ! -f $CACHE/splitzip.json ]; then
  rm -rf $CK $CACHE
  .dev/splitzip gen $CK --size ${LOAD_SIZE:-8GiB} --shards 8 -q && .dev/splitzip compress $CK -o $CACHE --no-sync -q || exit 1
fi
python3 -c 'import torch, safetensors; print("torch", torch.__version__, "safetensors", safetensors.__version__)'
python3 scripts/gpu-torch.py $CK $CACHE
st=$?
echo "splitzip load on the same cache, for comparison:"
.dev/splitzip load $CACHE --repeat 3 | grep "run"
echo "gpu-torch status: $st"
exit $st
