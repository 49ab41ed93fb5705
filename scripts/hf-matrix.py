#!/usr/bin/env python3
"""The architecture matrix: splitzip.transformers.from_pretrained and
splitzip.offload against transformers' own from_pretrained, on a GPU
machine with torch, transformers and accelerate.

For each architecture (a tiny config of a config class transformers
ships, random weights in BF16, save_pretrained), a fixed and an entropy
cache are made with the splitzip binary; then
- transformers' from_pretrained(folder, device_map="cuda:0") is the
  reference;
- from_pretrained(cache, folder, device_map="cuda:0") must give the same
  state dict (names, dtypes, devices, bytes) and the same outputs, bit
  for bit, for both caches; load times beside the reference's (median
  of --repeat, the three loads timed in turns);
- with --auto, device_map="auto" with a GPU budget of half the model
  (CPU placement), against transformers with the same map;
- decoder models (AutoModelForCausalLM) are offloaded (tiers cache,
  pinned, gpu; window 2) and their logits must equal the reference's.
A model transformers cannot build or load is skipped with its reason;
one splitzip cannot load, or loads differently, is a failure (exit 1).

    python3 scripts/hf-matrix.py --bin .dev/splitzip --out $OUT [--only llama,mixtral]

Writes matrix.json and matrix.md (the table in docs/TRANSFORMERS.md).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import (AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM,  # noqa: E402
                          AutoModelForSeq2SeqLM, AutoModelForSpeechSeq2Seq)

from splitzip.offload import offload  # noqa: E402
from splitzip.transformers import from_pretrained  # noqa: E402

V, H, L, NH, KV, I = 512, 64, 3, 4, 2, 128
DEC = dict(vocab_size=V, hidden_size=H, num_hidden_layers=L, num_attention_heads=NH, num_key_value_heads=KV,
           intermediate_size=I, max_position_embeddings=256)


def text(b=2, t=16):
    return lambda cfg, dev: {"input_ids": torch.randint(0, 500, (b, t), device=dev)}


def seq2seq(cfg, dev):
    return {"input_ids": torch.randint(0, 500, (2, 16), device=dev),
            "decoder_input_ids": torch.randint(0, 500, (2, 8), device=dev)}


def pixels(cfg, dev):
    return {"pixel_values": torch.randn(2, 3, 32, 32, device=dev, dtype=torch.bfloat16)}


def mel(cfg, dev):
    return {"input_features": torch.randn(1, cfg.num_mel_bins, 2 * cfg.max_source_positions, device=dev,
                                          dtype=torch.bfloat16),
            "decoder_input_ids": torch.randint(0, 500, (1, 8), device=dev)}


def audio(cfg, dev):
    return {"input_values": torch.randn(1, 4000, device=dev, dtype=torch.bfloat16)}


def arches():
    """(name, family, config class name, kwargs, auto class, inputs)."""
    moe = dict(num_local_experts=4, num_experts_per_tok=2)
    return [
        ("llama", "dense", "LlamaConfig", dict(DEC), AutoModelForCausalLM, text()),
        ("llama-tied", "dense", "LlamaConfig", dict(DEC, tie_word_embeddings=True), AutoModelForCausalLM, text()),
        ("mistral", "dense", "MistralConfig", dict(DEC), AutoModelForCausalLM, text()),
        ("qwen2", "dense", "Qwen2Config", dict(DEC, tie_word_embeddings=True), AutoModelForCausalLM, text()),
        ("qwen3", "dense", "Qwen3Config", dict(DEC, head_dim=16), AutoModelForCausalLM, text()),
        ("gemma2", "dense", "Gemma2Config", dict(DEC, head_dim=16), AutoModelForCausalLM, text()),
        ("gemma3-text", "dense", "Gemma3TextConfig", dict(DEC, head_dim=16), AutoModelForCausalLM, text()),
        ("granite", "dense", "GraniteConfig", dict(DEC), AutoModelForCausalLM, text()),
        ("olmo2", "dense", "Olmo2Config", dict(DEC), AutoModelForCausalLM, text()),
        ("cohere", "dense", "CohereConfig", dict(DEC), AutoModelForCausalLM, text()),
        ("starcoder2", "dense", "Starcoder2Config", dict(DEC), AutoModelForCausalLM, text()),
        ("phi3", "dense", "Phi3Config", dict(DEC, pad_token_id=0), AutoModelForCausalLM, text()),
        ("gpt-neox", "dense", "GPTNeoXConfig", dict(vocab_size=V, hidden_size=H, num_hidden_layers=L,
                                                  num_attention_heads=NH, intermediate_size=I), AutoModelForCausalLM, text()),
        ("gpt2", "dense", "GPT2Config", dict(vocab_size=V, n_embd=H, n_layer=L, n_head=NH, n_positions=256),
         AutoModelForCausalLM, text()),
        ("opt", "dense", "OPTConfig", dict(vocab_size=V, hidden_size=H, num_hidden_layers=L, ffn_dim=I,
                                           num_attention_heads=NH, word_embed_proj_dim=H, max_position_embeddings=256),
         AutoModelForCausalLM, text()),
        ("mixtral", "moe", "MixtralConfig", dict(DEC, **moe), AutoModelForCausalLM, text()),
        ("qwen2-moe", "moe", "Qwen2MoeConfig", dict(DEC, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                                                    shared_expert_intermediate_size=128), AutoModelForCausalLM, text()),
        ("qwen3-moe", "moe", "Qwen3MoeConfig", dict(DEC, head_dim=16, num_experts=4, num_experts_per_tok=2,
                                                    moe_intermediate_size=64), AutoModelForCausalLM, text()),
        ("olmoe", "moe", "OlmoeConfig", dict(DEC, num_experts=4, num_experts_per_tok=2), AutoModelForCausalLM, text()),
        ("granite-moe", "moe", "GraniteMoeConfig", dict(DEC, **moe), AutoModelForCausalLM, text()),
        ("phimoe", "moe", "PhimoeConfig", dict(DEC, **moe), AutoModelForCausalLM, text()),
        ("deepseek-v3", "moe", "DeepseekV3Config", dict(DEC, num_hidden_layers=4, n_routed_experts=4, num_experts_per_tok=2,
                                                        moe_intermediate_size=64, first_k_dense_replace=1, n_group=1,
                                                        topk_group=1, kv_lora_rank=32, q_lora_rank=32, qk_rope_head_dim=8,
                                                        qk_nope_head_dim=8, v_head_dim=16, n_shared_experts=1),
         AutoModelForCausalLM, text()),
        ("gpt-oss", "moe", "GptOssConfig", dict(DEC, head_dim=16, **moe), AutoModelForCausalLM, text()),
        ("bert", "encoder", "BertConfig", dict(vocab_size=V, hidden_size=H, num_hidden_layers=L, num_attention_heads=NH,
                                               intermediate_size=I), AutoModelForMaskedLM, text()),
        ("roberta", "encoder", "RobertaConfig", dict(vocab_size=V, hidden_size=H, num_hidden_layers=L,
                                                     num_attention_heads=NH, intermediate_size=I), AutoModelForMaskedLM,
         text()),
        ("distilbert", "encoder", "DistilBertConfig", dict(vocab_size=V, dim=H, n_layers=L, n_heads=NH, hidden_dim=I),
         AutoModelForMaskedLM, text()),
        ("t5", "enc-dec", "T5Config", dict(vocab_size=V, d_model=H, d_ff=I, num_layers=L, num_heads=NH, d_kv=16),
         AutoModelForSeq2SeqLM, seq2seq),
        ("bart", "enc-dec", "BartConfig", dict(vocab_size=V, d_model=H, encoder_layers=L, decoder_layers=L,
                                               encoder_attention_heads=NH, decoder_attention_heads=NH, encoder_ffn_dim=I,
                                               decoder_ffn_dim=I, max_position_embeddings=256), AutoModelForSeq2SeqLM,
         seq2seq),
        ("vit", "vision", "ViTConfig", dict(hidden_size=H, num_hidden_layers=L, num_attention_heads=NH,
                                            intermediate_size=I, image_size=32, patch_size=8), AutoModel, pixels),
        ("vit-classifier", "vision", "ViTConfig", dict(hidden_size=H, num_hidden_layers=L, num_attention_heads=NH,
                                                       intermediate_size=I, image_size=32, patch_size=8, num_labels=10),
         "ViTForImageClassification", pixels),
        ("clip-text", "vision", "CLIPTextConfig", dict(vocab_size=V, hidden_size=H, num_hidden_layers=L,
                                                       num_attention_heads=NH, intermediate_size=I), "CLIPTextModel",
         text()),
        ("whisper", "speech", "WhisperConfig", dict(vocab_size=V, d_model=H, encoder_layers=L, decoder_layers=L,
                                                    encoder_attention_heads=NH, decoder_attention_heads=NH,
                                                    encoder_ffn_dim=I, decoder_ffn_dim=I, num_mel_bins=80,
                                                    max_source_positions=16, max_target_positions=64, pad_token_id=1,
                                                    bos_token_id=0, eos_token_id=2, decoder_start_token_id=0,
                                                    suppress_tokens=[], begin_suppress_tokens=[]),
         AutoModelForSpeechSeq2Seq, mel),
        ("wav2vec2", "speech", "Wav2Vec2Config", dict(hidden_size=H, num_hidden_layers=L, num_attention_heads=NH,
                                                      intermediate_size=I, conv_dim=(32, 32), conv_stride=(5, 4),
                                                      conv_kernel=(10, 4), num_conv_pos_embeddings=16,
                                                      num_conv_pos_embedding_groups=4, do_stable_layer_norm=True),
         AutoModel, audio),
    ]


def tensors(out):
    """The tensors of a model output, in order."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [t for v in out.values() for t in tensors(v)]
    if isinstance(out, (tuple, list)):
        return [t for v in out for t in tensors(v)]
    return []


def same_outputs(a, b):
    ta, tb = tensors(a), tensors(b)
    if len(ta) != len(tb):
        return f"{len(ta)} output tensors against {len(tb)}"
    for k, (x, y) in enumerate(zip(ta, tb)):
        if x.shape != y.shape or x.dtype != y.dtype or not torch.equal(x, y):
            d = (x.float() - y.float()).abs().max().item() if x.shape == y.shape else "shape"
            return f"output {k} differs (max {d})"
    return None


def same_state(ref, got):
    """None when both state dicts hold the same names, dtypes, shapes,
    devices and bytes (tensors accelerate offloaded to the CPU are on the
    meta device in both: their bytes are checked by the outputs)."""
    a, b = ref.state_dict(), got.state_dict()
    if set(a) != set(b):
        return f"names differ: {sorted(set(a) ^ set(b))[:4]}"
    for k in a:
        x, y = a[k], b[k]
        if x.dtype != y.dtype or x.shape != y.shape or x.device != y.device:
            return f"{k}: {x.dtype}{tuple(x.shape)}@{x.device} against {y.dtype}{tuple(y.shape)}@{y.device}"
        if x.device.type != "meta" and not torch.equal(x, y):
            return f"{k}: bytes differ"
    return None


def timed(fn):
    """Seconds fn takes, the device synchronized before and after; what
    it returns is freed after the clock stops."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    t = time.perf_counter() - t0
    del out
    return t


def run_one(arch, args, tmp):
    name, family, cfg_name, kw, auto, inputs = arch
    row = {"arch": name, "family": family, "config": cfg_name}
    try:
        cfg = getattr(transformers, cfg_name)(**kw)
        cls = getattr(transformers, auto) if isinstance(auto, str) else auto
        torch.manual_seed(0)
        with torch.device("cuda:0"):
            m = (cls.from_config(cfg, dtype=torch.bfloat16) if hasattr(cls, "from_config")
                 else cls._from_config(cfg, dtype=torch.bfloat16))
        src = os.path.join(tmp, name)
        m.save_pretrained(src)
        del m
        ref, info = cls.from_pretrained(src, device_map="cuda:0", output_loading_info=True)
        if info.get("missing_keys"):
            row.update(status="skip", why=f"transformers reports missing keys: {sorted(info['missing_keys'])[:3]}")
            return row
    except Exception as e:  # noqa: BLE001 - transformers cannot build or load it: a skip
        row.update(status="skip", why=f"transformers: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
        return row
    row["params"] = sum(p.numel() for p in ref.parameters())
    problems = []
    ref.eval()
    torch.manual_seed(1)
    x = inputs(ref.config, "cuda:0")
    with torch.no_grad():
        want = ref(**x)
    caches = {}
    for codec in ("fixed", "entropy"):
        caches[codec] = os.path.join(tmp, f"{name}.{codec}")
        subprocess.run([args.bin, "compress", src, "-o", caches[codec], "--codec", codec, "--no-sync", "-q"],
                       check=True, stdout=subprocess.DEVNULL)
    # Loads timed in turns (transformers, fixed, entropy, and again): the
    # host's speed drifts during a run, and a load this small is all host.
    loaders = {"transformers": lambda: cls.from_pretrained(src, device_map="cuda:0")}
    for codec, cache in caches.items():
        loaders[codec] = lambda cache=cache: from_pretrained(cache, src, model_class=cls, device_map="cuda:0")
    times, failed = {k: [] for k in loaders}, {}
    for _ in range(args.repeat):
        for k, fn in loaders.items():
            if k in failed:
                continue  # a loader that failed once is not timed again
            try:
                times[k].append(timed(fn))
            except Exception as e:  # noqa: BLE001 - reported below, with its codec
                failed[k] = e
                traceback.print_exc()
    if not times["transformers"]:
        e = failed["transformers"]
        row.update(status="skip", why=f"transformers: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
        return row
    row["transformers_s"] = statistics.median(times["transformers"])
    if "transformers" in failed:
        e = failed["transformers"]
        row["note"] = f"transformers failed a timing round: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
    for codec, cache in caches.items():
        if codec in failed:
            e = failed[codec]
            problems.append(f"{codec}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
            continue
        row[f"{codec}_s"] = statistics.median(times[codec])
        try:
            got = from_pretrained(cache, src, model_class=cls, device_map="cuda:0")
            why = same_state(ref, got)
            if why is None:
                with torch.no_grad():
                    why = same_outputs(want, got(**x))
            if why:
                problems.append(f"{codec}: {why}")
            del got
            if args.auto and codec == "fixed":
                p, row["auto_cpu_modules"] = check_auto(cls, src, cache, x)
                problems += p
            if cls is AutoModelForCausalLM:
                problems += check_offload(cache, src, x, want, codec)
                row["offload"] = True
        except Exception as e:  # noqa: BLE001 - a failure of splitzip's
            problems.append(f"{codec}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
            traceback.print_exc()
    row["status"] = "fail" if problems else "pass"
    if problems:
        row["why"] = "; ".join(problems)
    return row


def check_auto(cls, src, cache, x):
    """device_map="auto" with half the model's bytes allowed on the GPU."""
    ref = cls.from_pretrained(src, device_map="cuda:0")
    size = sum(p.numel() * p.element_size() for p in ref.parameters())
    del ref
    mm = {0: max(size // 2, 1), "cpu": 8 << 30}
    a = cls.from_pretrained(src, device_map="auto", max_memory=mm)
    da = getattr(a, "hf_device_map", {})
    try:
        with torch.no_grad():
            want = a(**x)
    except Exception as e:  # noqa: BLE001 - transformers' own auto-mapped model cannot run: nothing to compare
        return [], f"transformers' own fails: {type(e).__name__}"
    b = from_pretrained(cache, src, model_class=cls, device_map="auto", max_memory=mm)
    why = same_state(a, b)
    db = getattr(b, "hf_device_map", {})
    if why is None and da != db:
        why = f"device maps differ: {da} against {db}"
    if why is None:
        with torch.no_grad():
            why = same_outputs(want, b(**x))
    return [f"auto: {why}"] if why else [], sum(str(v) == "cpu" for v in da.values())


def check_offload(cache, src, x, want, codec):
    out = []
    for tier in (("cache", "pinned", "gpu") if codec == "fixed" else ("pinned",)):
        m = offload(cache, src, window=2, prefetch=1, tier=tier)
        try:
            with torch.no_grad():
                why = same_outputs(want.logits, m(**x).logits)
            if why:
                out.append(f"offload {tier}: {why}")
        finally:
            m.splitzip_offload.close()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, ".dev", "splitzip"))
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--only", default="")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-auto", dest="auto", action="store_false", help="skip the device_map=\"auto\" check")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat: at least 1")
    os.makedirs(args.out, exist_ok=True)
    only = set(filter(None, args.only.split(",")))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for arch in arches():
            if only and arch[0] not in only:
                continue
            t0 = time.perf_counter()
            row = run_one(arch, args, tmp)
            row["took_s"] = round(time.perf_counter() - t0, 2)
            rows.append(row)
            print(json.dumps(row), flush=True)
            torch.cuda.empty_cache()
    meta = {"transformers": transformers.__version__, "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d")}
    with open(os.path.join(args.out, "matrix.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    lines = [f"transformers {meta['transformers']}, torch {meta['torch']}, {meta['gpu']}, {meta['date']}", "",
             "| architecture | family | status | transformers load | splitzip fixed | splitzip entropy | auto map: modules on CPU | offload tiers | note |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ms = lambda k: f"{r[k] * 1e3:.1f} ms" if k in r else "-"  # noqa: E731
        off = "cache, pinned, gpu (fixed); pinned (entropy)" if r.get("offload") else "-"
        lines.append(f"| {r['arch']} | {r['family']} | {r['status']} | {ms('transformers_s')} | {ms('fixed_s')} | "
                     f"{ms('entropy_s')} | {r.get('auto_cpu_modules', '-')} | {off} | "
                     f"{'; '.join(x for x in (r.get('why', ''), r.get('note', '')) if x)} |")
    with open(os.path.join(args.out, "matrix.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    fails = [r["arch"] for r in rows if r["status"] == "fail"]
    print(f"{len(rows)} architectures: {sum(r['status'] == 'pass' for r in rows)} pass, "
          f"{sum(r['status'] == 'skip' for r in rows)} skipped, {len(fails)} fail {fails}")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
