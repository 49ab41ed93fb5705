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
)

// env carries, to the child, the limit in bytes.
const env = "SPLITZIP_TEST_FSIZE_LIMIT"

// Run runs fn with the files of the process limited to limit bytes each.
// In the test process it runs the test binary again for t's test alone,
// with the limit in the environment, and fails t with the child's output
// when the child's test fails; it does not call fn. In that child it sets
// the limit, calls fn, and lifts the limit again. What a test does before
// Run runs in both processes (it prepares what fn writes to); its checks
// after Run must run in the child only: a test returns after Run unless
// Limited reports true.
func Run(t *testing.T, limit uint64, fn func()) {
	t.Helper()
	if v := os.Getenv(env); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", env, v, err)
		}
		withLimit(t, n, fn)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^"+regexp.QuoteMeta(t.Name())+"$", "-test.count", "1", "-test.v")
	cmd.Env = append(os.Environ(), env+"="+strconv.FormatUint(limit, 10))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the test with files limited to %d bytes, in a child process: %v\n%s", limit, err, out)
	}
	if !regexp.MustCompile(`(?m)^\s*--- PASS: ` + regexp.QuoteMeta(t.Name()) + ` `).Match(out) {
		t.Fatalf("the child process did not run %s:\n%s", t.Name(), out)
	}
}

// Limited reports whether this process is the child Run starts: the one
// in which fn ran, and whose results a test checks after Run.
func Limited() bool { return os.Getenv(env) != "" }

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
