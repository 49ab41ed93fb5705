package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/shardcache"

	"lukechampine.com/blake3"
)

// goldenVersions are the cache formats under testdata/golden, each written
// by the release of its day from the source beside it (v1: index version
// 1, payload version 1, the build of 2026-11-29, ca8b28c; v2: index
// version 2, with packs, the build of 2026-12-01; v3: index version 3,
// entropy payloads of every float dtype beside SplitZip ones, the build of
// 2026-12-01 that added them; v3-szen2: the same with entropy payload
// version 2, a record per chunk; v4: index version 4, the binary index,
// from v3's source with the same flags, the build of 2026-12-03 that
// added it; v5: index version 5, the statistics in a section of their
// own, from the same source with the same flags, the build of 2026-12-04
// that added it).
var goldenVersions = []string{"v1", "v2", "v3", "v3-szen2", "v4", "v5"}

// copyTree copies a directory.
func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// relocate rewrites a copied golden cache's index so its source root is
// newRoot, recomputing the body checksum with its own code (the cache
// records absolute roots), and gives the copied source the recorded
// modification times (git does not keep them).
func relocate(t *testing.T, cache, newRoot string) {
	t.Helper()
	if v, err := shardcache.IndexFileVersion(cache); err != nil {
		t.Fatal(err)
	} else if v >= 4 {
		relocateBinary(t, cache, newRoot)
		return
	}
	path := filepath.Join(cache, shardcache.IndexName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var env map[string]json.RawMessage
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatal(err)
	}
	var body struct {
		Sources []map[string]json.RawMessage `json:"sources"`
	}
	json.Unmarshal(env["body"], &body)
	var old string
	json.Unmarshal(body.Sources[0]["root"], &old)
	var shards []struct {
		Name  string `json:"name"`
		MTime string `json:"mtime"`
	}
	json.Unmarshal(body.Sources[0]["shards"], &shards)
	oldRoot, _ := json.Marshal(old)
	nr, _ := json.Marshal(newRoot)
	var compact bytes.Buffer
	json.Compact(&compact, env["body"])
	nb := bytes.ReplaceAll(compact.Bytes(), append([]byte(`"root":`), oldRoot...), append([]byte(`"root":`), nr...))
	sum := sha256.Sum256(nb)
	env["body"] = nb
	env["body_sha256"], _ = json.Marshal(hex.EncodeToString(sum[:]))
	out, _ := json.Marshal(env)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, sh := range shards {
		mt, err := time.Parse(time.RFC3339Nano, sh.MTime)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(filepath.Join(newRoot, sh.Name), mt, mt); err != nil {
			t.Fatal(err)
		}
	}
}

// relocateBinary does relocate's work for a binary index (version 4 on):
// it rewrites the root in the body's string table (which every binary
// version begins with) and the header's body length and hash, and keeps
// the rest of the file (a version 5 index's statistics section) as it
// is, so that the cache stays of the version it was written in.
func relocateBinary(t *testing.T, cache, newRoot string) {
	t.Helper()
	c, err := shardcache.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	src := c.Index().Sources[0]
	for _, sh := range src.Shards {
		if err := os.Chtimes(filepath.Join(newRoot, sh.Name), sh.ModTime, sh.ModTime); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(cache, shardcache.IndexName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const header = 64
	end := header + int(binary.LittleEndian.Uint64(b[24:]))
	body := b[header:end]
	n, k := binary.Uvarint(body)
	nb := binary.AppendUvarint(nil, n)
	for range n {
		l, m := binary.Uvarint(body[k:])
		s := body[k+m : k+m+int(l)]
		k += m + int(l)
		if string(s) == src.Root {
			s = []byte(newRoot)
		}
		nb = binary.AppendUvarint(nb, uint64(len(s)))
		nb = append(nb, s...)
	}
	nb = append(nb, body[k:]...)
	out := append(append([]byte(nil), b[:header]...), nb...)
	binary.LittleEndian.PutUint64(out[24:], uint64(len(nb)))
	sum := blake3.Sum256(nb)
	copy(out[32:], sum[:])
	if err := os.WriteFile(path, append(out, b[end:]...), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestGoldenCaches: the current build opens every committed golden cache
// as written, verifies it, loads it on the CPU device with --check, and
// restores its source byte for byte.
func TestGoldenCaches(t *testing.T) {
	for _, v := range goldenVersions {
		t.Run(v, func(t *testing.T) {
			golden := filepath.Join("..", "..", "testdata", "golden", v)
			if _, err := shardcache.Open(filepath.Join(golden, "cache")); err != nil {
				t.Fatalf("open as committed: %v", err)
			}
			dir := t.TempDir()
			src, cache, out := filepath.Join(dir, "source"), filepath.Join(dir, "cache"), filepath.Join(dir, "out")
			copyTree(t, filepath.Join(golden, "source"), src)
			copyTree(t, filepath.Join(golden, "cache"), cache)
			want, err := shardcache.IndexFileVersion(cache)
			if err != nil {
				t.Fatal(err)
			}
			relocate(t, cache, src)
			// A binary index stays of its version (a JSON one, rewritten
			// with its body first, has its version past what
			// IndexFileVersion reads).
			if v, err := shardcache.IndexFileVersion(cache); want >= 4 && (err != nil || v != want) {
				t.Fatalf("relocated, the index is of version %d, %v; want %d", v, err, want)
			}
			if code, o, e := splitzip(t, "verify", cache); code != 0 || !strings.Contains(o, "verify ok") {
				t.Fatalf("verify: %d %s %s", code, o, e)
			}
			if code, o, e := splitzip(t, "load", cache, "--device", "cpu", "--check"); code != 0 {
				t.Fatalf("load --device cpu --check: %d %s %s", code, o, e)
			}
			if code, _, e := splitzip(t, "decompress", cache, "-o", out); code != 0 {
				t.Fatalf("decompress: %d %s", code, e)
			}
			sameFiles(t, src, out)
		})
	}
}

// TestGoldenStatsCorrupt: in the golden version 5 cache with a flipped
// byte in its index's statistics (which loads never read), inspect and
// verify fail naming the index file, a writer refuses the cache, and
// load and decompress serve it.
func TestGoldenStatsCorrupt(t *testing.T) {
	dir := t.TempDir()
	golden := filepath.Join("..", "..", "testdata", "golden", "v5")
	src, cache, out := filepath.Join(dir, "source"), filepath.Join(dir, "cache"), filepath.Join(dir, "out")
	copyTree(t, filepath.Join(golden, "source"), src)
	copyTree(t, filepath.Join(golden, "cache"), cache)
	relocate(t, cache, src)
	path := filepath.Join(cache, shardcache.IndexName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 1 // the last byte of the statistics' records
	os.WriteFile(path, b, 0o644)
	for _, args := range [][]string{{"inspect", cache}, {"verify", cache}, {"gc", cache}} {
		if code, o, e := splitzip(t, args...); code != exitFailure || !strings.Contains(o+e, path) || !strings.Contains(o+e, "statistics") {
			t.Errorf("%s: exit %d, %q %q; want %d naming %s", args[0], code, o, e, exitFailure, path)
		}
	}
	if code, o, e := splitzip(t, "load", cache, "--device", "cpu", "--check"); code != 0 {
		t.Errorf("load --device cpu --check: %d %s %s", code, o, e)
	}
	if code, _, e := splitzip(t, "decompress", cache, "-o", out); code != 0 {
		t.Fatalf("decompress: %d %s", code, e)
	}
	sameFiles(t, src, out)
}

// rewriteIndex edits a cache's index body with fn and recomputes its
// checksum with its own code, as a malicious or careless tool would.
func rewriteIndex(t *testing.T, cache string, fn func(body map[string]any)) {
	t.Helper()
	path := filepath.Join(cache, shardcache.IndexName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var env map[string]any
	if err := dec.Decode(&env); err != nil {
		t.Fatal(err)
	}
	body := env["body"].(map[string]any)
	fn(body)
	nb, _ := json.Marshal(body)
	sum := sha256.Sum256(nb)
	env["body"], env["body_sha256"] = json.RawMessage(nb), hex.EncodeToString(sum[:])
	out, _ := json.Marshal(env)
	os.WriteFile(path, out, 0o644)
}

// TestHugeSizesInIndex: an index with a correct checksum whose shard and
// tensor sizes were set near 2^62 is refused cleanly by every command
// that reads it, never with a panic or an allocation of that size.
func TestHugeSizesInIndex(t *testing.T) {
	dir := t.TempDir()
	golden := filepath.Join("..", "..", "testdata", "golden", "v1")
	src, cache := filepath.Join(dir, "source"), filepath.Join(dir, "cache")
	copyTree(t, filepath.Join(golden, "source"), src)
	copyTree(t, filepath.Join(golden, "cache"), cache)
	relocate(t, cache, src)
	for _, tc := range []struct {
		name string
		edit func(sh map[string]any)
	}{
		{"tensor past its shard", func(sh map[string]any) {
			sh["tensors"].([]any)[0].(map[string]any)["size"] = json.Number("4611686018427387904")
		}},
		{"shard and tensor both huge", func(sh map[string]any) {
			sh["size"] = json.Number("4611686018427387904")
			for _, x := range sh["tensors"].([]any) {
				if m := x.(map[string]any); m["stored"] == "raw" {
					m["size"] = json.Number("2305843009213693952")
					break
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := filepath.Join(t.TempDir(), "c")
			copyTree(t, cache, c)
			rewriteIndex(t, c, func(body map[string]any) {
				tc.edit(body["sources"].([]any)[0].(map[string]any)["shards"].([]any)[0].(map[string]any))
			})
			for _, args := range [][]string{{"verify", c}, {"load", c, "--device", "cpu"}, {"decompress", c, "-o", filepath.Join(t.TempDir(), "o")}} {
				// A corrupt cache (1), or a shard that is not the size
				// recorded (an input that changed, 3): never a bug.
				code, _, e := splitzip(t, args...)
				if code != exitFailure && code != exitInput || strings.Contains(e, "internal error") || strings.Contains(e, "panic") {
					t.Errorf("%s: exit %d, %q", args[0], code, e)
				}
			}
		})
	}
}

// TestUnknownVersions: an index or a payload of a version this build does
// not read is refused with a message naming the version found and the
// version read.
func TestUnknownVersions(t *testing.T) {
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	copyTree(t, filepath.Join("..", "..", "testdata", "golden", "v1", "cache"), cache)
	path := filepath.Join(cache, shardcache.IndexName)
	b, _ := os.ReadFile(path)
	os.WriteFile(path, bytes.Replace(b, []byte(`"version": 1,`), []byte(`"version": 7,`), 1), 0o644)
	_, err := shardcache.Open(cache)
	if !errors.Is(err, shardcache.ErrVersion) || !strings.Contains(err.Error(), fmt.Sprintf("version 7; this build reads versions 1 to %d", shardcache.IndexVersion)) {
		t.Errorf("index version 7: %v", err)
	}
	code, _, e := splitzip(t, "verify", cache)
	if code != exitInput || !strings.Contains(e, "version 7") {
		t.Errorf("verify of index version 7: exit %d, %q", code, e)
	}
	p := make([]byte, codec.HeaderSize)
	copy(p, codec.Magic)
	p[4] = 2
	if _, err := codec.ParseHeader(p); !errors.Is(err, codec.ErrVersion) || !strings.Contains(err.Error(), "version 2; this build reads version 1") {
		t.Errorf("payload version 2: %v", err)
	}
}
