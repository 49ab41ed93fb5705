#!/usr/bin/env bash
# Prints the path of the CNCF Distribution registry binary the OCI tests
# run on loopback (Debian's docker-registry package), installing the
# package with apt-get where this runs as root; otherwise it fails naming
# the package (the tests are never skipped for want of it).
set -euo pipefail
bin=/usr/bin/docker-registry
if [ ! -x "$bin" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "registry: docker-registry is missing; installing it: apt-get install -y docker-registry" >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-registry >/dev/null; } ||
      { echo "registry: 'apt-get install -y docker-registry' failed; the OCI tests need it" >&2; exit 1; }
    # The package starts a system registry on :5000; the tests start their own.
    command -v systemctl >/dev/null 2>&1 && systemctl disable --now docker-registry >/dev/null 2>&1 || true
  else
    echo "registry: docker-registry is not installed; run (as root): apt-get install -y docker-registry" >&2
    exit 1
  fi
fi
echo "$bin"
