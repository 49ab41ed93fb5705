"""splitzip.transformers.from_pretrained against transformers' own, on a
GPU: run where torch, transformers, accelerate and a GPU are (the GPU
machine; CI has none of them and skips with a message)."""

import os
import subprocess
import sys
import tempfile
import time
import unittest

import testenv  # noqa: E402  (python/tests; before splitzip)

BIN = testenv.BIN
missing = testenv.gpu_stack_missing()
if missing is None:
    import torch


def llama(tied: bool):
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                       num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512,
                       tie_word_embeddings=tied, torch_dtype="bfloat16")


@unittest.skipIf(missing is not None, missing or "")
class TestFromPretrained(unittest.TestCase):
    def check(self, tied: bool, codec: str):
        from transformers import AutoModelForCausalLM
        from splitzip.transformers import from_pretrained
        torch.manual_seed(7)
        cfg = llama(tied)
        with tempfile.TemporaryDirectory() as d:
            src, cache = os.path.join(d, "model"), os.path.join(d, "c")
            AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).save_pretrained(src)
            subprocess.run([BIN, "compress", src, "-o", cache, "--codec", codec, "--no-sync", "-q"], check=True,
                           stdout=subprocess.DEVNULL)
            ref = AutoModelForCausalLM.from_pretrained(src, device_map="cuda:0", dtype=torch.bfloat16).eval()
            t0 = time.perf_counter()
            got = from_pretrained(cache, src, device="cuda:0")
            torch.cuda.synchronize()
            took = time.perf_counter() - t0
            if tied:
                self.assertEqual(got.lm_head.weight.data_ptr(), got.model.embed_tokens.weight.data_ptr(), "untied")
            for name, t in got.state_dict().items():
                self.assertEqual(t.device.type, "cuda", name)
            ids = torch.randint(0, cfg.vocab_size, (2, 64), device="cuda:0")
            with torch.no_grad():
                a, b = ref(ids).logits, got(ids).logits
            self.assertTrue(torch.equal(a, b), f"logits differ by up to {(a.float() - b.float()).abs().max().item()}")
            print(f"tied {tied}, codec {codec}: logits equal; loaded in {took * 1e3:.1f} ms", file=sys.stderr)

    def test_untied_fixed(self):
        self.check(False, "fixed")

    def test_tied_entropy(self):
        self.check(True, "entropy")

    def moe(self, d):
        """A tiny Mixtral saved as transformers saves it (experts as
        separate tensors) and its fixed cache."""
        from transformers import AutoModelForCausalLM, MixtralConfig
        torch.manual_seed(11)
        cfg = MixtralConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=3,
                            num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2)
        src, cache = os.path.join(d, "moe"), os.path.join(d, "moe.sz")
        with torch.device("cuda:0"):
            AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).save_pretrained(src)
        subprocess.run([BIN, "compress", src, "-o", cache, "--no-sync", "-q"], check=True, stdout=subprocess.DEVNULL)
        return cfg, src, cache

    def test_moe_through_transformers(self):
        """A mixture-of-experts model, whose experts transformers fuses at
        load time: the same parameters and logits as transformers' own
        load, on one GPU and spread by device_map="auto" onto the CPU."""
        from transformers import AutoModelForCausalLM
        from splitzip.transformers import from_pretrained
        with tempfile.TemporaryDirectory() as d:
            cfg, src, cache = self.moe(d)
            ids = torch.randint(0, cfg.vocab_size, (2, 32), device="cuda:0")
            for dm in ("cuda:0", "auto"):
                kw = {"max_memory": {0: 3 << 20, "cpu": 1 << 30}} if dm == "auto" else {}
                ref = AutoModelForCausalLM.from_pretrained(src, device_map=dm, **kw).eval()
                got = from_pretrained(cache, src, device_map=dm, **kw)
                a, b = ref.state_dict(), got.state_dict()
                self.assertEqual(set(a), set(b))
                self.assertTrue(any("experts" in k for k in a))
                for k in a:
                    self.assertEqual(a[k].device, b[k].device, k)
                    if a[k].device.type != "meta":  # offloaded to the CPU by accelerate: checked by the logits
                        self.assertTrue(torch.equal(a[k], b[k]), k)
                with torch.no_grad():
                    self.assertTrue(torch.equal(ref(ids).logits, got(ids).logits), dm)

    def test_moe_offload_generate(self):
        """The same MoE model offloaded (pinned and gpu tiers): logits and
        greedy generation (dynamic cache) equal to the resident model's."""
        from transformers import AutoModelForCausalLM
        from splitzip.offload import offload
        with tempfile.TemporaryDirectory() as d:
            cfg, src, cache = self.moe(d)
            ref = AutoModelForCausalLM.from_pretrained(src, device_map="cuda:0").eval()
            ids = torch.randint(0, cfg.vocab_size, (2, 16), device="cuda:0")
            with torch.no_grad():
                want = ref(ids).logits
                tokens = ref.generate(ids, max_new_tokens=8, do_sample=False)
            for tier in ("pinned", "gpu"):
                m = offload(cache, src, window=2, prefetch=1, tier=tier)
                try:
                    with torch.no_grad():
                        self.assertTrue(torch.equal(want, m(ids).logits), tier)
                        self.assertTrue(torch.equal(tokens, m.generate(ids, max_new_tokens=8, do_sample=False)), tier)
                    self.assertEqual(m.splitzip_offload.resident, [])
                finally:
                    m.splitzip_offload.close()

    def test_missing_weight(self):
        """A parameter absent from the cache is an error naming it."""
        from transformers import AutoModelForCausalLM
        from splitzip.transformers import from_pretrained
        cfg = llama(False)
        with tempfile.TemporaryDirectory() as d:
            src, cache = os.path.join(d, "model"), os.path.join(d, "c")
            AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).save_pretrained(src)
            bigger = llama(False)
            bigger.num_hidden_layers = 5
            subprocess.run([BIN, "compress", src, "-o", cache, "--no-sync", "-q"], check=True, stdout=subprocess.DEVNULL)
            with self.assertRaisesRegex(ValueError, "model.layers.4"):
                from_pretrained(cache, bigger, device="cuda:0")


if __name__ == "__main__":
    unittest.main()
