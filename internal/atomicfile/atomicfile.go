// Package atomicfile creates the temporary files that splitzip renames
// into place. Unlike os.CreateTemp, which creates files 0600, they are
// created 0666 less the process umask, as cp and the shell create files,
// so a cache or a restored checkpoint written under umask 022 is readable
// by other users (0644).
package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"
)

// Perm is the mode new files are created with, before the umask.
const Perm = 0o666

// DirPerm is the mode new directories are created with, before the umask.
const DirPerm = 0o777

var counter atomic.Uint64

// CreateTemp creates a new file in dir whose name starts with prefix, open
// for reading and writing, with mode Perm less the umask.
func CreateTemp(dir, prefix string) (*os.File, error) {
	seed := uint64(time.Now().UnixNano()) ^ uint64(os.Getpid())<<32
	for range 10000 {
		n := seed + counter.Add(1)*0x9E3779B97F4A7C15
		name := filepath.Join(dir, prefix+strconv.FormatUint(n, 36))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, Perm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, err
	}
	return nil, &fs.PathError{Op: "createtemp", Path: filepath.Join(dir, prefix+"*"), Err: fs.ErrExist}
}
