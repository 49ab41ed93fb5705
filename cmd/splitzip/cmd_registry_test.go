package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/splitzip/splitzip/internal/failure"
	"github.com/splitzip/splitzip/oci"
)

// TestPushPullCommands: a self-contained cache pushed to a registry and
// pulled into another folder verifies there without its source, and
// decompresses to the checkpoint; a cache that needs its source is
// refused with the input exit code; --json prints the summaries.
func TestPushPullCommands(t *testing.T) {
	s := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer s.Close()
	ref := strings.TrimPrefix(s.URL, "http://") + "/models/small:1"
	dir := t.TempDir()
	ck, cache := compressedWith(t, dir, []string{"--shards", "2"}, "--self-contained")
	code, out, e := splitzip(t, "push", cache, ref, "--insecure", "--json")
	if code != 0 {
		t.Fatalf("push: %d %s", code, e)
	}
	var push struct {
		Type     string `json:"message_type"`
		Digest   string `json:"digest"`
		Uploaded int    `json:"uploaded_blobs"`
	}
	if err := json.Unmarshal([]byte(out), &push); err != nil || push.Type != "push_summary" || push.Uploaded == 0 {
		t.Fatalf("push --json: %v %s", err, out)
	}
	pulled := filepath.Join(dir, "pulled")
	code, out, e = splitzip(t, "pull", ref, pulled, "--insecure")
	if code != 0 || !strings.Contains(out, "pulled ") || !strings.Contains(out, push.Digest) {
		t.Fatalf("pull: %d %s %s", code, out, e)
	}
	// Without the source: verify and decompress from the pulled cache.
	if err := os.Rename(ck, ck+".gone"); err != nil {
		t.Fatal(err)
	}
	// Streamed from the registry, every tensor checked by its key.
	if code, out, e := splitzip(t, "load", "oci://"+ref, "--insecure", "--device", "cpu", "--check"); code != 0 || !strings.Contains(e, "streaming oci://"+ref) {
		t.Fatalf("load oci://%s: %d %s %s", ref, code, out, e)
	}
	if code, out, e := splitzip(t, "verify", pulled); code != 0 {
		t.Fatalf("verify of the pulled cache: %d %s %s", code, out, e)
	}
	decompressesTo(t, pulled, filepath.Join(dir, "restored"), ck+".gone")
	// A cache that needs its source.
	_, plain := compressed(t, filepath.Join(dir, "plain"))
	if code, _, e := splitzip(t, "push", plain, ref, "--insecure"); code != exitUsage || !strings.Contains(e, "not self-contained") {
		t.Errorf("push of a cache needing its source: exit %d, %s", code, e)
	}
	// A damaged object is not published: push verifies the cache first,
	// and the tag still names the good artifact.
	largest, _ := largestObject(pulled)
	b, _ := os.ReadFile(largest)
	b[len(b)/2] ^= 0x40
	os.WriteFile(largest, b, 0o644)
	if code, _, e := splitzip(t, "push", pulled, ref, "--insecure"); code != exitFailure || !strings.Contains(e, "not pushed") {
		t.Errorf("push of a damaged cache: exit %d, %s", code, e)
	}
	again := filepath.Join(dir, "again")
	if code, out, e := splitzip(t, "pull", ref, again, "--insecure"); code != 0 || !strings.Contains(out, push.Digest) {
		t.Errorf("pull after a refused push: %d %s %s", code, out, e)
	}
}

// TestRegistryErrorKinds: the registry's refusals are input errors; its
// failures and throttling after the retries, and the network's, are
// resource errors (exit code 4: try again later).
func TestRegistryErrorKinds(t *testing.T) {
	for _, c := range []struct {
		err  error
		want failure.Kind
	}{
		{&transport.Error{StatusCode: http.StatusUnauthorized}, failure.Input},
		{&transport.Error{StatusCode: http.StatusNotFound}, failure.Input},
		{fmt.Errorf("blob: %w", &transport.Error{StatusCode: http.StatusTooManyRequests}), failure.Resource},
		{&transport.Error{StatusCode: http.StatusServiceUnavailable}, failure.Resource},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, failure.Resource},
		{fmt.Errorf("blob: %w", oci.ErrBlob), failure.KindOf(oci.ErrBlob)},
	} {
		if got := failure.KindOf(registryError(c.err)); got != c.want {
			t.Errorf("%v: kind %v, want %v", c.err, got, c.want)
		}
	}
	// A reference that names no repository is the command line's mistake,
	// not a bug of splitzip's.
	for _, args := range [][]string{{"load", "oci://localhost:5999/x:v1", "--device", "cpu"}, {"pull", "oci://127.0.0.1:1/x:y", t.TempDir()}} {
		if code, _, e := splitzip(t, args...); code != exitUsage || !strings.Contains(e, "not a registry reference") {
			t.Errorf("%v: exit %d, %q", args, code, e)
		}
	}
}

// decompressesTo decompresses the cache into out and fails t unless every
// file of the checkpoint folder ck is restored byte for byte.
func decompressesTo(t *testing.T, cache, out, ck string) {
	t.Helper()
	if code, _, e := splitzip(t, "decompress", cache, "-o", out); code != 0 {
		t.Fatalf("decompress of %s: %d %s", cache, code, e)
	}
	ents, _ := os.ReadDir(ck)
	for _, en := range ents {
		a, _ := os.ReadFile(filepath.Join(ck, en.Name()))
		b, err := os.ReadFile(filepath.Join(out, en.Name()))
		if err != nil || string(a) != string(b) {
			t.Errorf("%s: restored differs (%v)", en.Name(), err)
		}
	}
}
