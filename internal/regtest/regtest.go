// Package regtest runs a real OCI registry on loopback for tests: the
// CNCF Distribution registry (Debian's docker-registry), the binary named
// by SPLITZIP_REGISTRY_BIN (make test installs the package and sets it).
package regtest

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// BinEnv names the environment variable with the registry binary's path.
const BinEnv = "SPLITZIP_REGISTRY_BIN"

// Bin returns the registry binary's path, skipping the test if
// SPLITZIP_REGISTRY_BIN is not set.
func Bin(t testing.TB) string {
	t.Helper()
	bin := os.Getenv(BinEnv)
	if bin == "" {
		t.Skipf("%s is not set (make test installs Debian's docker-registry and sets it)", BinEnv)
	}
	return bin
}

// Start runs the registry over a temporary folder until the test ends,
// skipping the test if SPLITZIP_REGISTRY_BIN is not set; it returns the
// registry's host (127.0.0.1:PORT, plain HTTP).
func Start(t testing.TB) string {
	t.Helper()
	host, _ := Run(t, Bin(t), filepath.Join(t.TempDir(), "store"))
	return host
}

// Run runs the registry at bin on a free loopback port, storing in store,
// until the test ends or stop is called; it returns its host. A registry
// run again on the same store serves what the first one stored.
func Run(t testing.TB, bin, store string) (host string, stop func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host = l.Addr().String()
	l.Close()
	cfg := filepath.Join(t.TempDir(), "config.yml")
	conf := fmt.Sprintf("version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n", store, host)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "registry.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	t.Cleanup(func() {
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("registry log (last 4 KiB):\n%s", b[max(0, len(b)-4096):])
		}
	})
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cmd.Process.Kill()
			cmd.Wait()
		}
	}
	t.Cleanup(stop)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + host + "/v2/")
		if err == nil {
			resp.Body.Close()
			return host, stop
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer on %s in 20 s: %v", bin, host, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
