"""Cache(shared=True): the payloads' resident copies in one host copy that
the processes of a machine share. On the CPU the option is taken and
reads are unchanged; on a GPU, a process uploads every tensor bit for bit
from the copy another process (`splitzip load --share --hold`) made, and
is listed among its holders."""

import os
import subprocess
import tempfile
import unittest

import stfile
import testenv  # noqa: E402  (python/tests; before splitzip)

import splitzip


class TestShared(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.src, cls.cache = testenv.generated(cls.tmp.name, size="4MiB")
        cls.want = stfile.read_dir(cls.src)
        cls.share = os.path.join(cls.tmp.name, "share")
        os.environ["SPLITZIP_SHARE_DIR"] = cls.share

    @classmethod
    def tearDownClass(cls):
        os.environ.pop("SPLITZIP_SHARE_DIR", None)
        cls.tmp.cleanup()

    def test_host_reads(self):
        with splitzip.Cache(self.cache, shared=True) as c:
            for name in c.names():
                buf = bytearray(c.info(name).nbytes)
                c.read_into(name, buf)
                self.assertEqual(bytes(buf), self.want[name][2], name)

    def test_upload_from_another_process_copy(self):
        why = testenv.gpu_missing("to pin and upload a shared copy")
        if why:
            self.skipTest(why)
        import torch
        env = dict(os.environ, SPLITZIP_SHARE_DIR=self.share)
        holder = subprocess.Popen([testenv.BIN, "load", self.cache, "--share", "--hold", "120s"],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            said = []
            for line in holder.stderr:  # warnings may come first
                said.append(line)
                if "holding the shared host copy" in line:
                    break
            self.assertIn("holding the shared host copy", "".join(said))
            with splitzip.Cache(self.cache, shared=True) as c:
                infos = c.infos()
                bufs = [torch.empty(max(i.nbytes, 1), dtype=torch.uint8, device="cuda") for i in infos]
                for _ in range(2):  # the second upload from the same copy, resident
                    ev = c.upload_batch([i.index for i in infos], [b.data_ptr() for b in bufs], [i.nbytes for i in infos],
                                        device=torch.cuda.current_device(), stream=torch.cuda.current_stream().cuda_stream)
                    ev.wait()
                    ev.release()
                    for i, b in zip(infos, bufs):
                        self.assertEqual(b[:i.nbytes].cpu().numpy().tobytes(), self.want[i.name][2], i.name)
                holders = [f for f in os.listdir(self.share) if f.endswith(".holders")]
                self.assertEqual(len(holders), 1, os.listdir(self.share))
                with open(os.path.join(self.share, holders[0])) as f:
                    pids = {int(l.split()[0]) for l in f if l.strip()}
                self.assertEqual(pids, {holder.pid, os.getpid()})
        finally:
            holder.terminate()
            holder.wait(30)


if __name__ == "__main__":
    unittest.main()
