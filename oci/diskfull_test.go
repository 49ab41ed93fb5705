//go:build linux

package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/shardcache"
)

// The environment of the child process of TestPullDiskFull, which
// TestMain runs as pullDiskFullChild.
const (
	fullRef   = "SPLITZIP_TEST_FULL_REF"
	fullCache = "SPLITZIP_TEST_FULL_CACHE"
	fullLimit = "SPLITZIP_TEST_FULL_LIMIT"
)

// TestPullDiskFull: a pull whose writes fail half way (a child process
// whose files may not grow past half of the largest blob, as on a full
// disk) fails with an error naming the cache, and leaves a cache that
// holds no checkpoint of the artifact; a pull with room afterwards
// completes it, byte for byte.
func TestPullDiskFull(t *testing.T) {
	_, host := serve(t)
	dir := t.TempDir()
	cache := compress(t, dir, synth.Config{Mix: 60, Shards: 2, Seed: 10})
	ref := host + "/models/full:v1"
	if _, err := Push(context.Background(), cache, ref, opts()); err != nil {
		t.Fatal(err)
	}
	c, err := shardcache.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := c.Index().Files()
	var largest uint64
	for _, k := range files {
		o, _ := c.Lookup(k)
		largest = max(largest, o.Size)
	}
	out := filepath.Join(dir, "pulled")
	child := exec.Command(os.Args[0])
	child.Env = append(os.Environ(), fullRef+"="+ref, fullCache+"="+out, fullLimit+"="+strconv.FormatUint(largest/2, 10))
	b, err := child.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, b)
	}
	t.Logf("child:\n%s", b)
	if p, err := shardcache.Open(out); err == nil && len(p.Index().Sources) != 0 {
		t.Fatalf("a pull that ran out of room left a checkpoint: %v", p.Index().Sources)
	}
	if _, err := Pull(context.Background(), ref, out, opts()); err != nil {
		t.Fatalf("pull with room after a full one: %v", err)
	}
	sameCache(t, cache, out)
}

// TestMain runs the tests, or in the child process of TestPullDiskFull
// pullDiskFullChild.
func TestMain(m *testing.M) {
	if os.Getenv(fullRef) != "" {
		if err := pullDiskFullChild(); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// pullDiskFullChild limits the size of the files this process writes
// and pulls: the pull must fail for the write, naming the cache.
func pullDiskFullChild() error {
	ref, out := os.Getenv(fullRef), os.Getenv(fullCache)
	limit, err := strconv.ParseUint(os.Getenv(fullLimit), 10, 64)
	if err != nil {
		return err
	}
	// Past the limit a write fails with EFBIG instead of the process
	// being killed by SIGXFSZ.
	signal.Ignore(syscall.SIGXFSZ)
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: limit, Max: limit}); err != nil {
		return err
	}
	_, err = Pull(context.Background(), ref, out, opts())
	var pe *os.PathError
	switch {
	case err == nil:
		return errors.New("a pull whose files could not grow succeeded")
	case !errors.Is(err, syscall.EFBIG):
		return fmt.Errorf("the pull failed, but not for the write: %w", err)
	case !errors.As(err, &pe) || pe.Path != out:
		return fmt.Errorf("the error does not name the cache %s: %w", out, err)
	case !strings.Contains(err.Error(), "splitzip gc --unfinished "+out):
		return fmt.Errorf("the error does not say what was kept and how to free it: %w", err)
	}
	fmt.Println("pull:", err)
	return nil
}
