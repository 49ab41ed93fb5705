package main

import (
	"bytes"
	"strings"
	"testing"
)

const run = `{"Action":"start","Package":"a"}
{"Action":"run","Package":"a","Test":"TestOK"}
{"Action":"output","Package":"a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"pass","Package":"a","Test":"TestOK"}
{"Action":"run","Package":"a","Test":"TestGPU"}
{"Action":"output","Package":"a","Test":"TestGPU","Output":"=== RUN   TestGPU\n"}
{"Action":"output","Package":"a","Test":"TestGPU","Output":"    gpu_test.go:12: no GPU: none here\n"}
{"Action":"output","Package":"a","Test":"TestGPU","Output":"--- SKIP: TestGPU (0.00s)\n"}
{"Action":"skip","Package":"a","Test":"TestGPU"}
{"Action":"output","Package":"b","Test":"TestGPU2","Output":"    x_test.go:3: no GPU: none here\n"}
{"Action":"skip","Package":"b","Test":"TestGPU2"}
{"Action":"output","Package":"b","Test":"TestLarge","Output":"    y_test.go:9: set SPLITZIP_LARGE=1\n"}
{"Action":"skip","Package":"b","Test":"TestLarge"}
{"Action":"output","Package":"a","Output":"ok  \ta\t0.1s\n"}
{"Action":"pass","Package":"a"}
`

// TestRead: counts, skips grouped by reason (most first), package lines
// passed through.
func TestRead(t *testing.T) {
	var out bytes.Buffer
	s, err := read(strings.NewReader(run), &out)
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != "ok  \ta\t0.1s\n" {
		t.Errorf("printed %q", out.String())
	}
	want := "go: 1 tests and subtests passed, 0 failed, 3 skipped:\n  2: no GPU: none here\n  1: set SPLITZIP_LARGE=1"
	if got := s.String(); got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
	if s.failed != 0 || s.pkgFailed {
		t.Errorf("failed %d, package failed %v", s.failed, s.pkgFailed)
	}
}

// TestReadFailures: a failing test's output is printed; a build failure
// and plain-text lines count as a failed package.
func TestReadFailures(t *testing.T) {
	in := `{"Action":"output","Package":"a","Test":"TestBad","Output":"    a_test.go:5: got 2\n"}
{"Action":"fail","Package":"a","Test":"TestBad"}
{"Action":"build-output","Package":"c","Output":"c.go:1: syntax error\n"}
{"Action":"build-fail","Package":"c"}
# plain text
`
	var out bytes.Buffer
	s, err := read(strings.NewReader(in), &out)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"a_test.go:5: got 2", "c.go:1: syntax error", "# plain text"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output %q lacks %q", out.String(), w)
		}
	}
	if s.failed != 1 || !s.pkgFailed || !strings.Contains(s.String(), "; 1 package failed: c") {
		t.Errorf("failed %d, package failed %v: %q", s.failed, s.pkgFailed, s.String())
	}
}
