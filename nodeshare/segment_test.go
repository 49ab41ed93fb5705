//go:build linux

package nodeshare

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A child process (this test binary run again with NODESHARE_CHILD set)
// opens a segment, prints what it found and, told to hold, keeps it open
// until its standard input closes.
func TestMain(m *testing.M) {
	if os.Getenv("NODESHARE_CHILD") != "" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

type childReport struct {
	Info
	Sum    uint32
	Filled bool
	Err    string
}

func child() int {
	dir, id := os.Getenv("NODESHARE_DIR"), os.Getenv("NODESHARE_ID")
	size, _ := strconv.ParseUint(os.Getenv("NODESHARE_SIZE"), 10, 64)
	fillByte, _ := strconv.Atoi(os.Getenv("NODESHARE_FILL"))
	var r childReport
	s, err := Open(id, size, func(b []byte) error {
		r.Filled = true
		time.Sleep(50 * time.Millisecond) // others arrive while it fills
		pattern(b, byte(fillByte))
		return nil
	}, Options{Dir: dir})
	if err != nil {
		r.Err = err.Error()
	} else {
		r.Info, r.Sum = s.Info(), crc32.ChecksumIEEE(s.Bytes())
	}
	json.NewEncoder(os.Stdout).Encode(r)
	if os.Getenv("NODESHARE_HOLD") != "" {
		io.Copy(io.Discard, os.Stdin)
	}
	if s != nil {
		if err := s.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// pattern fills b with bytes that depend on their offset and on seed.
func pattern(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
}

// proc is a running child.
type proc struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Reader
	first childReport
}

// start runs a child on dir and id that holds its segment (hold) or
// exits after reporting, and returns once it has reported.
func start(t *testing.T, dir, id string, size uint64, fill byte, hold bool) *proc {
	t.Helper()
	p := startAsync(t, dir, id, size, fill, hold)
	p.report(t)
	return p
}

func startAsync(t *testing.T, dir, id string, size uint64, fill byte, hold bool) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "NODESHARE_CHILD=1", "NODESHARE_DIR="+dir, "NODESHARE_ID="+id,
		fmt.Sprintf("NODESHARE_SIZE=%d", size), fmt.Sprintf("NODESHARE_FILL=%d", fill))
	if hold {
		cmd.Env = append(cmd.Env, "NODESHARE_HOLD=1")
	}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, in: in, out: bufio.NewReader(out)}
	t.Cleanup(func() { p.cmd.Process.Kill(); p.cmd.Wait() })
	return p
}

func (p *proc) report(t *testing.T) childReport {
	t.Helper()
	line, err := p.out.ReadBytes('\n')
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if err := json.Unmarshal(line, &p.first); err != nil {
		t.Fatalf("child said %q: %v", line, err)
	}
	if p.first.Err != "" {
		t.Fatalf("child: %s", p.first.Err)
	}
	return p.first
}

// stop closes the child's input and waits for it to exit cleanly.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	p.in.Close()
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
}

func sumOf(size uint64, fill byte) uint32 {
	b := make([]byte, size)
	pattern(b, fill)
	return crc32.ChecksumIEEE(b)
}

func noFill(t *testing.T) func([]byte) error {
	return func([]byte) error {
		t.Error("filled a segment a live process holds")
		return errors.New("unexpected fill")
	}
}

func TestAttachToLiveHolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "share")
	const id, size = "model-a", 300001
	c := start(t, dir, id, size, 1, true)
	if !c.first.Made || c.first.Holders != 1 || c.first.Sum != sumOf(size, 1) {
		t.Fatalf("maker: %+v", c.first)
	}
	s, err := Open(id, size, noFill(t), Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if in := s.Info(); in.Made || in.Holders != 2 || in.Bytes != size {
		t.Fatalf("attached: %+v", in)
	}
	if crc32.ChecksumIEEE(s.Bytes()) != sumOf(size, 1) {
		t.Fatal("attached bytes differ from the maker's")
	}
	// The maker leaves; this process keeps the memory and is the holder
	// a third process attaches to.
	c.stop(t)
	c2 := start(t, dir, id, size, 9, false)
	if c2.first.Made || c2.first.Holders != 2 || c2.first.Sum != sumOf(size, 1) {
		t.Fatalf("third process: %+v", c2.first)
	}
	c2.stop(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // twice: nothing more
		t.Fatal(err)
	}
	// No holder is left: the files are gone and the next open makes it anew.
	for _, f := range []string{id + ".holders", id + ".lock"} {
		if _, err := os.Stat(filepath.Join(dir, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after the last close: %v", f, err)
		}
	}
	c3 := start(t, dir, id, size, 2, false)
	if !c3.first.Made || c3.first.Sum != sumOf(size, 2) {
		t.Fatalf("after the last holder left: %+v", c3.first)
	}
	c3.stop(t)
}

// A holder killed mid-run leaves a stale line; the memory goes with the
// last process holding it, and the next open makes the segment again.
func TestCrashedHolders(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "share")
	const id, size = "crash", 1 << 20
	c := start(t, dir, id, size, 3, true)
	s, err := Open(id, size, noFill(t), Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	c.cmd.Process.Kill()
	c.cmd.Wait()
	if crc32.ChecksumIEEE(s.Bytes()) != sumOf(size, 3) {
		t.Fatal("bytes changed after their maker died")
	}
	// A process that crashes while attached leaves its line too.
	c2 := start(t, dir, id, size, 0, true)
	if c2.first.Made || c2.first.Holders != 2 {
		t.Fatalf("attach after the maker died: %+v (its line should be dropped)", c2.first)
	}
	c2.cmd.Process.Kill()
	c2.cmd.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, id+".holders")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("holders file left with only dead holders: %v", err)
	}
	// Every process is gone: a new one fills (its memory is the kernel's
	// to free, nothing of the old one is reachable).
	s2, err := Open(id, size, func(b []byte) error { pattern(b, 4); return nil }, Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !s2.Info().Made || crc32.ChecksumIEEE(s2.Bytes()) != sumOf(size, 4) {
		t.Fatalf("after every holder died: %+v", s2.Info())
	}
	s2.Close()
}

// Processes that start together make one copy.
func TestConcurrentOpens(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "share")
	const id, size = "race", 256 << 10
	var ps []*proc
	for i := range 4 {
		ps = append(ps, startAsync(t, dir, id, size, byte(10+i), true))
	}
	made, sums := 0, map[uint32]bool{}
	for _, p := range ps {
		r := p.report(t)
		if r.Made {
			made++
		}
		if r.Made != r.Filled {
			t.Errorf("made %v, filled %v", r.Made, r.Filled)
		}
		sums[r.Sum] = true
	}
	if made != 1 || len(sums) != 1 {
		t.Fatalf("%d processes made the segment, %d different contents", made, len(sums))
	}
	for _, p := range ps {
		p.stop(t)
	}
}

func TestFillFailsLeavesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "share")
	boom := errors.New("disk read failed")
	if _, err := Open("f", 4096, func([]byte) error { return boom }, Options{Dir: dir}); !errors.Is(err, boom) {
		t.Fatalf("got %v, want the fill's error", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "f.holders")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("holders file after a failed fill: %v", err)
	}
	s, err := Open("f", 4096, func(b []byte) error { pattern(b, 5); return nil }, Options{Dir: dir})
	if err != nil || !s.Info().Made {
		t.Fatalf("open after a failed fill: %v", err)
	}
	s.Close()
}

// A published segment cannot be written: not through another descriptor
// (the seal), not through the mapping (read-only).
func TestSealed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "share")
	s, err := Open("sealed", 8192, func(b []byte) error { pattern(b, 6); return nil }, Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", s.m.fd), unix.O_RDWR, 0)
	if err == nil {
		_, err = unix.Pwrite(fd, []byte{1}, headerBytes)
		unix.Close(fd)
	}
	if err == nil {
		t.Fatal("wrote into a sealed segment")
	}
	if unix.Ftruncate(s.m.fd, 0) == nil {
		t.Fatal("shrank a sealed segment")
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("wrote through the read-only mapping")
			}
		}()
		s.Bytes()[0] = 1
	}()
	if crc32.ChecksumIEEE(s.Bytes()) != sumOf(8192, 6) {
		t.Fatal("bytes changed")
	}
}

// Opens in one process share one mapping, pinned once and unpinned at the
// last close; another size for the same id is refused.
func TestInProcess(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "share")
	var mu sync.Mutex
	pins, unpins := 0, 0
	o := Options{Dir: dir,
		Pin:   func([]byte) error { mu.Lock(); pins++; mu.Unlock(); return nil },
		Unpin: func([]byte) error { mu.Lock(); unpins++; mu.Unlock(); return nil }}
	fills := 0
	fill := func(b []byte) error { fills++; pattern(b, 7); return nil }
	a, err := Open("p", 65536, fill, o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open("p", 65536, fill, o)
	if err != nil {
		t.Fatal(err)
	}
	if &a.Bytes()[0] != &b.Bytes()[0] || fills != 1 || pins != 1 {
		t.Fatalf("two opens: %d fills, %d pins, same mapping %v", fills, pins, &a.Bytes()[0] == &b.Bytes()[0])
	}
	if _, err := Open("p", 4096, fill, o); !errors.Is(err, ErrSize) {
		t.Fatalf("another size: %v", err)
	}
	a.Close()
	if unpins != 0 {
		t.Fatal("unpinned while open")
	}
	b.Close()
	if unpins != 1 {
		t.Fatalf("%d unpins after the last close", unpins)
	}
}

func TestPinFailure(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "share")
	boom := errors.New("no pinning")
	_, err := Open("pf", 4096, func(b []byte) error { return nil }, Options{Dir: dir, Pin: func([]byte) error { return boom }})
	if !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "pf.holders")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("holders file after a failed pin: %v", err)
	}
}

func TestBadIDAndDir(t *testing.T) {
	for _, id := range []string{"", "../x", "a/b", string(make([]byte, 129))} {
		if _, err := Open(id, 1, nil, Options{Dir: t.TempDir()}); !errors.Is(err, ErrID) {
			t.Errorf("id %q: %v", id, err)
		}
	}
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Open("x", 1, func([]byte) error { return nil }, Options{Dir: open}); !errors.Is(err, ErrDir) {
		t.Fatalf("a folder others may write: %v", err)
	}
}

// A holders file naming descriptors that are not segments (a pid reused,
// a pipe, garbage) is read past, not trusted.
func TestStaleHolderLines(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "share")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	lines := fmt.Sprintf("%d %d\n%d 0\nnot a line\n999999999 3\n%d %d\n", os.Getpid(), r.Fd(), os.Getpid(), os.Getpid(), w.Fd())
	if err := os.WriteFile(filepath.Join(dir, "st.holders"), []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open("st", 4096, func(b []byte) error { pattern(b, 8); return nil }, Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if in := s.Info(); !in.Made || in.Holders != 1 {
		t.Fatalf("%+v", in)
	}
	s.Close()
}
