// Package atomicfile creates the temporary files that splitzip renames
// into place. Unlike os.CreateTemp, which creates files 0600, they are
// created 0666 less the process umask, as cp and the shell create files,
// so a cache or a restored checkpoint written under umask 022 is readable
// by other users (0644).
//
// Every temporary file's name starts with TempPrefix and the writer's
// process id, so that a later run recognises what a killed one left
// (RemoveStale) and never takes a live writer's file for a leftover.
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Perm is the mode new files are created with, before the umask.
const Perm = 0o666

// DirPerm is the mode new directories are created with, before the umask.
const DirPerm = 0o777

var counter atomic.Uint64

// TempPrefix starts the name of every temporary file splitzip writes:
// TempPrefix, the writer's process id, a dash, a random part, a dash and
// the label CreateTemp was given (".splitzip-tmp-4242-1x8k2q-index").
const TempPrefix = ".splitzip-tmp-"

// CreateTemp creates a new file in dir named as TempPrefix says, ending
// with label, open for reading and writing, with mode Perm less the umask.
func CreateTemp(dir, label string) (*os.File, error) {
	var f *os.File
	_, err := makeTemp(dir, label, "createtemp", func(name string) (err error) {
		f, err = os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, Perm)
		return Created(err)
	})
	return f, err
}

// Created returns err, from opening a file to create or write it, with
// its *fs.PathError's operation "create" rather than "open": a file made
// for writing, whatever open's flags say, so that a refused permission
// reads as an output the machine refuses, not an unreadable input.
func Created(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Op == "open" {
		pe.Op = "create"
	}
	return err
}

// MkdirTemp creates a new folder in dir named as TempPrefix says, ending
// with label, with mode DirPerm less the umask: a folder built whole and
// renamed into place.
func MkdirTemp(dir, label string) (string, error) {
	return makeTemp(dir, label, "mkdirtemp", func(name string) error { return os.Mkdir(name, DirPerm) })
}

// makeTemp calls mk with new temporary names in dir until one is not
// taken, and returns it.
func makeTemp(dir, label, op string, mk func(name string) error) (string, error) {
	pid := os.Getpid()
	prefix := TempPrefix + strconv.Itoa(pid) + "-"
	seed := uint64(time.Now().UnixNano()) ^ uint64(pid)<<32
	for range 10000 {
		n := seed + counter.Add(1)*0x9E3779B97F4A7C15
		name := filepath.Join(dir, prefix+strconv.FormatUint(n, 36)+"-"+label)
		if err := mk(name); !errors.Is(err, fs.ErrExist) {
			return name, err
		}
	}
	return "", &fs.PathError{Op: op, Path: filepath.Join(dir, prefix+"*-"+label), Err: fs.ErrExist}
}

// IsTemp reports whether name (a base name) is a temporary file's.
func IsTemp(name string) bool { return strings.HasPrefix(name, TempPrefix) }

// Stale reports whether name (a base name) is a temporary file whose
// writer is gone: the process id in its name runs no more. The file of a
// live process, or of a process id that was taken again since, is not
// stale; neither is a name that is no temporary file's.
func Stale(name string) bool {
	rest, ok := strings.CutPrefix(name, TempPrefix)
	if !ok {
		return false
	}
	id, _, ok := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(id)
	if !ok || err != nil || pid <= 0 {
		return false
	}
	if pid == os.Getpid() {
		return false
	}
	// Signal 0 checks that the process exists without sending anything;
	// EPERM means it exists under another user.
	return errors.Is(unix.Kill(pid, 0), unix.ESRCH)
}

// RemoveStale removes the stale temporary files and folders (Stale)
// directly in dir, left by writers that were killed, and returns how many
// files it removed (a folder's counted) and their bytes. A dir that does
// not exist has none.
func RemoveStale(dir string) (files int, bytes uint64, err error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	for _, e := range ents {
		if !Stale(e.Name()) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		n, b := 0, uint64(0)
		filepath.WalkDir(p, func(_ string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				if info, err := d.Info(); err == nil {
					n++
					b += uint64(info.Size())
				}
			}
			return nil
		})
		if err := os.RemoveAll(p); err != nil {
			return files, bytes, err
		}
		files += n
		bytes += b
	}
	return files, bytes, nil
}

// Named is err, an error of making, writing or placing a file or folder
// under a temporary name, with name (the one the user knows) in place of
// that temporary one: a *fs.PathError or *os.LinkError becomes a
// *fs.PathError of name; any other error is prefixed with name.
func Named(err error, name string) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return &fs.PathError{Op: pe.Op, Path: name, Err: pe.Err}
	}
	if le, ok := errors.AsType[*os.LinkError](err); ok {
		return &fs.PathError{Op: le.Op, Path: name, Err: le.Err}
	}
	return fmt.Errorf("%s: %w", name, err)
}
