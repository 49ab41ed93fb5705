package pipeline

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splitzip/splitzip/checkpoint"
	"github.com/splitzip/splitzip/shardcache"
)

// truncatingProgress truncates a file to size the first time compress
// reports progress, which it does in the middle of a tensor's second pass:
// another process rewriting a shard while compress reads it.
type truncatingProgress struct {
	once sync.Once
	path string
	size int64
	err  error
}

func (p *truncatingProgress) Start(string, uint64) {}
func (p *truncatingProgress) Finish()              {}
func (p *truncatingProgress) Add(uint64) {
	p.once.Do(func() { p.err = os.Truncate(p.path, p.size) })
}

// TestCompressSourceShrinks: a shard truncated while compress reads it is
// an error that names the file and says the source changed (not a memory
// fault, which kills the test binary), and the failed run leaves nothing
// that verify accepts and no object files behind.
func TestCompressSourceShrinks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		codec string
		keep  func(dataStart, size int64) int64 // bytes left after the truncation
	}{
		{"fixed, data gone", CodecFixed, func(d, _ int64) int64 { return d }},
		{"fixed, half left", CodecFixed, func(d, n int64) int64 { return d + (n-d)/2 }},
		{"entropy, data gone", CodecEntropy, func(d, _ int64) int64 { return d }},
		{"self-contained raw, one byte short", "raw", func(_, n int64) int64 { return n - 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src, cache := filepath.Join(dir, "src"), filepath.Join(dir, "cache")
			gen(t, src, 24<<20, 1, 7)
			p := filepath.Join(src, "model.safetensors")
			ck, err := checkpoint.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			sh := ck.Shards[0]
			prog := &truncatingProgress{path: p, size: tc.keep(int64(sh.Header.DataStart), int64(sh.Size))}
			opts := CompressOptions{Output: cache, Jobs: 2, Codec: tc.codec, NoSync: true, Progress: prog}
			if tc.codec == "raw" {
				// Nothing passes the gate: every tensor is read by the
				// raw copy, which hashes it again.
				opts.Codec, opts.MinSaving, opts.SelfContained = CodecFixed, 0.99, true
			}
			_, err = Compress(context.Background(), src, opts)
			if prog.err != nil {
				t.Fatal(prog.err)
			}
			if err == nil {
				t.Fatal("compress of a shard truncated while read succeeded")
			}
			t.Logf("error: %v", err)
			if !errors.Is(err, shardcache.ErrSourceChanged) {
				t.Errorf("error does not say the source changed: %v", err)
			}
			if !strings.Contains(err.Error(), p) {
				t.Errorf("error does not name %s: %v", p, err)
			}
			if _, err := Verify(context.Background(), cache, VerifyOptions{}); err == nil {
				t.Error("verify accepted the cache of the failed compress")
			}
			filepath.WalkDir(filepath.Join(cache, "objects"), func(q string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					t.Errorf("failed compress left %s", q)
				}
				return nil
			})
		})
	}
}

// TestCompressSourceShrinksProcess: a shard that another process
// truncates while compress reads it ends a compress process with an error
// naming the file, not a fault trace (exit status 2). The compress runs in
// a child process, which stops at its first progress report until this
// one has truncated the shard.
func TestCompressSourceShrinksProcess(t *testing.T) {
	if src := os.Getenv("SPLITZIP_TEST_SHRINK_SOURCE"); src != "" {
		shrinkChild(src, os.Getenv("SPLITZIP_TEST_SHRINK_CACHE"))
		return
	}
	dir := t.TempDir()
	src, cache := filepath.Join(dir, "src"), filepath.Join(dir, "cache")
	gen(t, src, 24<<20, 1, 11)
	p := filepath.Join(src, "model.safetensors")
	ck, err := checkpoint.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCompressSourceShrinksProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SPLITZIP_TEST_SHRINK_SOURCE="+src, "SPLITZIP_TEST_SHRINK_CACHE="+cache)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
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
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "reading\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child said %q (%v); stderr: %s", line, err, stderr.String())
	}
	if err := os.Truncate(p, int64(ck.Shards[0].Header.DataStart)); err != nil {
		t.Fatal(err)
	}
	in.Write([]byte("go\n"))
	in.Close()
	err = cmd.Wait()
	msg := stderr.String()
	t.Logf("child: %v; stderr: %s", err, msg)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("child ended with %v, want exit status 1 (an error)", err)
	}
	if strings.Contains(msg, "fault") || strings.Contains(msg, "goroutine ") || !strings.Contains(msg, p) || !strings.Contains(msg, shardcache.ErrSourceChanged.Error()) {
		t.Errorf("stderr is not one error naming %s and saying the source changed: %s", p, msg)
	}
}

// shrinkChild is the child process of TestCompressSourceShrinksProcess:
// it compresses src into cache, says "reading" on stdout at its first
// progress report and waits for a line on stdin before it goes on, and
// exits 1 with the error on stderr if the compress fails.
func shrinkChild(src, cache string) {
	var once sync.Once
	prog := progressFunc(func() {
		once.Do(func() {
			fmt.Println("reading")
			bufio.NewReader(os.Stdin).ReadString('\n')
		})
	})
	_, err := Compress(context.Background(), src, CompressOptions{Output: cache, Jobs: 2, NoSync: true, Progress: prog})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// progressFunc is a Progress that calls itself on every Add.
type progressFunc func()

func (progressFunc) Start(string, uint64) {}
func (progressFunc) Finish()              {}
func (f progressFunc) Add(uint64)         { f() }

// TestCompressSourceChangedBeforeRead: a shard rewritten between the
// reading of its header and the reading of its tensors is an error naming
// it, caught before a tensor is read.
func TestCompressSourceChangedBeforeRead(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	gen(t, src, 2<<20, 1, 3)
	p := filepath.Join(src, "model.safetensors")
	ck, err := checkpoint.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	sh := ck.Shards[0]
	// Same size, later modification time: rewritten in place.
	later := sh.ModTime.Add(time.Second)
	if err := os.Chtimes(p, later, later); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = openSource(f, sh)
	if !errors.Is(err, shardcache.ErrSourceChanged) || !strings.Contains(err.Error(), p) {
		t.Errorf("source rewritten after its header was read: %v", err)
	}
}

// TestSourceReader: the reader serves every byte of a range, in segments,
// the same on every pass; a range past the end of the file is
// ErrSourceChanged, never a short piece.
func TestSourceReader(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	data := make([]byte, 3*segmentBytes+123)
	for i := range data {
		data[i] = byte(i*7 + i>>11)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	src := &source{f: f, size: uint64(len(data))}
	for _, r := range []struct{ begin, end uint64 }{
		{0, 0}, {0, 1}, {5, segmentBytes + 5}, {10, segmentBytes}, {0, uint64(len(data))}, {segmentBytes - 1, 2*segmentBytes + 1},
	} {
		rd := src.reader()
		for pass := range 3 {
			var got []byte
			err := rd.segments(r.begin, r.end, func(seg []byte) error {
				if len(seg) > segmentBytes {
					t.Errorf("[%d, %d): a piece of %d bytes", r.begin, r.end, len(seg))
				}
				got = append(got, seg...)
				return nil
			})
			if err != nil || string(got) != string(data[r.begin:r.end]) {
				t.Errorf("[%d, %d) pass %d: %d bytes, err %v", r.begin, r.end, pass, len(got), err)
			}
		}
		rd.close()
	}
	for _, r := range []struct{ begin, end uint64 }{
		{0, uint64(len(data)) + 1}, {uint64(len(data)), uint64(len(data)) + 1}, {segmentBytes, 5 * segmentBytes},
	} {
		rd := src.reader()
		err := rd.segments(r.begin, r.end, func([]byte) error { return nil })
		rd.close()
		if !errors.Is(err, shardcache.ErrSourceChanged) || !strings.Contains(err.Error(), "the tensor runs to byte") {
			t.Errorf("[%d, %d) of a %d-byte file: %v", r.begin, r.end, len(data), err)
		}
	}
}
