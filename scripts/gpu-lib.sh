# Shared by the GPU scripts that source it (bash): ab_setup, which takes
# an A/B script's arguments D and BASE and sends its output to a log in
# $OUT, with K=$OUT/kernels where the build phase puts its kernels; step
# and fail, which log a phase and record a failure in $status; and
# runtime_suites, which runs the engine conformance suite, the transport
# CUDA tests and the loader suite from test binaries in $1
# (cudaengine.test, transport.test, loader.test, built with go test -c)
# with whatever kernel overrides the caller exported; suite, which runs one
# test binary or command with a time limit, its log in $OUT/NAME.log, the
# result lines echoed (SUITE_LINES adds a pattern), a failure recorded in
# the caller's array failed.
status=0
suite() { # name seconds dir command...
  local name=$1 secs=$2 dir=$3
  shift 3
  echo "=== $name ($(date +%T))"
  (cd "$dir" && timeout "$secs" "$@") >"$OUT/$name.log" 2>&1
  local rc=$?
  grep -E "^(--- FAIL|--- SKIP|ok|FAIL|PASS|Ran |OK|FAILED)|panic|ERROR SUMMARY${SUITE_LINES:+|$SUITE_LINES}" "$OUT/$name.log" | head -20
  echo "$name: exit $rc"
  [ $rc -eq 0 ] || failed+=("$name")
}
fail() { echo "FAILED: $*"; status=1; }
step() { echo; echo "=== $* ($(date +%T))"; }
runtime_suites() {
  local d=$1 t
  for t in cudaengine transport loader; do
    step "$t suite"
    [ -x "$d/$t.test" ] || { fail "no $t.test"; continue; }
    (cd ${t/cudaengine/engine\/cudaengine} && timeout 200 "$OLDPWD/$d/$t.test" -test.count 1 2>&1 | tail -3) || fail $t
  done
}
ab_setup() {
  local log=$1
  D=$2 BASE=$3
  OUT=${OUT:-/tmp/out}
  K=$OUT/kernels
  mkdir -p "$OUT"
  exec > >(tee -a "$OUT/$log") 2>&1
}
