#!/usr/bin/env bash
# What make python-test needs of Debian's packages, for the Python given
# as $1 (default /usr/bin/python3): numpy and torch (the binding's tests
# import both; none may skip for want of them), venv, pip, setuptools and
# wheel (the wheel is built and installed into a venv). Missing ones are
# installed with apt-get when this runs as root where apt-get is;
# otherwise it fails, naming them and the command that installs them.
set -uo pipefail
py=${1:-/usr/bin/python3}
# module:package, in the order they are checked.
mods="numpy:python3-numpy torch:python3-torch venv:python3-venv ensurepip:python3-venv pip:python3-pip setuptools:python3-setuptools wheel:python3-wheel"

missing() {
  local need="" m
  for m in $mods; do
    "$py" -c "import ${m%%:*}" >/dev/null 2>&1 || need="$need ${m#*:}"
  done
  echo $need | tr ' ' '\n' | awk 'NF && !seen[$0]++' | xargs
}

need=$(missing)
[ -z "$need" ] && exit 0
line="apt-get install -y $need"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "python tests: $py lacks $need; installing them: $line"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null; }; then
    echo "python tests: '$line' failed; the Python tests cannot run without $need" >&2
    exit 1
  fi
  need=$(missing)
  [ -z "$need" ] && exit 0
  echo "python tests: $py still lacks $need after '$line' (is $py Debian's python3?)" >&2
  exit 1
fi
echo "python tests: $py lacks $need; run (as root): $line" >&2
exit 1
