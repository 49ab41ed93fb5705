package costmodel

// Where a host's profile is kept: a JSON file per host fingerprint in the
// user's cache folder, written atomically (temporary file, rename).

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/splitzip/splitzip/atomicfile"
)

// EnvProfile names a profile file to use instead of the user's cache
// folder's, or "default" for Default(): for tests, and for hosts whose
// profile was measured elsewhere.
const EnvProfile = "SPLITZIP_PROFILE"

// Fingerprint identifies the hardware a profile holds for: the
// architecture, the CPU model and its count of logical cores, and device
// (the GPU's name, or "cpu"). A profile measured under another
// fingerprint is not used, so a changed host is measured again.
func Fingerprint(device string) string {
	return fmt.Sprintf("%s/%s/%d cores/%s", runtime.GOARCH, cpuModel(), runtime.NumCPU(), device)
}

// cpuModel is the first "model name" of /proc/cpuinfo, or "unknown".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// Dir is the folder profiles are kept in: splitzip/ in the user's cache
// folder (XDG_CACHE_HOME, or ~/.cache).
func Dir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		// Neither variable set, or XDG_CACHE_HOME relative: os says which.
		return "", fmt.Errorf("%w: %v", ErrNoDir, err)
	}
	return filepath.Join(d, "splitzip"), nil
}

// path is the file of a host's profile in dir.
func path(dir, host string) string {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return '_'
	}, host)
	if len(name) > 120 {
		name = name[:120]
	}
	return filepath.Join(dir, "costmodel-"+name+".json")
}

// Read returns the profile in file, checked.
func Read(file string) (*Profile, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var p Profile
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", file, ErrProfile, err)
	}
	// Written before the small pairs (decoders 3 and earlier): small
	// tensors priced as large ones. A later profile without them is
	// damaged, and Check refuses it.
	if p.Decoders < 4 && p.RawSmall == (Cost{}) && p.FixedSmall == (Cost{}) {
		p.RawSmall, p.FixedSmall = p.Raw, p.Fixed
	}
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return &p, nil
}

// Lookup returns the profile kept in dir for host, or fs.ErrNotExist
// when there is none (or only one of an older layout, measured with other
// decoders, or of another host under a colliding name).
func Lookup(dir, host string) (*Profile, error) {
	p, err := Read(path(dir, host))
	switch {
	case err != nil && errors.Is(err, ErrProfile):
		return nil, unusableError{err}
	case err != nil:
		return nil, err
	case p.Host != host:
		return nil, fmt.Errorf("%w: the profile in %s is of %q", fs.ErrNotExist, dir, p.Host)
	case p.Decoders != Decoders:
		return nil, staleError{dir: dir, have: p.Decoders}
	}
	return p, nil
}

// unusableError is Lookup's error for a profile file it cannot use (of
// another layout, or damaged): fs.ErrNotExist to callers that measure a
// missing profile, without its "file does not exist" in the text.
type unusableError struct{ err error }

func (e unusableError) Error() string {
	return "a profile this build cannot use: " + e.err.Error()
}

func (e unusableError) Is(target error) bool { return target == fs.ErrNotExist }

func (e unusableError) Unwrap() error { return e.err }

// staleError is Lookup's error for a profile of other decoders: ErrStale,
// and fs.ErrNotExist to callers that measure a missing profile, without
// the latter's "file does not exist" in its text (the file is there).
type staleError struct {
	dir  string
	have int
}

func (e staleError) Error() string {
	return fmt.Sprintf("%v: the profile in %s was measured with decoders %d, this build's are %d", ErrStale, e.dir, e.have, Decoders)
}

func (e staleError) Is(target error) bool { return target == ErrStale || target == fs.ErrNotExist }

// Save writes p into dir (made if need be) as the profile of p.Host, and
// returns the file's path.
func Save(dir string, p *Profile) (string, error) {
	if err := p.Check(); err != nil {
		return "", err
	}
	file := path(dir, p.Host)
	return file, SaveFile(file, p)
}

// SaveFile writes p to file (through a temporary file beside it, renamed
// over it), making its folder where there is none: where SPLITZIP_PROFILE
// names one. Errors name the file or the folder, never the temporary file.
func SaveFile(file string, p *Profile) error {
	if err := p.Check(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(p, "", " ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(file)
	if err := os.MkdirAll(dir, atomicfile.DirPerm); err != nil {
		return &fs.PathError{Op: "mkdir", Path: dir, Err: errnoOf(err)}
	}
	f, err := atomicfile.CreateTemp(dir, "costmodel")
	if err != nil {
		return &fs.PathError{Op: "create", Path: file, Err: errnoOf(err)}
	}
	defer os.Remove(f.Name()) // after the rename, nothing
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return &fs.PathError{Op: "write", Path: file, Err: errnoOf(err)}
	}
	if err := f.Close(); err != nil {
		return &fs.PathError{Op: "write", Path: file, Err: errnoOf(err)}
	}
	if err := os.Rename(f.Name(), file); err != nil {
		return &fs.PathError{Op: "rename", Path: file, Err: errnoOf(err)}
	}
	return nil
}

// errnoOf is what a path or link error says went wrong, without its
// paths.
func errnoOf(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	if le, ok := errors.AsType[*os.LinkError](err); ok {
		return le.Err
	}
	return err
}
