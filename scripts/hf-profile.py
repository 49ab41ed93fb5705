#!/usr/bin/env python3
"""Where the time of a load through transformers goes, on a GPU machine:
for a Llama-shaped model of 1.3 GiB (random BF16 weights, files in page
cache), the median of --repeat of
- fill: splitzip.torch.load_file(cache, device="cuda:0") alone (the
  loader's part of splitzip.transformers.from_pretrained);
- transformers-state-dict: the concrete model class's from_pretrained
  with those tensors, already in GPU memory, as its state_dict;
- splitzip: splitzip.transformers.from_pretrained, both together;
- transformers-files: transformers' from_pretrained of the files;
and a cProfile of one state_dict load, one file load and one splitzip
load (the 40 entries with the most cumulative time) in
$OUT/profile-*.txt. With --arch NAME the model is instead that
architecture of scripts/hf-matrix.py (a tiny config, random weights).

    python3 scripts/hf-profile.py --bin .dev/splitzip --out $OUT [--arch granite-moe]
"""

import argparse
import cProfile
import importlib.util
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from splitzip.torch import load_file  # noqa: E402
from splitzip.transformers import _concrete, from_pretrained  # noqa: E402


def med(fn, repeat):
    fn()
    ts = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
        del out
    return round(statistics.median(ts), 4)


def profile(fn, path):
    pr = cProfile.Profile()
    pr.enable()
    fn()
    torch.cuda.synchronize()
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(40)
    with open(path, "w") as f:
        f.write(s.getvalue())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, ".dev", "splitzip"))
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--arch", default="", help="an architecture of scripts/hf-matrix.py instead of the 1.3 GiB Llama")
    args = ap.parse_args()
    cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=12,
                                   num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048)
    auto = AutoModelForCausalLM
    if args.arch:
        spec = importlib.util.spec_from_file_location("hf_matrix", os.path.join(ROOT, "scripts", "hf-matrix.py"))
        matrix = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(matrix)
        found = [a for a in matrix.arches() if a[0] == args.arch]
        if not found:
            sys.exit(f"--arch {args.arch}: not an architecture of scripts/hf-matrix.py "
                     f"({', '.join(a[0] for a in matrix.arches())})")
        _, _, cfg_name, kw, auto, _ = found[0]
        cfg = getattr(transformers, cfg_name)(**kw)
        auto = getattr(transformers, auto) if isinstance(auto, str) else auto
    with tempfile.TemporaryDirectory() as tmp:
        src, cache = os.path.join(tmp, "m"), os.path.join(tmp, "m.sz")
        torch.manual_seed(0)
        with torch.device("cuda:0"):
            m = (auto.from_config(cfg, dtype=torch.bfloat16) if hasattr(auto, "from_config")
                 else auto._from_config(cfg, dtype=torch.bfloat16))
        m.save_pretrained(src)
        del m
        subprocess.run([args.bin, "compress", src, "-o", cache, "--no-sync", "-q"], check=True)
        config = transformers.AutoConfig.from_pretrained(src)
        cls = _concrete(auto, config)
        sd = load_file(cache, device="cuda:0")
        res = {
            "fill": med(lambda: load_file(cache, device="cuda:0"), args.repeat),
            "transformers-state-dict": med(lambda: cls.from_pretrained(None, config=config, state_dict=sd,
                                                                       device_map="cuda:0"), args.repeat),
            "splitzip": med(lambda: from_pretrained(cache, src, model_class=auto, device_map="cuda:0"), args.repeat),
            "transformers-files": med(lambda: auto.from_pretrained(src, device_map="cuda:0"), args.repeat),
        }
        profile(lambda: cls.from_pretrained(None, config=config, state_dict=sd, device_map="cuda:0"),
                os.path.join(args.out, "profile-state-dict.txt"))
        profile(lambda: auto.from_pretrained(src, device_map="cuda:0"),
                os.path.join(args.out, "profile-files.txt"))
        profile(lambda: from_pretrained(cache, src, model_class=auto, device_map="cuda:0"),
                os.path.join(args.out, "profile-splitzip.txt"))
    print(json.dumps(res))
    with open(os.path.join(args.out, "profile.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
