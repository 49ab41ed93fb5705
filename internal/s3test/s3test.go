// Package s3test runs a real S3-compatible server on loopback for tests:
// Versity's S3 gateway (versitygw) over a temporary folder, the binary
// named by SPLITZIP_S3_BIN (make test builds it with scripts/need-s3.sh
// and sets it).
package s3test

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// BinEnv names the environment variable with the server binary's path.
const BinEnv = "SPLITZIP_S3_BIN"

// The root user's keys the server is started with; Start puts them in
// the environment, where the S3 clients find them.
const (
	AccessKey = "splitzip-test"
	SecretKey = "splitzip-test-secret"
)

// Server is a running server.
type Server struct {
	// Endpoint is its base URL, http://127.0.0.1:PORT.
	Endpoint string
	// Root is the folder it stores buckets in (a folder a bucket).
	Root string
	cmd  *exec.Cmd
	args []string
	log  *os.File
	done bool
}

// Start runs the server until the test ends (or Stop), skipping the test
// if SPLITZIP_S3_BIN is not set. It points the AWS environment at the
// server's keys and away from the user's files and endpoint settings, so
// the test must not be parallel.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := os.Getenv(BinEnv)
	if bin == "" {
		t.Skipf("%s is not set (make test builds Versity's S3 gateway with scripts/need-s3.sh and sets it)", BinEnv)
	}
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": AccessKey, "AWS_SECRET_ACCESS_KEY": SecretKey, "AWS_SESSION_TOKEN": "",
		"AWS_REGION": "us-east-1", "AWS_PROFILE": "", "AWS_ENDPOINT_URL": "", "AWS_ENDPOINT_URL_S3": "",
		"AWS_CONFIG_FILE": filepath.Join(dir, "no-config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "no-credentials"),
		"AWS_EC2_METADATA_DISABLED": "true",
	} {
		t.Setenv(k, v)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s := &Server{Endpoint: "http://" + addr, Root: filepath.Join(dir, "root")}
	if err := os.Mkdir(s.Root, 0o755); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "server.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	s.args = []string{bin, "--access", AccessKey, "--secret", SecretKey, "--port", addr, "--quiet",
		"posix", "--sidecar", filepath.Join(dir, "meta"), s.Root}
	s.log = logf
	if err := os.Mkdir(filepath.Join(dir, "meta"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Stop()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("S3 server log (last 4 KiB):\n%s", b[max(0, len(b)-4096):])
		}
	})
	s.run(t)
	return s
}

// run starts the server and waits until it answers.
func (s *Server) run(t testing.TB) {
	t.Helper()
	s.cmd = exec.Command(s.args[0], s.args[1:]...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	s.done = false
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", s.args[0], err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(s.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer on %s in 20 s: %v", s.args[0], s.Endpoint, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Restart starts a stopped server again, on its address and folder.
func (s *Server) Restart(t testing.TB) { s.run(t) }

// Stop ends the server (a store that disappears).
func (s *Server) Stop() {
	if !s.done {
		s.done = true
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
}

// Bucket creates a bucket and returns its name.
func (s *Server) Bucket(t testing.TB, name string) string {
	t.Helper()
	cfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c := s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(s.Endpoint)
		o.UsePathStyle = true
	})
	if _, err := c.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("creating bucket %s: %v", name, err)
	}
	return name
}

// CutBody ends body with io.ErrUnexpectedEOF after n bytes: a connection
// cut mid-body, for fault tests.
func CutBody(body io.ReadCloser, n int64) io.ReadCloser { return &cutBody{ReadCloser: body, left: n} }

type cutBody struct {
	io.ReadCloser
	left int64
}

func (c *cutBody) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, io.ErrUnexpectedEOF
	}
	n, err := c.ReadCloser.Read(p[:min(int64(len(p)), c.left)])
	c.left -= int64(n)
	return n, err
}

// BenchBytesEnv names the environment variable that sets how many bytes
// the S3 benchmarks move.
const BenchBytesEnv = "SPLITZIP_S3_BENCH_BYTES"

// BenchBytes is the byte count of $SPLITZIP_S3_BENCH_BYTES, or def where
// it is unset.
func BenchBytes(b testing.TB, def int64) int64 {
	v := os.Getenv(BenchBytesEnv)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive byte count", BenchBytesEnv, v)
	}
	return n
}
