"""splitzip.offload on a GPU: offloaded logits equal the resident model's
bit for bit for several windows and prefetch depths, over forwards with
different inputs. Run where torch, transformers, accelerate and a GPU are
(the GPU machine; CI skips with a message)."""

import os
import subprocess
import sys
import tempfile
import unittest

import testenv  # noqa: E402  (python/tests; before splitzip)

BIN = testenv.BIN
missing = testenv.gpu_stack_missing()
if missing is None:
    import torch


@unittest.skipIf(missing is not None, missing or "")
class TestOffload(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from transformers import AutoModelForCausalLM, LlamaConfig
        cls.tmp = tempfile.TemporaryDirectory()
        cls.src = os.path.join(cls.tmp.name, "model")
        cls.cfg = LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=688, num_hidden_layers=6,
                              num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512,
                              tie_word_embeddings=False, torch_dtype="bfloat16")
        torch.manual_seed(11)
        AutoModelForCausalLM.from_config(cls.cfg, dtype=torch.bfloat16).save_pretrained(cls.src)
        cls.caches = {}
        for codec in ("fixed", "entropy"):
            c = os.path.join(cls.tmp.name, codec)
            subprocess.run([BIN, "compress", cls.src, "-o", c, "--codec", codec, "--no-sync", "-q"], check=True,
                           stdout=subprocess.DEVNULL)
            cls.caches[codec] = c
        cls.ref = AutoModelForCausalLM.from_pretrained(cls.src, device_map="cuda:0", dtype=torch.bfloat16).eval()
        cls.inputs = [torch.randint(0, 1000, (2, n), device="cuda:0", generator=None) for n in (64, 17, 128)]
        with torch.no_grad():
            cls.want = [cls.ref(x).logits for x in cls.inputs]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check(self, codec, window, prefetch, resident=False):
        from splitzip.offload import offload
        m = offload(self.caches[codec], self.src, window=window, prefetch=prefetch, resident=resident)
        try:
            for rep in range(2):
                for x, want in zip(self.inputs, self.want):
                    with torch.no_grad():
                        got = m(x).logits
                    self.assertTrue(torch.equal(got, want), f"{codec}, window {window}, prefetch {prefetch}, "
                                    f"repeat {rep}: logits differ by {(got.float() - want.float()).abs().max().item()}")
            st = m.splitzip_offload.stats
            # A layer alone in its slot (i mod window) is uploaded once and
            # then found there; the others once a forward (6 forwards).
            alone = [sum(1 for j in range(6) if j % window == i % window) == 1 for i in range(6)]
            self.assertEqual(st.uploads, sum(1 if a else 6 for a in alone), st)
            self.assertEqual(st.hits, sum(5 for a in alone if a), st)
            print(f"{codec}, window {window}, prefetch {prefetch}: {st.uploads} uploads, {st.hits} hits, "
                  f"{st.bytes / 1e6:.1f} MB, waited {st.waited_s * 1e3:.1f} ms", file=sys.stderr)
        finally:
            m.splitzip_offload.close()

    def test_windows(self):
        for codec in ("fixed", "entropy"):
            for window, prefetch in ((1, 0), (2, 1), (3, 2), (4, 1), (6, 2)):
                self.check(codec, window, prefetch)
            self.check(codec, 2, 1, resident=True)

    def test_bad_window(self):
        from splitzip.offload import offload
        with self.assertRaisesRegex(ValueError, "prefetch"):
            offload(self.caches["fixed"], self.src, window=2, prefetch=2)


if __name__ == "__main__":
    unittest.main()
