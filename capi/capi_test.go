package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/splitzip/splitzip/checkpoint"
	"github.com/splitzip/splitzip/internal/cachetest"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/loader"
	"github.com/splitzip/splitzip/nodeshare"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/shardcache"
)

// build compiles libsplitzip.so and a C program against it.
func build(t *testing.T, dir, program string) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc: the C ABI test needs a C compiler")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to build the library")
	}
	lib := filepath.Join(dir, "libsplitzip.so")
	if out, err := exec.Command(goBin, "build", "-buildmode=c-shared", "-o", lib, ".").CombinedOutput(); err != nil {
		t.Fatalf("building the library: %v\n%s", err, out)
	}
	exe := filepath.Join(dir, strings.TrimSuffix(filepath.Base(program), ".c"))
	cmd := exec.Command("gcc", "-Wall", "-Wextra", "-Werror", "-std=c99", "-o", exe, program, "-I.", "-L"+dir, "-lsplitzip", "-lpthread")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("compiling %s: %v\n%s", program, err, out)
	}
	return exe
}

func fixture(t *testing.T, dir string) (src, cache string) {
	t.Helper()
	src, cache = filepath.Join(dir, "ck"), filepath.Join(dir, "cache")
	if _, err := synth.Write(context.Background(), src, synth.Config{Bytes: 3 << 20, Shards: 2, Seed: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := pipeline.Compress(context.Background(), src, pipeline.CompressOptions{Output: cache, Jobs: 2, MinSaving: 0.03, NoSync: true}); err != nil {
		t.Fatal(err)
	}
	return src, cache
}

func run(t *testing.T, exe, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", filepath.Base(exe), err, out)
	}
	return string(out)
}

// TestCLoader runs examples/c/loader.c and checks every tensor's bytes
// against the source checkpoint.
func TestCLoader(t *testing.T) {
	dir := t.TempDir()
	exe := build(t, dir, filepath.Join("..", "examples", "c", "loader.c"))
	src, cache := fixture(t, dir)
	out := run(t, exe, dir, cache)

	want := map[string]string{}
	ck, err := checkpoint.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	compressed := 0
	for _, s := range ck.Shards {
		b, _ := os.ReadFile(s.Path)
		for _, tn := range s.Header.Tensors {
			h := fnv.New64a()
			h.Write(b[tn.Begin:tn.End])
			want[tn.Name] = fmt.Sprintf("%s %d %016x", tn.DType, tn.Size(), h.Sum64())
		}
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	got := 0
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 5 {
			t.Fatalf("bad line %q", sc.Text())
		}
		if w := want[f[0]]; w != strings.Join(f[1:4], " ") {
			t.Errorf("%s: C loader read %v, source has %s", f[0], f[1:4], w)
		}
		if f[4] == "1" {
			compressed++
		}
		got++
	}
	if got != len(want) || compressed == 0 {
		t.Errorf("C loader listed %d tensors (%d compressed), the checkpoint has %d", got, compressed, len(want))
	}
}

func TestCThreads(t *testing.T) {
	dir := t.TempDir()
	exe := build(t, dir, filepath.Join("testdata", "threads.c"))
	_, cache := fixture(t, dir)
	if out := run(t, exe, dir, cache); !strings.Contains(out, "identical") {
		t.Errorf("threads: %s", out)
	}
}

// TestCParts: row parts and layer packs through the C ABI (no GPU).
func TestCParts(t *testing.T) {
	dir := t.TempDir()
	exe := build(t, dir, filepath.Join("testdata", "parts.c"))
	_, cache := fixture(t, dir)
	out := run(t, exe, dir, cache)
	if !strings.HasPrefix(out, "ok") {
		t.Errorf("parts: %s", out)
	}
	t.Log(strings.TrimSpace(out))
}

func TestErrorsAreCodes(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "bad.c")
	os.WriteFile(prog, []byte(`#include <stdio.h>
#include <string.h>
#include "splitzip.h"
int main(int argc, char **argv) {
    char err[256] = {0};
    uintptr_t h = 0;
    (void)argc;
    if (sz_open(argv[1], NULL, &h, err, sizeof err) != SZ_ERR_IO || strlen(err) == 0) return 1;
    if (sz_open(NULL, NULL, &h, err, sizeof err) != SZ_ERR_INVALID) return 2;
    if (sz_open(argv[2], "/no/such/source", &h, err, sizeof err) != SZ_ERR_NOT_FOUND) return 3;
    /* A checkpoint folder is no cache: a wrong argument, not corrupt data. */
    if (sz_open(argv[3], NULL, &h, err, sizeof err) != SZ_ERR_INVALID || strstr(err, "not a splitzip cache") == NULL) return 20;
    if (sz_open(argv[2], NULL, &h, err, sizeof err) != SZ_OK) return 4;
    uint64_t i;
    if (sz_find_name(h, "no.such.tensor", &i) != SZ_ERR_NOT_FOUND) return 5;
    if (sz_find_name(h, NULL, &i) != SZ_ERR_INVALID) return 6;
    if (sz_find_name(h, "model.embed_tokens.weight", &i) != SZ_OK) return 7;
    sz_tensor t;
    sz_info(h, i, &t, NULL, 0);
    char small[4];
    if (sz_read_host(h, i, small, sizeof small) != SZ_ERR_TOO_SMALL) return 8;
    if (sz_last_error(h, err, sizeof err) != SZ_OK || strstr(err, "model.embed_tokens.weight") == NULL) return 9;
    if (sz_find_slice(h, "/any/dir/model-00001-of-00002.safetensors", t.offset, t.nbytes, &i) != SZ_OK) return 10;
    if (sz_set_resident(h, 1) != SZ_OK) return 30;
    if (sz_set_resident(0, 1) != SZ_ERR_INVALID) return 31;
    /* Batch arguments are checked before any device is touched. */
    uintptr_t ev = 0;
    uint64_t idx[2] = {i, 1u << 30}, dst[2] = {4096, 8192}, cap[2] = {t.nbytes, 1 << 20};
    if (sz_upload_batch(h, 2, idx, 0, dst, cap, 0, &ev) != SZ_ERR_INVALID) return 12;
    idx[1] = i;
    cap[1] = t.nbytes - 1;
    if (sz_upload_batch(h, 2, idx, 0, dst, cap, 0, &ev) != SZ_ERR_TOO_SMALL) return 13;
    dst[1] = 0;
    cap[1] = t.nbytes;
    if (sz_upload_batch(h, 2, idx, 0, dst, cap, 0, &ev) != SZ_ERR_INVALID) return 14;
    dst[1] = 8200; /* compressed tensors need 16-byte aligned destinations */
    if (sz_upload_batch(h, 2, idx, 0, dst, cap, 0, &ev) != SZ_ERR_INVALID) return 15;
    if (sz_upload_batch(h, 2, NULL, 0, dst, cap, 0, &ev) != SZ_ERR_INVALID) return 16;
    if (sz_upload_batch(h, 1, idx, 0, dst, cap, 0, NULL) != SZ_ERR_INVALID) return 17;
    if (sz_upload_batch(h, (uint64_t)1 << 40, idx, 0, dst, cap, 0, &ev) != SZ_ERR_INVALID) return 18;
    if (sz_event_wait(h, 12345) != SZ_ERR_INVALID || sz_event_release(h, 12345) != SZ_ERR_INVALID) return 19;
    printf("ok\n");
    return sz_close(h) == SZ_OK ? 0 : 11;
}
`), 0o644)
	exe := build(t, dir, prog)
	src, cache := fixture(t, dir)
	if out := run(t, exe, dir, filepath.Join(dir, "nope"), cache, src); !bytes.Contains([]byte(out), []byte("ok")) {
		t.Errorf("bad-input program: %s", out)
	}
}

// TestLastErrorFile: sz_last_error_file names the object file of a
// payload that fails its checksum (its pack's, where it is a member of
// one), and no file for a failure about none (testdata/errfile.c).
func TestLastErrorFile(t *testing.T) {
	dir := t.TempDir()
	exe := build(t, dir, filepath.Join("testdata", "errfile.c"))
	_, cache := fixture(t, dir)
	l, err := loader.Open(cache, "")
	if err != nil {
		t.Fatal(err)
	}
	var victim *loader.Tensor
	for i := range l.Tensors() {
		if tn := &l.Tensors()[i]; tn.Compressed {
			victim = tn
			break
		}
	}
	l.Close()
	if victim == nil {
		t.Fatal("no fixed payload in the fixture")
	}
	c, err := shardcache.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	loc, _, err := c.Locate(victim.Key)
	if err != nil {
		t.Fatal(err)
	}
	cachetest.Flip(t, c, victim.Key, int64(victim.Stored)/2, 0x40)
	if got := strings.TrimSpace(run(t, exe, dir, cache, victim.Name)); got != loc.Path {
		t.Errorf("sz_last_error_file after %s failed its checksum: %q, want %q", victim.Name, got, loc.Path)
	}
}

// TestShareDirEnv: sz_set_shared reads the variable that package
// nodeshare names.
func TestShareDirEnv(t *testing.T) {
	if shareDirEnvName != nodeshare.DirEnv {
		t.Fatalf("sz_set_shared reads %s, nodeshare %s", shareDirEnvName, nodeshare.DirEnv)
	}
}

// TestNamesWithNUL: a tensor name holding a NUL character (safetensors
// allows it) is read whole by sz_name, with its length, and found by
// sz_find_name_len, apart from the tensor whose name is its first part;
// a buffer too small is SZ_ERR_TOO_SMALL with the length.
func TestNamesWithNUL(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "nul.c")
	os.WriteFile(prog, []byte(`#include <stdio.h>
#include <string.h>
#include "splitzip.h"
int main(int argc, char **argv) {
    char err[256] = {0}, name[64], small[3];
    uintptr_t h = 0;
    uint64_t n = 0, i, j;
    size_t len = 0;
    (void)argc;
    if (sz_open(argv[1], NULL, &h, err, sizeof err) != SZ_OK || sz_count(h, &n) != SZ_OK) return 1;
    for (i = 0; i < n; i++) {
        if (sz_name(h, i, NULL, 0, &len) != SZ_OK) return 2;
        if (sz_name(h, i, name, sizeof name, &len) != SZ_OK) return 3;
        if (sz_find_name_len(h, name, len, &j) != SZ_OK || j != i) return 4;
        printf("%llu:", (unsigned long long)i);
        for (size_t k = 0; k < len; k++) printf("%02x", (unsigned char)name[k]);
        printf("\n");
        if (len >= sizeof small && (sz_name(h, i, small, sizeof small, &len) != SZ_ERR_TOO_SMALL || small[0] != 0)) return 5;
    }
    if (sz_find_name_len(h, "a\0c", 3, &j) != SZ_ERR_NOT_FOUND) return 6;
    if (sz_find_name_len(h, NULL, 1, &j) != SZ_ERR_INVALID) return 7;
    if (sz_find_name_len(h, "a", (size_t)1 << 40, &j) != SZ_ERR_INVALID) return 9;
    if (sz_name(h, 0, NULL, 8, &len) != SZ_ERR_INVALID || sz_name(h, 0, NULL, 0, NULL) != SZ_ERR_INVALID) return 10;
    return sz_close(h) == SZ_OK ? 0 : 8;
}
`), 0o644)
	exe := build(t, dir, prog)
	src := filepath.Join(dir, "ck", "model.safetensors")
	os.MkdirAll(filepath.Dir(src), 0o755)
	header := `{"a\u0000b":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"a":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]}}`
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(append(b, header...), 1, 2, 3, 4, 5, 6, 7, 8)
	if err := os.WriteFile(src, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	if _, err := pipeline.Compress(context.Background(), src, pipeline.CompressOptions{Output: cache, Jobs: 1, MinSaving: 0.03, NoSync: true}); err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(run(t, exe, dir, cache))
	slices.Sort(got)
	// Names in hex: "a" (61) and "a\x00b" (610062), each at its own index.
	names := map[string]bool{}
	for _, g := range got {
		names[g[strings.Index(g, ":")+1:]] = true
	}
	if len(got) != 2 || !names["61"] || !names["610062"] {
		t.Errorf("names read: %q, want 61 and 610062", got)
	}
}
