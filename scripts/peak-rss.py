#!/usr/bin/env python3
"""Run a command and print its peak resident set size and wall time.

    scripts/peak-rss.py NAME COMMAND [ARGS...]

Prints "NAME peak RSS <MiB> MiB <seconds> s" and exits with the command's
status. Standard library only, so it runs where GNU time is missing.
"""
import resource
import subprocess
import sys
import time

name, cmd = sys.argv[1], sys.argv[2:]
t0 = time.monotonic()
rc = subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode
dt = time.monotonic() - t0
kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print("%-11s peak RSS %7.1f MiB  %6.2f s%s" % (name, kb / 1024, dt, "" if rc == 0 else "  (exit %d)" % rc), flush=True)
sys.exit(rc)
