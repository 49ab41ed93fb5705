"""What the binding raises, and that it reads what it says it reads: the
exceptions Python code expects (KeyError, ValueError, FileNotFoundError,
IntegrityError), the file each names in filename, a closed Cache,
corrupt entropy payloads with their source present, tensor names byte
for byte. Needs neither numpy nor torch."""

import ctypes
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import testenv  # noqa: E402  (python/tests; before splitzip)
import stfile  # noqa: E402  (python/tests)

import splitzip  # noqa: E402

BIN = testenv.BIN


def run(*args):
    subprocess.run([BIN, *args], check=True, stdout=subprocess.DEVNULL)


def stored(c, index):
    """Tensor index's stored bytes, as the cache gives them."""
    buf = ctypes.create_string_buffer(c.stored_size(index))
    n = c.read_stored_into_ptr(index, ctypes.addressof(buf), len(buf))
    return buf.raw[:n]


def flip(cache, payload, at, mask=0x40):
    """XOR byte at of payload, found among the cache's object files (in a
    file of its own or in a pack), with mask; returns that file's path."""
    for d, _, files in os.walk(os.path.join(cache, "objects")):
        for name in files:
            path = os.path.join(d, name)
            with open(path, "r+b") as f:
                off = f.read().find(payload)
                if off >= 0:
                    f.seek(off + at)
                    b = f.read(1)
                    f.seek(off + at)
                    f.write(bytes([b[0] ^ mask]))
                    return path
    raise AssertionError(f"payload of {len(payload)} bytes not found under {cache}/objects")


class Generated(unittest.TestCase):
    """A generated checkpoint and its cache, shared by a class's tests."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.src, cls.cache = testenv.generated(cls.tmp.name)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()


class TestErrors(Generated):

    def test_kinds(self):
        """Each failure is an Error and the builtin exception Python code expects."""
        with splitzip.Cache(self.cache) as c:
            name = "model.embed_tokens.weight"
            with self.assertRaises(KeyError) as e:
                c.info("no.such.tensor")
            self.assertIsInstance(e.exception, splitzip.NotFoundError)
            self.assertIsInstance(e.exception, splitzip.Error)
            self.assertEqual(e.exception.status, 2)
            self.assertIn('"no.such.tensor"', str(e.exception))
            with self.assertRaises(KeyError):
                c.read_into("no.such.tensor", bytearray(4))
            with self.assertRaises(ValueError) as e:
                c.read_into(name, bytearray(3))
            self.assertIsInstance(e.exception, splitzip.InvalidArgumentError)
            self.assertIn(name, str(e.exception))
            with self.assertRaises(ValueError) as e:
                c.pack_into_ptr([0], [0x1000008], [c.info(name).nbytes], 0, 0)
            # The status's name once, though the library's text says it too.
            self.assertEqual(str(e.exception).count("invalid argument") + str(e.exception).count("too small"), 1,
                             str(e.exception))
            with self.assertRaises(ValueError):
                c.info_at(len(c))
            with self.assertRaises(ValueError):
                c.info_at(-1)
            with self.assertRaises(KeyError) as e:
                c.info("no.such.tensor")
            self.assertIsNone(e.exception.filename)  # about no file
        with self.assertRaises(FileNotFoundError) as e:
            splitzip.Cache(os.path.join(self.tmp.name, "nope"))
        self.assertIsInstance(e.exception, splitzip.Error)
        self.assertEqual(e.exception.filename, os.path.join(self.tmp.name, "nope"))
        with self.assertRaises(FileNotFoundError) as e:
            splitzip.Cache(self.cache, source=os.path.join(self.tmp.name, "nowhere"))
        self.assertIn("source=", str(e.exception))
        with self.assertRaises(ValueError) as e:
            splitzip.Cache(self.src)  # a checkpoint, not a cache
        self.assertIsInstance(e.exception, splitzip.Error)
        self.assertNotIsInstance(e.exception, splitzip.IntegrityError)
        self.assertIn("not a splitzip cache", str(e.exception))
        self.assertNotIn("invalid argument: invalid argument", str(e.exception))

    def test_traceback_names_the_package(self):
        """A traceback names an error by the package users import it from
        (splitzip.NotFoundError), not by the binding's private module."""
        import traceback
        with splitzip.Cache(self.cache) as c:
            try:
                c.info("no.such.tensor")
            except splitzip.Error as e:
                last = traceback.format_exception_only(type(e), e)[-1]
        self.assertTrue(last.startswith("splitzip.NotFoundError: "), last)
        for name in splitzip.__all__:
            obj = getattr(splitzip, name)
            if isinstance(obj, type):
                self.assertEqual(obj.__module__, "splitzip", name)

    def test_several_sources_say_source_argument(self):
        """A cache of two checkpoints opened without source= names the Python argument, not the CLI flag."""
        with tempfile.TemporaryDirectory() as d:
            a, b, cache = os.path.join(d, "a"), os.path.join(d, "b"), os.path.join(d, "c")
            run("gen", a, "--size", "1MiB", "-q")
            run("gen", b, "--size", "1MiB", "--seed", "2", "-q")
            run("compress", a, "-o", cache, "--no-sync", "-q")
            run("compress", b, "-o", cache, "--no-sync", "-q")
            with self.assertRaises(ValueError) as e:
                splitzip.Cache(cache)
            self.assertIsInstance(e.exception, splitzip.Error)
            self.assertNotIn("--source", str(e.exception))
            self.assertIn("source=", str(e.exception))
            with splitzip.Cache(cache, source=b) as c:
                self.assertTrue(len(c) > 0)

    def test_empty_path(self):
        """An empty cache path is an invalid argument that says so (it was an
        I/O error naming ''), and a ValueError as such errors are."""
        with self.assertRaises(splitzip.InvalidArgumentError) as e:
            splitzip.Cache("")
        self.assertIsInstance(e.exception, ValueError)
        self.assertIn("path is empty", str(e.exception))

    def test_closed(self):
        """Every method of a closed Cache raises ValueError; close() twice is no error."""
        c = splitzip.Cache(self.cache)
        name = c.names()[0]
        info = c.info(name)
        self.assertFalse(c.closed)
        c.close()
        c.close()
        self.assertTrue(c.closed)
        buf = bytearray(info.nbytes)
        calls = {
            "len": lambda: len(c), "info_at": lambda: c.info_at(0), "info": lambda: c.info(name),
            "infos": c.infos, "names": c.names, "find": lambda: c.find(name),
            "find_slice": lambda: c.find_slice("x", 0, 1), "find_key": lambda: c.find_key("k"),
            "read_into": lambda: c.read_into(name, buf), "read_many": lambda: c.read_many([]),
            "read_into_ptr": lambda: c.read_into_ptr(0, 0, 0), "stored_size": lambda: c.stored_size(0),
            "read_stored_into_ptr": lambda: c.read_stored_into_ptr(0, 0, 0),
            "decode_host_ptr": lambda: c.decode_host_ptr(0, 0, 0, 0, 0),
            "part_into_ptr": lambda: c.part_into_ptr(0, 0, 0, 0, 0, 0, 0),
            "decode_part_ptr": lambda: c.decode_part_ptr(0, 0, 0, 0, 0, 0, 0),
            "plan": lambda: c.plan(1), "upload": lambda: c.upload(0, 4096, info.nbytes),
            "upload_batch": lambda: c.upload_batch([0], [4096], [info.nbytes]),
            "pack_size": lambda: c.pack_size([0]), "pack_into_ptr": lambda: c.pack_into_ptr([0], [0], [0], 0, 0),
            "gpu_prepare": c.gpu_prepare, "scatter": lambda: c.scatter(0, 0, splitzip._lib.PackInfo()),
            "scatter_check": c.scatter_check, "enter": lambda: c.__enter__(),
        }
        for what, call in calls.items():
            with self.assertRaises(ValueError, msg=what) as e:
                call()
            self.assertEqual(str(e.exception), "the cache is closed", what)
        with splitzip.Cache(self.cache) as c2:
            pass
        self.assertTrue(c2.closed)
        with self.assertRaises(ValueError):
            len(c2)

    def test_entropy_corrupt_with_source(self):
        """A damaged entropy payload is an IntegrityError naming the tensor, though its source is there."""
        with tempfile.TemporaryDirectory() as d:
            src, cache = os.path.join(d, "ck"), os.path.join(d, "c")
            run("gen", src, "--size", "2MiB", "--dtype", "F16", "-q")
            run("compress", src, "-o", cache, "--codec", "entropy", "--no-sync", "-q")
            want = {}
            for f in sorted(os.listdir(src)):
                if f.endswith(".safetensors"):
                    want.update(stfile.read(os.path.join(src, f)))
            with splitzip.Cache(cache) as c:
                # Payloads: stored in fewer bytes than the tensor's.
                entropy = [t for t in c.infos() if c.stored_size(t.index) < t.nbytes]
                self.assertTrue(entropy, "no entropy payloads")
                for t in entropy[:3]:
                    p = stored(c, t.index)
                    flip(cache, p, len(p) // 2)
            with splitzip.Cache(cache) as c:
                for t in entropy[:3]:
                    buf = bytearray(t.nbytes)
                    with self.assertRaises(splitzip.IntegrityError, msg=t.name) as e:
                        c.read_into(t.name, buf)
                    self.assertIn(f'"{t.name}"', str(e.exception))
                for t in entropy[3:]:
                    buf = bytearray(t.nbytes)
                    c.read_into(t.name, buf)
                    self.assertEqual(bytes(buf), want[t.name][2], t.name)

    def test_damaged_object_names_its_file(self):
        """A payload failing its checksum, or whose file is gone, is an IntegrityError whose filename is that
        object file under the cache's objects/ folder, however the tensor is read."""
        with tempfile.TemporaryDirectory() as d:
            src, cache = testenv.generated(d)
            with splitzip.Cache(cache) as c:
                t = next(t for t in c.infos() if t.payload == "fixed")
                p = stored(c, t.index)
            path = flip(cache, p, len(p) // 2)
            self.assertEqual(os.path.dirname(os.path.dirname(path)), os.path.join(cache, "objects"))
            with splitzip.Cache(cache) as c:
                reads = {"read_into": lambda: c.read_into(t.name, bytearray(t.nbytes)),
                         "read_stored_into_ptr": lambda: stored(c, t.index)}
                for what, read in reads.items():
                    with self.assertRaises(splitzip.IntegrityError, msg=what) as e:
                        read()
                    self.assertEqual(e.exception.filename, path, what)
                    self.assertIn(f'"{t.name}"', str(e.exception))
            os.remove(path)
            with splitzip.Cache(cache) as c:
                with self.assertRaises(splitzip.IntegrityError) as e:
                    c.read_into(t.name, bytearray(t.nbytes))
                self.assertEqual(e.exception.filename, path)

    def test_cache_removed_while_open(self):
        """A cache removed or moved while a Cache holds it open is a
        MissingFileError (a FileNotFoundError) saying so, not an
        IntegrityError that would tell code to delete a damaged object."""
        for how in ("rmtree", "rename"):
            with tempfile.TemporaryDirectory() as d:
                src, cache = testenv.generated(d)
                with splitzip.Cache(cache) as c:
                    t = next(t for t in c.infos() if t.payload == "fixed")
                    if how == "rmtree":
                        shutil.rmtree(cache)
                    else:
                        os.rename(cache, cache + ".moved")
                    with self.assertRaises(splitzip.MissingFileError, msg=how) as e:
                        c.read_into(t.name, bytearray(t.nbytes))
                    self.assertIsInstance(e.exception, FileNotFoundError)
                    self.assertIn("removed or moved while it was open", str(e.exception))

    def test_damaged_index_names_its_file(self):
        """A cache whose index is damaged: IntegrityError naming the index
        file, not the cache folder (code that removes filename and fetches
        again must not remove the cache)."""
        with tempfile.TemporaryDirectory() as tmp:
            cache = os.path.join(tmp, "c")
            subprocess.run(["cp", "-r", self.cache, cache], check=True)
            index = os.path.join(cache, "splitzip.json")
            with open(index, "r+b") as f:
                f.seek(300)
                b = f.read(1)
                f.seek(300)
                f.write(bytes([b[0] ^ 1]))
            # The backup a commit writes beside the index serves the cache
            # (every tensor as before); without it, the damage is the error.
            with splitzip.Cache(cache) as c, splitzip.Cache(self.cache) as whole:
                self.assertEqual(c.names(), whole.names())
            os.remove(os.path.join(cache, "splitzip.json.backup"))
            with self.assertRaises(splitzip.IntegrityError) as e:
                splitzip.Cache(cache)
            self.assertEqual(e.exception.filename, index)
            # An index that cannot be read (a folder here; no permission
            # for others) is a FileError naming it too.
            os.remove(index)
            os.mkdir(index)
            with self.assertRaises(splitzip.FileError) as e:
                splitzip.Cache(cache)
            self.assertEqual(e.exception.filename, index)

    def test_missing_source_names_its_file(self):
        """A raw tensor whose source shard is gone is a SourceChangedError (an OSError) whose filename is the
        shard; the tensors of the other shard still read."""
        with tempfile.TemporaryDirectory() as d:
            src, cache = testenv.generated(d)
            shard = os.path.join(src, sorted(f for f in os.listdir(src) if f.endswith(".safetensors"))[0])
            os.rename(shard, shard + ".moved")
            failed = 0
            with splitzip.Cache(cache) as c:
                for t in c.infos():
                    if t.payload != "raw" or t.nbytes == 0:
                        continue
                    try:
                        c.read_into(t.name, bytearray(t.nbytes))
                    except splitzip.SourceChangedError as e:
                        self.assertIsInstance(e, OSError)
                        self.assertEqual(e.filename, shard, t.name)
                        self.assertIn("source= the folder it is in now", str(e), t.name)
                        failed += 1
            self.assertTrue(failed, f"no raw tensor of {shard}")

    def test_names_round_trip(self):
        """Names with non-ASCII, escaped and control characters (NUL too) come back byte for byte."""
        names = ["é.weight", "名前", 'quote"back\\slash', "tab\tnew\nline", "nul\x00in", "emoji\U0001F600",
                 "ctl\x01\x1f", "\u2028sep", "x" * 5000]
        with tempfile.TemporaryDirectory() as d:
            os.mkdir(os.path.join(d, "src"))
            for ascii_only in (True, False):
                path, cache = os.path.join(d, "src", f"m{ascii_only}.safetensors"), os.path.join(d, f"c{ascii_only}")
                tensors = [(n, "U8", (4,), bytes([i]) * 4) for i, n in enumerate(names)]
                header, off = {}, 0
                for n, dt, shape, b in tensors:
                    header[n] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(b)]}
                    off += len(b)
                h = json.dumps(header, ensure_ascii=ascii_only).encode()
                with open(path, "wb") as f:
                    f.write(len(h).to_bytes(8, "little") + h + b"".join(t[3] for t in tensors))
                run("compress", path, "-o", cache, "--no-sync")
                with splitzip.Cache(cache) as c:
                    self.assertEqual(c.names(), names)
                    for i, (n, _, _, b) in enumerate(tensors):
                        self.assertEqual(c.find(n), i, repr(n))
                        buf = bytearray(4)
                        c.read_into(n, buf)
                        self.assertEqual(bytes(buf), b, repr(n))
                    with self.assertRaises(KeyError):
                        c.find("nul")  # not the name cut at its NUL
                    with self.assertRaises(KeyError):
                        c.find("lone\ud800")

    def test_lone_surrogate_rejected_or_kept(self):
        """A name with an escaped lone surrogate is refused, as the reference refuses it, or kept exactly."""
        with tempfile.TemporaryDirectory() as d:
            os.mkdir(os.path.join(d, "src"))
            path, cache = os.path.join(d, "src", "m.safetensors"), os.path.join(d, "c")
            stfile.write(path, [("lone\ud800", "U8", (4,), b"abcd"), ("ok", "U8", (4,), b"efgh")])
            p = subprocess.run([BIN, "compress", path, "-o", cache, "--no-sync", "-q"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if p.returncode != 0:
                self.assertTrue(p.stderr.strip(), "compress failed without a message")
                return
            with splitzip.Cache(cache) as c:
                self.assertEqual(sorted(c.names()), sorted(["lone\ud800", "ok"]))


if __name__ == "__main__":
    unittest.main()


class TestProcesses(Generated):
    """What crosses a process boundary: errors pickle as themselves (a pool
    worker's reach the parent), a Cache does not (its handle is this
    process's), a forked child is refused rather than left hanging, and a
    cache opened by a relative path stays open across os.chdir."""

    def test_errors_pickle(self):
        import pickle
        for status, msg, filename in [(1, "bad argument", None), (2, "no tensor x", None), (3, "checksum", "/c/objects/ab/x"),
                                      (4, "source shard changed", "/s/m.safetensors"), (5, "too small", None),
                                      (8, "open /x: no such file or directory", "/x"), (9, "internal", None)]:
            e = splitzip._lib.error(status, msg, filename)
            back = pickle.loads(pickle.dumps(e))
            self.assertIs(type(back), type(e))
            self.assertEqual((str(back), back.status, back.message, back.filename), (str(e), e.status, e.message, e.filename))

    def test_cache_not_picklable(self):
        import copy
        import pickle
        with splitzip.Cache(self.cache) as c:
            for what, f in [("pickle", pickle.dumps), ("copy", copy.copy), ("deepcopy", copy.deepcopy)]:
                with self.assertRaises(TypeError, msg=what) as e:
                    f(c)
                self.assertIn("cannot be pickled or copied", str(e.exception))
            self.assertGreater(len(c), 0)  # the original still works

    def test_argument_types(self):
        # Wrong types are TypeErrors naming the argument, not ctypes'
        # ArgumentError or an AttributeError from inside.
        with splitzip.Cache(self.cache) as c:
            for what, call, name in [
                ("read_into_ptr", lambda: c.read_into_ptr(0, "0x10", 4), "ptr"),
                ("stored_size", lambda: c.stored_size("0"), "index"),
                ("plan", lambda: c.plan("2"), "ranks"),
                ("plan rules", lambda: c.plan(2, 5), "rules"),
                ("find_slice", lambda: c.find_slice(b"m.safetensors", 0, 4), "shard"),
                ("find_slice size", lambda: c.find_slice("m.safetensors", 0, 4.0), "size"),
                ("find_key", lambda: c.find_key(7), "key"),
                ("decode_host_ptr", lambda: c.decode_host_ptr(0, 0, None, 0, 4), "srclen"),
            ]:
                with self.assertRaises(TypeError, msg=what) as e:
                    call()
                self.assertIn(name, str(e.exception), what)
            # Integers of numpy (and torch) are integers, addresses too; a
            # negative size is refused, not taken as 2**64 - 1.
            import numpy as np
            i = next(k for k in range(len(c)) if c.info_at(k).nbytes > 0)
            n = c.info_at(i).nbytes
            buf, want = np.zeros(n, dtype=np.uint8), np.zeros(n, dtype=np.uint8)
            c.read_into_ptr(i, want.ctypes.data, n)
            c.read_into_ptr(np.int64(i), np.uint64(buf.ctypes.data), np.int32(n))
            self.assertTrue(np.array_equal(buf, want))
            self.assertEqual(c.stored_size(np.int64(i)), c.stored_size(i))
            with self.assertRaises(splitzip.InvalidArgumentError) as e:
                c.read_into_ptr(i, buf.ctypes.data, -1)
            self.assertIn("capacity", str(e.exception))

    def test_read_many_runs(self):
        # read_many takes small items in runs a thread: every item of a
        # mix is read (each its own bytes), and an item that fails (its
        # buffer too small) raises, whichever run it is in.
        import numpy as np
        with splitzip.Cache(self.cache) as c:
            infos = [c.info_at(k) for k in range(len(c)) if c.info_at(k).nbytes > 0]
            bufs = [np.zeros(t.nbytes, dtype=np.uint8) for t in infos] * 3
            items = [(t.index, b.ctypes.data, b.nbytes) for t, b in zip(infos * 3, bufs)]
            c.read_many(items, threads=3)
            for t, b in zip(infos * 3, bufs):
                want = np.zeros(t.nbytes, dtype=np.uint8)
                c.read_into_ptr(t.index, want.ctypes.data, t.nbytes)
                self.assertTrue(np.array_equal(b, want), t.name)
            bad = list(items)
            bad[len(bad) // 2] = (bad[len(bad) // 2][0], bad[len(bad) // 2][1], 0)
            with self.assertRaises(splitzip.Error):
                c.read_many(bad, threads=3)

    def test_index_past_64_bits(self):
        with splitzip.Cache(self.cache) as c:
            with self.assertRaises(splitzip.InvalidArgumentError):
                c.info_at(2**64 + 5)

    def test_relative_path_after_chdir(self):
        here = os.getcwd()
        try:
            os.chdir(os.path.dirname(self.cache))
            c = splitzip.Cache(os.path.basename(self.cache))
            os.chdir(self.tmp.name + "/..")
            with c:
                for i in range(len(c)):
                    info = c.info_at(i)
                    buf = bytearray(info.nbytes)
                    c.read_into(info.name, buf)
        finally:
            os.chdir(here)

    def test_forked_child_refused(self):
        import time
        c = splitzip.Cache(self.cache)
        self.addCleanup(c.close)
        pid = os.fork()
        if pid == 0:  # the child: never back into unittest
            code = 2
            try:
                c.names()
            except RuntimeError as e:
                code = 0 if "forked" in str(e) else 3
            except BaseException:
                code = 4
            os._exit(code)
        deadline = time.monotonic() + 20
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                self.fail("a forked child's call hung")
            time.sleep(0.05)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        self.assertGreater(len(c.names()), 0)  # the parent's cache still works


class TestGoneSource(unittest.TestCase):
    def test_recorded_source_gone(self):
        """source= naming a checkpoint the cache records opens it, even with
        its folder gone (a self-contained cache of several checkpoints); a
        path that is neither recorded nor there is a FileNotFoundError."""
        with tempfile.TemporaryDirectory() as tmp:
            a, b, cache = os.path.join(tmp, "a"), os.path.join(tmp, "b"), os.path.join(tmp, "cache")
            run("gen", a, "--size", "1MiB", "--shards", "1", "--seed", "3")
            run("gen", b, "--size", "1MiB", "--shards", "1", "--seed", "4")
            run("compress", a, "-o", cache, "--self-contained", "--no-sync")
            run("compress", b, "-o", cache, "--self-contained", "--no-sync")
            want = {}
            with splitzip.Cache(cache, source=a) as c:
                for name in c.names():
                    buf = bytearray(c.info(name).nbytes)
                    c.read_into(name, buf)
                    want[name] = bytes(buf)
            os.rename(a, a + ".gone")
            with splitzip.Cache(cache, source=a) as c:
                for name, data in want.items():
                    buf = bytearray(len(data))
                    c.read_into(name, buf)
                    self.assertEqual(bytes(buf), data, name)
            with self.assertRaises(FileNotFoundError):
                splitzip.Cache(cache, source=os.path.join(tmp, "nowhere"))
