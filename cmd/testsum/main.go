// Command testsum reads `go test -json` on standard input, prints what
// `go test` would (package results, and the whole output of every test
// that failed), and ends with one line of what ran: tests passed, skipped
// (grouped by the reason each skip gave) and failed. make test writes that
// line to .dev/status/go, so that the summary says why anything skipped.
//
//	go test -json ./... | testsum [-status FILE]
//
// It exits 1 when a test or a package failed, or when the input holds no
// test at all.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// event is one line of `go test -json` (test2json's TestEvent).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// summary counts a run's tests and keeps the skips' reasons.
type summary struct {
	passed, failed int
	skips          map[string]int // reason -> tests
	pkgFailed      bool
	// pkgFailures names the packages that failed (a test's failure, or
	// one of their own: a build error, a panic, an interrupt).
	pkgFailures []string
}

// location is the "file.go:12: " a test's log line starts with.
var location = regexp.MustCompile(`^\s*[\w./-]+\.go:\d+: `)

// read copies what go test would print to out and returns the counts.
func read(in io.Reader, out io.Writer) (*summary, error) {
	s := &summary{skips: map[string]int{}}
	logs := map[string][]string{} // package/test -> its output so far
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// go test prints build failures as plain text.
			fmt.Fprintln(out, sc.Text())
			continue
		}
		key := e.Package + "/" + e.Test
		switch {
		case e.Test == "" && (e.Action == "output" || e.Action == "build-output"):
			if e.Output != "PASS\n" { // go test prints it only with -v
				fmt.Fprint(out, e.Output)
			}
		case e.Test == "" && (e.Action == "fail" || e.Action == "build-fail"):
			s.pkgFailed = true
			if !slices.Contains(s.pkgFailures, e.Package) {
				s.pkgFailures = append(s.pkgFailures, e.Package)
			}
		case e.Test == "":
			// A package's start, pass or skip (no test files).
		case e.Action == "output":
			logs[key] = append(logs[key], e.Output)
		case e.Action == "pass":
			s.passed++
			delete(logs, key)
		case e.Action == "skip":
			s.skips[reason(logs[key])]++
			delete(logs, key)
		case e.Action == "fail":
			s.failed++
			fmt.Fprint(out, strings.Join(logs[key], ""))
			delete(logs, key)
		}
	}
	return s, sc.Err()
}

// reason is the first line a skipped test logged, without its location.
func reason(lines []string) string {
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") {
			continue
		}
		t = strings.TrimSpace(location.ReplaceAllString(l, ""))
		if len(t) > 140 {
			t = t[:140] + "..."
		}
		return t
	}
	return "(no reason given)"
}

// String is the line of what ran.
func (s *summary) String() string {
	n := 0
	var rs []string
	for r, k := range s.skips {
		n += k
		rs = append(rs, r)
	}
	sort.Slice(rs, func(i, j int) bool {
		if s.skips[rs[i]] != s.skips[rs[j]] {
			return s.skips[rs[i]] > s.skips[rs[j]]
		}
		return rs[i] < rs[j]
	})
	line := fmt.Sprintf("go: %d tests and subtests passed, %d failed, %d skipped", s.passed, s.failed, n)
	if len(s.pkgFailures) > 0 {
		// A package can fail with no test failing (a build error, an
		// interrupted run): the line says so rather than "0 failed" alone.
		what := "packages"
		if len(s.pkgFailures) == 1 {
			what = "package"
		}
		line += fmt.Sprintf("; %d %s failed: %s", len(s.pkgFailures), what, strings.Join(s.pkgFailures, ", "))
	}
	if n == 0 {
		return line
	}
	var b strings.Builder
	b.WriteString(line + ":")
	for _, r := range rs {
		fmt.Fprintf(&b, "\n  %d: %s", s.skips[r], r)
	}
	return b.String()
}

func main() {
	status := flag.String("status", "", "also write the line of what ran to this file")
	flag.Parse()
	s, err := read(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsum:", err)
		os.Exit(1)
	}
	fmt.Println(s)
	if *status != "" {
		if err := os.WriteFile(*status, []byte(s.String()+"\n"), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "testsum:", err)
			os.Exit(1)
		}
	}
	if s.failed > 0 || s.pkgFailed || s.passed == 0 {
		os.Exit(1)
	}
}
