package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splitzip/splitzip/internal/s3test"
	"github.com/splitzip/splitzip/load"
	"github.com/splitzip/splitzip/shardcache"
)

// TestS3Commands runs the commands that take a cache in S3 against a real
// S3-compatible server on loopback: compress -o s3://, verify and load of
// the remote cache without its source, pull, push of a second tag that
// uploads nothing, decompress of a pulled copy byte for byte, and the
// errors a missing tag and a bad URL give.
func TestS3Commands(t *testing.T) {
	srv := s3test.Start(t)
	srv.Bucket(t, "models")
	t.Setenv("AWS_ENDPOINT_URL_S3", srv.Endpoint) // as a user points the AWS CLI at a store
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	if code, _, e := splitzip(t, "gen", ck, "--size", "4MiB", "--shards", "2"); code != 0 {
		t.Fatalf("gen: %d %s", code, e)
	}
	ref := "s3://models/small:v1"
	code, out, e := splitzip(t, "compress", ck, "-o", ref, "--no-sync", "--json")
	if code != 0 {
		t.Fatalf("compress -o %s: %d %s", ref, code, e)
	}
	var summary struct {
		Type string `json:"message_type"`
		Push struct {
			Ref      string `json:"ref"`
			Digest   string `json:"digest"`
			Uploaded int    `json:"uploaded_blobs"`
		} `json:"push"`
	}
	if err := json.Unmarshal([]byte(out), &summary); err != nil || summary.Type != "compress_summary" || summary.Push.Ref != ref || summary.Push.Uploaded == 0 {
		t.Fatalf("compress --json to S3 (%v): %s", err, out)
	}
	if err := os.Rename(ck, ck+".gone"); err != nil {
		t.Fatal(err)
	}
	if code, out, e := splitzip(t, "verify", ref); code != 0 || !strings.Contains(out, "verify ok") || !strings.Contains(e, "pulled "+ref) {
		t.Fatalf("verify %s: %d %s %s", ref, code, out, e)
	}
	// Its summary names the remote cache, not the temporary folder gone
	// when verify ends.
	var vs struct{ Cache string }
	if code, out, _ := splitzip(t, "verify", ref, "--json"); code != 0 || json.Unmarshal([]byte(out), &vs) != nil || vs.Cache != ref {
		t.Errorf("verify %s --json: exit %d, cache %q: %s", ref, code, vs.Cache, out)
	}
	// Streamed: no local copy, every tensor checked against its key.
	code, out, e = splitzip(t, "load", ref, "--device", "cpu", "--check", "--json")
	if code != 0 || !strings.Contains(e, "streaming "+ref) || !strings.Contains(out, `"checked": true`) {
		t.Fatalf("load %s streamed: %d %s %s", ref, code, out, e)
	}
	// A remote cache's own defaults, unless the flags are given.
	settings := func(out string) (s load.Settings) {
		t.Helper()
		var rep struct{ Settings load.Settings }
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("load --json: %v: %s", err, out)
		}
		return rep.Settings
	}
	if s := settings(out); s.Readers != load.RemoteReaders || s.PinnedLimit != load.RemotePinnedLimit {
		t.Errorf("load %s streamed: readers %d, pinned limit %d; want %d, %d", ref, s.Readers, s.PinnedLimit, load.RemoteReaders, load.RemotePinnedLimit)
	}
	code, out, e = splitzip(t, "load", ref, "--device", "cpu", "--readers", "3", "--pinned-limit", "64MiB", "--json")
	if s := settings(out); code != 0 || s.Readers != 3 || s.PinnedLimit != 64<<20 {
		t.Errorf("load %s --readers 3 --pinned-limit 64MiB: %d, %+v, %s", ref, code, s, e)
	}
	if code, _, e := splitzip(t, "load", ref, "--device", "cpu", "--pinned-limit="); code != exitUsage {
		t.Errorf("load --pinned-limit= (empty): exit %d, %s", code, e)
	}
	if code, _, e := splitzip(t, "load", ref, "--device", "cpu", "--raw"); code != exitUsage {
		t.Errorf("load --raw of a streamed cache: exit %d, %s", code, e)
	}
	local := filepath.Join(dir, "local")
	if code, out, e := splitzip(t, "load", ref, "--device", "cpu", "--local-cache", local); code != 0 {
		t.Fatalf("load %s: %d %s %s", ref, code, out, e)
	}
	if code, _, e := splitzip(t, "load", ref, "--device", "cpu", "--local-cache", local); code != 0 || !strings.Contains(e, "fetched 0 blobs") {
		t.Fatalf("second load into the kept local cache: %d %s", code, e)
	}
	// The pulled cache pushed again moves no object file: only its index
	// differs (its checkpoint recorded under the local cache's
	// checkpoints/ folder, oci.PulledRoot).
	code, out, e = splitzip(t, "push", local, "s3://models/small:v2", "--endpoint-url", srv.Endpoint)
	if code != 0 || !strings.Contains(out, "uploaded 0 blobs") {
		t.Fatalf("push of the same cache as v2: %d %s %s", code, out, e)
	}
	pulled := filepath.Join(dir, "pulled")
	if code, out, e := splitzip(t, "pull", "s3://models/small:v2", pulled); code != 0 || !strings.Contains(out, "checkpoints/ck-") {
		t.Fatalf("pull: %d %s %s", code, out, e)
	}
	decompressesTo(t, pulled, filepath.Join(dir, "restored"), ck+".gone")
	if code, _, e := splitzip(t, "verify", "s3://models/small:v9"); code != exitInput || !strings.Contains(e, `no such tag "v9"`) {
		t.Errorf("verify of a missing tag: exit %d, %s", code, e)
	}
	if code, _, e := splitzip(t, "pull", "s3://Models/small", pulled); code != exitUsage {
		t.Errorf("pull of a bad bucket name: exit %d, %s", code, e)
	}
	// A --local-cache folder that holds another checkpoint too: verify
	// and load of the reference work on its checkpoint alone.
	other := filepath.Join(dir, "other")
	if code, _, e := splitzip(t, "gen", other, "--size", "1MiB", "--seed", "5"); code != 0 {
		t.Fatalf("gen: %d %s", code, e)
	}
	if code, _, e := splitzip(t, "compress", other, "-o", local, "--no-sync", "-q"); code != 0 {
		t.Fatalf("compress into the local cache: %d %s", code, e)
	}
	os.RemoveAll(other) // its raw tensors' bytes are gone: a verify of the folder fails
	code, out, e = splitzip(t, "verify", ref, "--local-cache", local, "--json")
	if code != 0 || !strings.Contains(out, `"ok": true`) {
		t.Errorf("verify %s --local-cache holding another checkpoint: %d %s %s", ref, code, out, e)
	}
	if code, out, e := splitzip(t, "load", ref, "--device", "cpu", "--local-cache", local); code != 0 {
		t.Errorf("load %s --local-cache holding another checkpoint: %d %s %s", ref, code, out, e)
	}
	// Another command writing to the folder: the load waits for it.
	w, err := shardcache.Create(local)
	if err != nil {
		t.Fatal(err)
	}
	// Held past the second a writer tries for the lock before "locked".
	release := time.AfterFunc(1500*time.Millisecond, func() { w.Close() })
	defer release.Stop()
	start := time.Now()
	if code, out, e := splitzip(t, "load", ref, "--device", "cpu", "--local-cache", local); code != 0 || !strings.Contains(e, "waiting for another splitzip command") || time.Since(start) < 1400*time.Millisecond {
		t.Errorf("load %s --local-cache while another command writes to it: %d after %v, %s %s", ref, code, time.Since(start), out, e)
	}
	// A blob damaged in the store: a streamed load fails, and its advice
	// is the store's (a pull would fetch the same bytes).
	var largest string
	var size int64
	filepath.Walk(filepath.Join(srv.Root, "models"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && strings.Contains(p, "blobs") && fi.Size() > size {
			largest, size = p, fi.Size()
		}
		return nil
	})
	b, err := os.ReadFile(largest)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	if err := os.WriteFile(largest, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, e := splitzip(t, "load", ref, "--device", "cpu"); code != exitFailure || !strings.Contains(e, "the store's copy is damaged") {
		t.Errorf("load %s of a damaged blob: exit %d, %s", ref, code, e)
	}
}
