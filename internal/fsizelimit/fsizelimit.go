// Package fsizelimit runs part of a test with the files of its process
// limited in size (RLIMIT_FSIZE), so that writes past the limit fail with
// EFBIG as they would on a full disk. The limit binds the whole process,
// the test framework's own files too (`go test` writes a test log while
// the tests run, and fails the run when that write fails), so the limited
// part runs in a child process: the test binary run again for that one
// test.
package fsizelimit

import (
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// env carries, to the child, the limit in bytes.
const env = "SPLITZIP_TEST_FSIZE_LIMIT"

// Run runs fn with the files of the process limited to limit bytes each,
// and reports whether it did: a test checks what fn did only when Run
// returns true.
//
// In the test process Run runs the test binary again for t's test alone
// (with -test.short and the time left to the test passed on), with the
// limit in the environment; it fails t with the child's output when the
// child's test fails, does not call fn, and returns false. In that child
// it sets the limit, calls fn, lifts the limit and returns true. What a
// test does before Run runs in both processes (it prepares what fn
// writes to).
func Run(t *testing.T, limit uint64, fn func()) bool {
	t.Helper()
	if v := os.Getenv(env); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", env, v, err)
		}
		withLimit(t, n, fn)
		return true
	}
	args := []string{"-test.run", "^" + regexp.QuoteMeta(t.Name()) + "$", "-test.count", "1", "-test.v"}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	if d, ok := t.Deadline(); ok {
		args = append(args, "-test.timeout", time.Until(d).Round(time.Second).String())
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], args...)
	cmd.Env = append(os.Environ(), env+"="+strconv.FormatUint(limit, 10))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the test with files limited to %d bytes, in a child process: %v\n%s", limit, err, out)
	}
	if !regexp.MustCompile(`(?m)^\s*--- PASS: ` + regexp.QuoteMeta(t.Name()) + ` `).Match(out) {
		t.Fatalf("the child process did not run %s:\n%s", t.Name(), out)
	}
	return false
}

// withLimit calls fn with the file size limit set to n bytes.
func withLimit(t *testing.T, n uint64, fn func()) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	// Past the limit a write fails with EFBIG instead of the process
	// being killed by SIGXFSZ.
	signal.Ignore(syscall.SIGXFSZ)
	defer signal.Reset(syscall.SIGXFSZ)
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: n, Max: old.Max}); err != nil {
		t.Fatal(err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old)
	fn()
}
