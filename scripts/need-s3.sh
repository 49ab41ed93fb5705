#!/usr/bin/env bash
# Prints the path of the S3-compatible server the S3 tests run on
# loopback: Versity's S3 gateway (versitygw, Apache-2.0), built from its
# Go module into .dev/bin when it is missing (about 2 minutes on 2 cores
# with an empty build cache). The tests are never skipped for want of it.
set -euo pipefail
cd "$(dirname "$0")/.."
version=v1.8.0
bin=$PWD/.dev/bin/versitygw
if [ ! -x "$bin" ] || [ "$(cat "$bin.version" 2>/dev/null)" != "$version" ]; then
  echo "s3: building versitygw $version: go install github.com/versity/versitygw/cmd/versitygw@$version" >&2
  GOBIN=$PWD/.dev/bin GOFLAGS=-trimpath go install -ldflags='-s -w' "github.com/versity/versitygw/cmd/versitygw@$version" >&2 ||
    { echo "s3: building versitygw failed; the S3 tests need it" >&2; exit 1; }
  echo "$version" >"$bin.version"
fi
echo "$bin"
