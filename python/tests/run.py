"""Run every test of this directory and say what ran: the runner of
`make python-test`. A test may skip only for want of a CUDA GPU (its
reason starts with testenv.GPU_SKIP); any other skip fails the run, as a
failure or error does. The summary line, also written to the file named
by --status, reads

    python tests: N ran, N passed against the installed wheel; K skipped for want of a GPU
"""

import argparse
import sys
import unittest

import testenv  # noqa: E402  (python/tests; before splitzip)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--status", help="write the summary line to this file as well")
    args = ap.parse_args()

    suite = unittest.TestLoader().discover(testenv.HERE, top_level_dir=testenv.HERE)
    r = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)

    gpu = [(t, why) for t, why in r.skipped if why.startswith(testenv.GPU_SKIP)]
    other = [(t, why) for t, why in r.skipped if not why.startswith(testenv.GPU_SKIP)]
    ran = r.testsRun - len(r.skipped)
    failed = len(r.failures) + len(r.errors) + len(r.unexpectedSuccesses)
    what = "the installed wheel" if testenv.INSTALLED else "the source tree"
    line = f"python tests: {ran} ran, {ran - failed} passed against {what}; {len(gpu)} skipped for want of a GPU"
    for t, why in other:
        print(f"NOT ALLOWED: {t.id()} skipped: {why}")
    if other:
        line += f"; {len(other)} skipped for other reasons (not allowed: install what they name)"
    ok = r.testsRun > 0 and failed == 0 and not other
    if not ok:
        line += " -- FAILED"
    print(line)
    if args.status:
        with open(args.status, "w") as f:
            f.write(line + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
