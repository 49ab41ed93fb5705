package shardcache

// Readers and gc: a process that opens a cache (Open) holds a shared lock
// on its readers file until Close, and gc holds it exclusively while it
// rewrites packs and removes files, so that no file a reader may still
// open goes away under it. Writers (compress, pull) take no part: they
// only add files, and a reader sees their objects once their index is
// committed.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/splitzip/splitzip/atomicfile"

	"golang.org/x/sys/unix"
)

// ReadersName is the file that readers of a cache hold a shared lock on
// (flock) and gc an exclusive one.
const ReadersName = "readers"

// readWait is how long Open waits for a gc that holds the cache to
// finish, and readPoll how often it looks.
const (
	readWait = 2 * time.Minute
	readPoll = 20 * time.Millisecond
)

// readLock takes the readers lock of the cache in dir shared, waiting up
// to readWait for a gc that holds it (or until ctx ends), and returns the
// file that holds it (nil where the cache has no readers file, as one
// made before it was introduced, or the caller may not open it: such a
// reader takes no part).
func readLock(ctx context.Context, dir string) (*os.File, error) {
	return lockShared(ctx, dir, ReadersName, "a gc")
}

// lockShared takes the lock file name of the cache in dir shared, waiting
// up to readWait for holder ("a gc", "a writer"), which holds it
// exclusively, or until ctx ends, and returns the file that holds it: nil
// where the file is absent or the caller may not open it (a cache made
// before it was, a cache no writer opened, a read-only user), which the
// caller then goes without.
func lockShared(ctx context.Context, dir, name, holder string) (*os.File, error) {
	f, err := os.Open(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if err := flockWait(ctx, f, unix.LOCK_SH, readWait); err != nil {
		f.Close()
		return nil, waitError(dir, f, holder, err)
	}
	return f, nil
}

// waitError is flockWait's error err on f, the lock of the cache in dir
// that holder ("a gc", "a writer") held, in words.
func waitError(dir string, f *os.File, holder string, err error) error {
	switch {
	case errors.Is(err, unix.EWOULDBLOCK):
		return fmt.Errorf("%s: %w: %s has held it for %v", dir, ErrLocked, holder, readWait)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: waiting for %s to finish: %w", dir, holder, err)
	}
	return fmt.Errorf("%s: %w", f.Name(), err)
}

// flockWait takes the flock how (unix.LOCK_SH or LOCK_EX) on f, trying
// every readPoll for up to wait: unix.EWOULDBLOCK when it is still held
// then, ctx's error when ctx ends first.
func flockWait(ctx context.Context, f *os.File, how int, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(readPoll):
		}
	}
}

// makeReaders creates the readers file of the cache in dir if it lacks
// one.
func makeReaders(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, ReadersName), os.O_CREATE|os.O_RDONLY, atomicfile.Perm)
	if err != nil {
		return atomicfile.Created(err)
	}
	return f.Close()
}

// gcLock takes the readers lock of the cache in dir exclusively, without
// waiting: ErrInUse while a reader holds it.
func gcLock(dir string) (*os.File, error) {
	if err := makeReaders(dir); err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(dir, ReadersName))
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w (a load, verify, decompress or push, or a Python or C loader holding it open until close; run gc when it is done)", dir, ErrInUse)
		}
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	return f, nil
}

// Close lets go of the cache: a local cache's readers lock, which gc
// waits for. Its index stays readable (Index, lookups); its objects may
// go under a gc from then on, so they are read before Close. Close of a
// remote cache does nothing.
func (c *Cache) Close() error {
	if c == nil || c.rlock == nil {
		return nil
	}
	err := c.rlock.Close()
	c.rlock = nil
	return err
}
