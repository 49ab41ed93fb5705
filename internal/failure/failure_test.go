package failure

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/safetensors"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/transport"
	"github.com/splitzip/splitzip/vmm"
)

// TestKindOf: each kind's sentinels, wrapped as the packages wrap them,
// classify to it; marks win over sentinels; the unknown is internal.
func TestKindOf(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("model.safetensors: tensor %q: %w", "w", err) }
	for _, c := range []struct {
		name string
		err  error
		want Kind
	}{
		{"nil", nil, OK},
		{"cancelled", wrap(context.Canceled), Interrupted},
		{"no driver", fmt.Errorf("x: %w", cuda.ErrNoDriver), Device},
		{"cuda call", wrap(&cuda.Error{Call: "cuMemAlloc", Code: 2}), Device},
		{"output in source", wrap(pipeline.ErrOutputInSource), Usage},
		{"ambiguous source", wrap(shardcache.ErrAmbiguousSource), Usage},
		{"marked usage", Usagef("--jobs: %q is not a whole number", "x"), Usage},
		{"source changed", wrap(shardcache.ErrSourceChanged), Input},
		{"source changed and mismatch", fmt.Errorf("%w: %w", pipeline.ErrMismatch, shardcache.ErrSourceChanged), Input},
		{"short read", wrap(transport.ErrShortRead), Input},
		{"checksum", wrap(&codec.CorruptError{Err: codec.ErrChecksum}), Integrity},
		{"entropy payload", wrap(entropy.ErrPayload), Integrity},
		{"object corrupt with a path error", fmt.Errorf("%w: %w", shardcache.ErrObjectCorrupt, &fs.PathError{Op: "read", Path: "o", Err: syscall.EIO}), Integrity},
		{"mismatch", wrap(pipeline.ErrMismatch), Integrity},
		{"arena check", wrap(&transport.Error{Tensor: "w", Err: transport.ErrMismatch}), Integrity},
		{"not a cache", wrap(shardcache.ErrNotCache), Input},
		{"cache version", wrap(shardcache.ErrVersion), Input},
		{"not safetensors", wrap(&safetensors.FormatError{File: "f", Reason: "r"}), Input},
		{"missing file", &fs.PathError{Op: "open", Path: "/x", Err: syscall.ENOENT}, Input},
		{"unreadable file", &fs.PathError{Op: "open", Path: "/x", Err: syscall.EACCES}, Input},
		{"unwritable folder", &fs.PathError{Op: "mkdir", Path: "/x", Err: syscall.EACCES}, Resource},
		{"rename refused", &os.LinkError{Op: "rename", Old: "a", New: "b", Err: syscall.EPERM}, Resource},
		{"disk full", wrap(&fs.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}), Resource},
		{"quota", wrap(syscall.EDQUOT), Resource},
		{"read-only", wrap(syscall.EROFS), Resource},
		{"locked", wrap(shardcache.ErrLocked), Resource},
		{"in use", wrap(shardcache.ErrInUse), Resource},
		{"output inside the cache", wrap(shardcache.ErrInsideCache), Usage},
		{"empty cache", wrap(shardcache.ErrNoCheckpoint), Input},
		{"marked over sentinel", Mark(Resource, wrap(codec.ErrChecksum)), Resource},
		{"outer mark wins", Mark(Usage, Mark(Input, errors.New("x"))), Usage},
		{"unknown", errors.New("something new"), Internal},
	} {
		if got := KindOf(c.err); got != c.want {
			t.Errorf("%s: KindOf(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// TestKindTable: the exit codes and names of the shared design, distinct.
func TestKindTable(t *testing.T) {
	want := map[Kind]struct {
		name string
		code int
	}{OK: {"ok", 0}, Usage: {"usage", 2}, Input: {"input", 3}, Integrity: {"integrity", 1}, Resource: {"resource", 4},
		Device: {"device", 5}, Internal: {"internal", 70}, Interrupted: {"interrupted", 130}}
	seen := map[int]Kind{}
	for k, w := range want {
		if k.String() != w.name || k.ExitCode() != w.code || (k != OK && k.Description() == "") {
			t.Errorf("kind %d: %q exit %d, want %q exit %d", k, k.String(), k.ExitCode(), w.name, w.code)
		}
		if o, dup := seen[k.ExitCode()]; dup {
			t.Errorf("%v and %v share exit code %d", k, o, k.ExitCode())
		}
		seen[k.ExitCode()] = k
	}
	if len(Kinds) != len(want)-1 {
		t.Errorf("Kinds lists %d kinds, want %d", len(Kinds), len(want)-1)
	}
	if Kind(200).ExitCode() != Internal.ExitCode() {
		t.Errorf("an unknown kind exits %d", Kind(200).ExitCode())
	}
}

// TestMessage: errors of the standard library read as sentences, with no
// operation, function or Go type names, and the rest of the text kept.
func TestMessage(t *testing.T) {
	_, numErr := strconv.ParseInt("abc", 10, 64)
	_, rangeErr := strconv.ParseInt("99999999999999999999", 10, 64)
	var typeErr error
	var v struct{ Size uint64 }
	typeErr = json.Unmarshal([]byte(`{"Size": "x"}`), &v)
	_, openErr := os.Open(filepath.Join(t.TempDir(), "nope"))
	for _, c := range []struct {
		err        error
		want, bans []string
	}{
		{fmt.Errorf("--jobs: %w", numErr), []string{`--jobs: "abc" is not a number`}, []string{"strconv", "ParseInt", "invalid syntax"}},
		{rangeErr, []string{"out of range"}, []string{"strconv"}},
		{fmt.Errorf("index.json: %w", typeErr), []string{`index.json: field "Size" holds a string where a whole number from 0 to 18446744073709551615 belongs`}, []string{"Go struct", "uint64", "json: cannot"}},
		{fmt.Errorf("cache: %w", openErr), []string{"cache: ", "nope: no such file or directory"}, []string{"open "}},
		{&fs.PathError{Op: "mkdir", Path: "/ro/c", Err: syscall.EROFS}, []string{"cannot create the folder /ro/c: read-only file system"}, nil},
		{&os.LinkError{Op: "rename", Old: "a", New: "b", Err: syscall.EXDEV}, []string{"cannot rename a to b"}, nil},
		{fmt.Errorf("x: %w", os.NewSyscallError("mmap", syscall.ENOMEM)), []string{"x: cannot map the file into memory: cannot allocate memory"}, []string{"mmap"}},
		{fmt.Errorf("index.json: %v", typeErr), []string{`index.json: field "Size" holds a string where a whole number from 0 to 18446744073709551615 belongs`}, []string{"Go struct", "uint64", "json: cannot"}},
		{fmt.Errorf("--jobs: %v", numErr), []string{`--jobs: "abc" is not a number`}, []string{"strconv", "invalid syntax"}},
		{errors.Join(errors.New("first"), &fs.PathError{Op: "lstat", Path: "/p", Err: syscall.ENOENT}), []string{"first", "/p: no such file"}, []string{"lstat"}},
	} {
		got := Message(c.err)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("Message(%q) = %q, want it to contain %q", c.err, got, w)
			}
		}
		for _, b := range c.bans {
			if strings.Contains(got, b) {
				t.Errorf("Message(%q) = %q shows %q", c.err, got, b)
			}
		}
	}
}

// TestLocate: the outermost file and tensor named in a chain.
func TestLocate(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "codec"), 0o755)
	t.Chdir(dir)
	for _, c := range []struct {
		err          error
		file, tensor string
	}{
		{errors.New("x"), "", ""},
		{fmt.Errorf("verify: %w", &pipeline.TensorError{File: "a.safetensors", Tensor: "w", Err: codec.ErrChecksum}), "a.safetensors", "w"},
		{&safetensors.FormatError{File: "b.safetensors", Reason: "r"}, "b.safetensors", ""},
		{&transport.Error{Tensor: "t", Err: &fs.PathError{Op: "read", Path: "c.safetensors", Err: syscall.EIO}}, "c.safetensors", "t"},
		{&fs.PathError{Op: "open", Path: "/d", Err: syscall.ENOENT}, "/d", ""},
		// Named apart from the text (trial 71): a duplicate name, a
		// folder that is no cache (a relative one of letters alone).
		{fmt.Errorf("load: %w", &vmm.DuplicateError{Name: "w", First: "a.safetensors", Second: "b.safetensors"}), "b.safetensors", "w"},
		{&shardcache.FileError{File: "ck", Err: shardcache.ErrNotCache}, "ck", ""},
		// Failing those, the path the text starts with, where it exists
		// or is an absolute one in a folder that exists (a file found
		// missing), or the one an error it wraps starts with, less a pack
		// member's range.
		{fmt.Errorf("%s: not a cache", dir), dir, ""},
		// A file that could not be written, below a tensor's error that
		// names its source.
		{&pipeline.TensorError{File: "src.safetensors", Tensor: "w", Err: &fs.PathError{Op: "write", Path: "/out/obj", Err: syscall.EFBIG}}, "/out/obj", "w"},
		{&pipeline.TensorError{File: "src.safetensors", Tensor: "w", Err: &fs.PathError{Op: "read", Path: "/out/obj", Err: syscall.EIO}}, "src.safetensors", "w"},
		{fmt.Errorf("%s/missing: not a cache", dir), dir + "/missing", ""},
		{fmt.Errorf("%s/no/missing: not a cache", dir), "", ""},
		{&transport.Error{Tensor: "w", Err: fmt.Errorf("%s/pack (payload blake3:ab): %w", dir, codec.ErrChecksum)}, dir + "/pack", "w"},
		{&transport.Error{Tensor: "w", Err: fmt.Errorf("codec/gone: %w", codec.ErrChecksum)}, "codec/gone", "w"}, // relative, its folder there
		{errors.New("missing: not a cache"), "", ""},
		{fmt.Errorf("tensor \"w\": %w", fmt.Errorf("%s/objects/ab/abcd: %w", dir, codec.ErrChecksum)), "", ""}, // no such folder
		{&transport.Error{Tensor: "w", Err: fmt.Errorf("%s/pack[16:+32]: %w", dir, codec.ErrChecksum)}, dir + "/pack", "w"},
		{&transport.Error{Tensor: "w", Err: fmt.Errorf("%s: %w", dir, codec.ErrChecksum)}, dir, "w"},
		{errors.New("tensor \"w\": bad"), "", ""},
		{errors.New("codec: a package's words, not the folder ./codec"), "", ""},
	} {
		if f, tn := Locate(c.err); f != c.file || tn != c.tensor {
			t.Errorf("Locate(%v) = %q, %q; want %q, %q", c.err, f, tn, c.file, c.tensor)
		}
	}
}

// TestMessageJoined: errors joined from tensors that failed alike are
// each reworded once (it said "cannot cannot write" for the first and
// left the second as Go wrote it).
func TestMessageJoined(t *testing.T) {
	pe := func() error { return &fs.PathError{Op: "write", Path: "/c", Err: syscall.ENOSPC} }
	err := errors.Join(fmt.Errorf("tensor a: %w", pe()), fmt.Errorf("tensor b: %w", pe()))
	msg := Message(err)
	if strings.Count(msg, "cannot write /c") != 2 || strings.Contains(msg, "cannot cannot") || strings.Contains(msg, "\nwrite") {
		t.Errorf("Message = %q", msg)
	}
}
