package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/splitzip/splitzip/internal/failure"
	"github.com/splitzip/splitzip/internal/regtest"
	"github.com/splitzip/splitzip/internal/s3test"
	"github.com/splitzip/splitzip/oci"
	"github.com/splitzip/splitzip/s3store"
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
	if code, _, e := splitzip(t, "push", plain, ref, "--insecure"); code != exitInput || !strings.Contains(e, "not self-contained") {
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
		// A body cut short, a connection reset: the retries ran out.
		{fmt.Errorf("blob sha256:74ce: %w", io.ErrUnexpectedEOF), failure.Resource},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), failure.Resource},
		{fmt.Errorf("s3: %w", s3store.ErrNoCredentials), failure.Input},
	} {
		if got := failure.KindOf(registryError(c.err)); got != c.want {
			t.Errorf("%v: kind %v, want %v", c.err, got, c.want)
		}
	}
	// A refusal's details read as the registry's JSON, not Go's syntax,
	// and the error keeps its kind.
	unknown := &transport.Error{StatusCode: http.StatusNotFound, Errors: []transport.Diagnostic{
		{Code: transport.ManifestUnknownErrorCode, Message: "manifest unknown", Detail: map[string]any{"Tag": "v1"}}}}
	err := registryError(fmt.Errorf("pull x:v1: %w", unknown))
	if want := `pull x:v1: MANIFEST_UNKNOWN: manifest unknown {"Tag":"v1"}`; err.Error() != want || failure.KindOf(err) != failure.Input || !errors.Is(err, unknown) {
		t.Errorf("refusal with details: %q (kind %v), want %q", err, failure.KindOf(err), want)
	}
	// An unauthorized answer says where credentials come from, without
	// the client library's advice to its own users.
	head := &transport.Error{StatusCode: http.StatusUnauthorized, Request: &http.Request{Method: http.MethodHead, URL: &url.URL{Scheme: "http", Host: "r:5000", Path: "/v2/m/x/manifests/v1"}}}
	err = registryError(fmt.Errorf("push r:5000/m/x:v1: %w", head))
	if msg := err.Error(); !strings.Contains(msg, "docker login REGISTRY") || strings.Contains(msg, "use GET for details") || failure.KindOf(err) != failure.Input {
		t.Errorf("unauthorized: %q (kind %v)", msg, failure.KindOf(err))
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

// TestCompressOntoTag: compress -o onto a tag that holds a checkpoint
// adds the new one beside it, as compress -o DIR does (the tag then pulls
// both, and each verifies and decompresses without its source; the blobs
// already there are not sent again); compressing one of them again leaves
// one record of it; --local-cache is the folder the tag is pulled into,
// so a second run fetches nothing; and a tag that holds another kind of
// artifact is refused, not replaced. On the in-process registry, the CNCF
// Distribution registry (docker-registry) and an S3 layout.
func TestCompressOntoTag(t *testing.T) {
	for _, c := range []struct {
		name  string
		start func(t *testing.T) (ref string, flags []string)
	}{
		{"registry", func(t *testing.T) (string, []string) {
			s := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
			t.Cleanup(s.Close)
			return "oci://" + strings.TrimPrefix(s.URL, "http://") + "/models/multi:v1", []string{"--insecure"}
		}},
		{"docker-registry", func(t *testing.T) (string, []string) {
			return "oci://" + regtest.Start(t) + "/models/multi:v1", []string{"--insecure"}
		}},
		{"s3", func(t *testing.T) (string, []string) {
			srv := s3test.Start(t)
			srv.Bucket(t, "models")
			return "s3://models/multi:v1", []string{"--endpoint-url", srv.Endpoint}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ref, flags := c.start(t)
			compressOntoTag(t, ref, flags)
		})
	}
}

// compressSummary is what TestCompressOntoTag reads of compress --json.
type compressSummary struct {
	Type     string `json:"message_type"`
	Existing *struct {
		Digest  string   `json:"digest"`
		Blobs   int      `json:"blobs"`
		Fetched int      `json:"fetched_blobs"`
		Sources []string `json:"sources"`
		Kept    []string `json:"kept"`
		Seen    string   `json:"replaced"`
	} `json:"existing"`
	Push struct {
		Digest   string `json:"digest"`
		Blobs    int    `json:"blobs"`
		Uploaded int    `json:"uploaded_blobs"`
	} `json:"push"`
}

func compressOntoTag(t *testing.T, ref string, flags []string) {
	dir := t.TempDir()
	cks := [2]string{filepath.Join(dir, "a"), filepath.Join(dir, "b")}
	for i, ck := range cks {
		if code, _, e := splitzip(t, "gen", ck, "--size", "1MiB", "--shards", "2", "--seed", fmt.Sprint(i+1)); code != 0 {
			t.Fatalf("gen: %d %s", code, e)
		}
	}
	compress := func(ck string, more ...string) compressSummary {
		t.Helper()
		code, out, e := splitzip(t, append(append([]string{"compress", ck, "-o", ref, "--no-sync", "--json"}, flags...), more...)...)
		var s compressSummary
		if err := json.Unmarshal([]byte(out), &s); code != 0 || err != nil || s.Type != "compress_summary" {
			t.Fatalf("compress %s -o %s: exit %d (%v): %s %s", ck, ref, code, err, out, e)
		}
		return s
	}
	// sources pulls the tag into a new folder and returns its checkpoints.
	sources := func(into string) []string {
		t.Helper()
		code, out, e := splitzip(t, append([]string{"pull", ref, into, "--json"}, flags...)...)
		var p struct{ Sources []string }
		if err := json.Unmarshal([]byte(out), &p); code != 0 || err != nil {
			t.Fatalf("pull %s: exit %d (%v): %s %s", ref, code, err, out, e)
		}
		return p.Sources
	}
	// A new tag, as before.
	first := compress(cks[0])
	if first.Existing != nil || first.Push.Uploaded == 0 {
		t.Fatalf("compress onto a new tag: existing %+v, push %+v", first.Existing, first.Push)
	}
	// The second checkpoint joins the first.
	second := compress(cks[1])
	if e := second.Existing; e == nil || e.Digest != first.Push.Digest || len(e.Kept) != 1 || !strings.HasPrefix(e.Kept[0], cks[0]) || e.Seen != "" {
		t.Fatalf("compress of a second checkpoint onto the tag: existing %+v", e)
	}
	if p := second.Push; p.Uploaded == 0 || p.Uploaded >= p.Blobs {
		t.Errorf("second push uploaded %d of %d blobs: want only the new checkpoint's", p.Uploaded, p.Blobs)
	}
	pulled := filepath.Join(dir, "pulled")
	got := sources(pulled)
	if len(got) != 2 {
		t.Fatalf("the tag holds %q after two checkpoints", got)
	}
	// Pulled, each is recorded under the cache's checkpoints/ folder,
	// named for the folder it was compressed from.
	pulledRoot := func(ck string) string {
		for _, g := range got {
			if r := filepath.Dir(g); filepath.Dir(r) == filepath.Join(pulled, "checkpoints") && strings.HasPrefix(filepath.Base(r), filepath.Base(ck)+"-") {
				return r
			}
		}
		t.Fatalf("no checkpoint of %s among %q", ck, got)
		return ""
	}
	for _, ck := range cks {
		if err := os.Rename(ck, ck+".gone"); err != nil {
			t.Fatal(err)
		}
	}
	if code, out, e := splitzip(t, "verify", pulled); code != 0 {
		t.Fatalf("verify of both checkpoints without their sources: %d %s %s", code, out, e)
	}
	for i, ck := range cks {
		restored := filepath.Join(dir, fmt.Sprint("restored", i))
		if code, _, e := splitzip(t, "decompress", pulled, "-o", restored, "--source", pulledRoot(ck)); code != 0 {
			t.Fatalf("decompress --source %s: %d %s", ck, code, e)
		}
		ents, _ := os.ReadDir(ck + ".gone")
		for _, en := range ents {
			a, _ := os.ReadFile(filepath.Join(ck+".gone", en.Name()))
			b, err := os.ReadFile(filepath.Join(restored, en.Name()))
			if err != nil || !bytes.Equal(a, b) {
				t.Errorf("%s of %s: restored differs (%v)", en.Name(), ck, err)
			}
		}
		if err := os.Rename(ck+".gone", ck); err != nil {
			t.Fatal(err)
		}
	}
	// The first again, into a kept local cache: its record is replaced,
	// the other kept; a second run finds the local cache whole.
	local := filepath.Join(dir, "local")
	code, out, e := splitzip(t, append([]string{"compress", cks[0], "-o", ref, "--no-sync", "--local-cache", local}, flags...)...)
	if code != 0 || !strings.Contains(out, "kept 1 checkpoint already at "+ref+" ("+cks[1]) || !strings.Contains(out, "replaced "+cks[0]) {
		t.Fatalf("compress of the first checkpoint again: %d %s %s", code, out, e)
	}
	again := compress(cks[0], "--local-cache", local)
	if x := again.Existing; x == nil || x.Fetched != 0 || x.Blobs == 0 || len(x.Kept) != 1 || !strings.HasPrefix(x.Kept[0], cks[1]) || !strings.HasPrefix(x.Seen, cks[0]) {
		t.Errorf("compress again with --local-cache: existing %+v", x)
	}
	if again.Push.Uploaded != 0 {
		t.Errorf("compress of a checkpoint the tag holds uploaded %d blobs", again.Push.Uploaded)
	}
	if got := sources(filepath.Join(dir, "pulled2")); len(got) != 2 {
		t.Errorf("the tag holds %q after a checkpoint compressed again", got)
	}
}

// TestCompressOntoForeignTag: a tag that holds an artifact other than a
// splitzip cache (an image) is refused with the input exit code, and the
// tag still names the image.
func TestCompressOntoForeignTag(t *testing.T) {
	s := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer s.Close()
	ref := strings.TrimPrefix(s.URL, "http://") + "/models/image:v1"
	img, err := random.Image(1024, 2)
	if err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	ck := filepath.Join(t.TempDir(), "ck")
	if code, _, e := splitzip(t, "gen", ck, "--size", "1MiB"); code != 0 {
		t.Fatalf("gen: %d %s", code, e)
	}
	code, _, e := splitzip(t, "compress", ck, "-o", "oci://"+ref, "--insecure")
	if code != exitInput || !strings.Contains(e, "not a splitzip cache artifact") || !strings.Contains(e, "name another tag") {
		t.Errorf("compress onto an image's tag: exit %d, %s", code, e)
	}
	if d, err := remote.Head(r); err != nil || d.Digest != want {
		t.Errorf("the tag names %v (%v), want the image %s", d, err, want)
	}
	// push refuses it too; onto another cache's tag it replaces that
	// cache, and says so.
	cache := filepath.Join(t.TempDir(), "c")
	if code, _, e := splitzip(t, "compress", ck, "-o", cache, "--self-contained", "--no-sync"); code != 0 {
		t.Fatalf("compress: %d %s", code, e)
	}
	code, _, e = splitzip(t, "push", cache, ref, "--insecure")
	if code != exitInput || !strings.Contains(e, "not a splitzip cache artifact") || !strings.Contains(e, "name another tag") {
		t.Errorf("push onto an image's tag: exit %d, %s", code, e)
	}
	if d, err := remote.Head(r); err != nil || d.Digest != want {
		t.Errorf("after push, the tag names %v (%v), want the image %s", d, err, want)
	}
	other := strings.TrimSuffix(ref, "image:v1") + "cache:v1"
	if code, _, e := splitzip(t, "push", cache, other, "--insecure"); code != 0 || strings.Contains(e, "held another cache") {
		t.Fatalf("push onto a new tag: %d %s", code, e)
	}
	ck2 := filepath.Join(t.TempDir(), "ck2")
	cache2 := filepath.Join(t.TempDir(), "c2")
	if code, _, e := splitzip(t, "gen", ck2, "--size", "1MiB", "--seed", "2"); code != 0 {
		t.Fatalf("gen: %d %s", code, e)
	}
	if code, _, e := splitzip(t, "compress", ck2, "-o", cache2, "--self-contained", "--no-sync"); code != 0 {
		t.Fatalf("compress: %d %s", code, e)
	}
	code, out, _ := splitzip(t, "push", cache2, other, "--insecure", "--json")
	var doc struct {
		Replaced *struct {
			Digest   string
			ByDigest string `json:"by_digest"`
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil || doc.Replaced == nil || !strings.Contains(doc.Replaced.ByDigest, doc.Replaced.Digest) {
		t.Errorf("push over another cache's tag: exit %d, %v, %s", code, err, out)
	}
}

// TestRegistryFlagsThatDoNothing: push and pull refuse --insecure with an
// s3:// reference and --endpoint-url with a registry's, as verify and
// load refuse them for caches they do not apply to.
func TestRegistryFlagsThatDoNothing(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"pull", "s3://bkt/m:v1", dir, "--insecure"},
		{"push", dir, "s3://bkt/m:v1", "--insecure"},
		{"pull", "127.0.0.1:1/m/x:v1", dir, "--endpoint-url", "http://127.0.0.1:1"},
		{"push", dir, "oci://127.0.0.1:1/m/x:v1", "--endpoint-url", "http://127.0.0.1:1"},
	} {
		if code, _, e := splitzip(t, args...); code != exitUsage || !strings.Contains(e, " is for a") {
			t.Errorf("%v: exit %d, %q", args, code, e)
		}
	}
}
