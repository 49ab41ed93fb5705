package nodeshare

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The segment's first page is its header; the body follows.
const (
	headerBytes = 4096
	magic       = "SZNODE01"
	// seals are what a published segment carries: no writes, no change
	// of size, no change of seals.
	seals = unix.F_SEAL_WRITE | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
)

// header is a segment's first page: magic, body size, complete flag
// (set once filled), id.
func header(id string, size uint64, complete bool) []byte {
	h := make([]byte, 32+len(id))
	copy(h, magic)
	binary.LittleEndian.PutUint64(h[8:], size)
	if complete {
		h[16] = 1
	}
	binary.LittleEndian.PutUint32(h[24:], uint32(len(id)))
	copy(h[32:], id)
	return h
}

// openShared attaches to a live holder's segment of id, or makes one,
// under the id's lock, and adds this process to its holders.
func openShared(dir, id string, size uint64, fill func([]byte) error) (*mapping, Info, error) {
	if err := ownDir(dir); err != nil {
		return nil, Info{}, err
	}
	lk, err := lock(filepath.Join(dir, id+".lock"))
	if err != nil {
		return nil, Info{}, err
	}
	defer lk.Close()
	live := liveHolders(dir, id, size)
	info := Info{ID: id, Bytes: size}
	var m *mapping
	for _, h := range live {
		if m, err = attach(h, id, size); err == nil {
			break
		}
	}
	if m == nil {
		if m, err = create(id, size, fill); err != nil {
			return nil, Info{}, err
		}
		info.Made = true
	}
	m.dir = dir
	live = append(live, holder{os.Getpid(), m.fd})
	info.Holders = len(live)
	if err := writeHolders(dir, id, live); err != nil {
		unmap(m)
		return nil, Info{}, err
	}
	return m, info, nil
}

// leave unmaps m and takes this process off its holders, removing the
// id's files when no holder is left.
func leave(m *mapping) error {
	lk, err := lock(filepath.Join(m.dir, m.id+".lock"))
	if err != nil {
		unmap(m)
		return err
	}
	defer lk.Close()
	var rest []holder
	for _, h := range liveHolders(m.dir, m.id, uint64(len(m.body))) {
		if h.pid != os.Getpid() || h.fd != m.fd {
			rest = append(rest, h)
		}
	}
	unmap(m)
	if len(rest) > 0 {
		return writeHolders(m.dir, m.id, rest)
	}
	err = os.Remove(filepath.Join(m.dir, m.id+".holders"))
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	// Removed while held: a process waiting for the lock finds the path
	// gone or a new file there, and locks again (lock).
	return errors.Join(err, os.Remove(filepath.Join(m.dir, m.id+".lock")))
}

func unmap(m *mapping) {
	unix.Munmap(m.all)
	unix.Close(m.fd)
}

// create makes a segment: a sealable memory file of header and size
// bytes, filled while mapped writable, then marked complete, sealed and
// mapped read-only.
func create(id string, size uint64, fill func([]byte) error) (*mapping, error) {
	fd, err := unix.MemfdCreate("splitzip-"+id, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if errors.Is(err, unix.ENOSYS) {
		return nil, ErrUnsupported
	}
	if err != nil {
		return nil, fmt.Errorf("nodeshare: memfd_create: %w", err)
	}
	total := headerBytes + int64(size)
	if err := unix.Ftruncate(fd, total); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("nodeshare: sizing segment %s to %d bytes: %w", id, total, err)
	}
	w, err := unix.Mmap(fd, 0, int(total), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("nodeshare: mapping segment %s: %w", id, err)
	}
	copy(w, header(id, size, false))
	err = fill(w[headerBytes:])
	if err == nil {
		w[16] = 1
	}
	unix.Munmap(w)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("nodeshare: sealing segment %s: %w", id, err)
	}
	return mapRead(fd, id, size)
}

// mapRead maps the segment behind fd read-only, with its pages present.
func mapRead(fd int, id string, size uint64) (*mapping, error) {
	all, err := unix.Mmap(fd, 0, headerBytes+int(size), unix.PROT_READ, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("nodeshare: mapping segment %s: %w", id, err)
	}
	return &mapping{id: id, fd: fd, all: all, body: all[headerBytes:]}, nil
}

// attach opens holder h's segment through /proc and maps it, if it is a
// complete, sealed segment of id and size.
func attach(h holder, id string, size uint64) (*mapping, error) {
	p := fmt.Sprintf("/proc/%d/fd/%d", h.pid, h.fd)
	// Non-blocking: a reused pid's descriptor may be a FIFO.
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if err := check(fd, id, size); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return mapRead(fd, id, size)
}

// check reports whether fd is a complete, sealed segment of id and size.
func check(fd int, id string, size uint64) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != headerBytes+int64(size) {
		return fmt.Errorf("nodeshare: not a segment of %d bytes", size)
	}
	if s, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0); err != nil || s&seals != seals {
		return fmt.Errorf("nodeshare: segment not sealed")
	}
	want := header(id, size, true)
	got := make([]byte, len(want))
	if n, err := unix.Pread(fd, got, 0); err != nil || n != len(got) || !bytes.Equal(got, want) {
		return fmt.Errorf("nodeshare: not a complete segment %s", id)
	}
	return nil
}

// holder is a process holding a segment and its descriptor.
type holder struct{ pid, fd int }

// liveHolders reads the id's holders file and returns the holders whose
// descriptor is still a complete segment of id and size.
func liveHolders(dir, id string, size uint64) []holder {
	b, err := os.ReadFile(filepath.Join(dir, id+".holders"))
	if err != nil {
		return nil
	}
	var live []holder
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		pid, err1 := strconv.Atoi(f[0])
		fd, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil || pid <= 0 || fd < 0 {
			continue
		}
		h := holder{pid, fd}
		p := fmt.Sprintf("/proc/%d/fd/%d", pid, fd)
		c, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			continue
		}
		if check(c, id, size) == nil {
			live = append(live, h)
		}
		unix.Close(c)
	}
	return live
}

// writeHolders replaces the id's holders file (temp file and rename).
func writeHolders(dir, id string, hs []holder) error {
	var b strings.Builder
	for _, h := range hs {
		fmt.Fprintf(&b, "%d %d\n", h.pid, h.fd)
	}
	tmp, err := os.CreateTemp(dir, id+".holders.*")
	if err != nil {
		return fmt.Errorf("nodeshare: %w", err)
	}
	_, err = tmp.WriteString(b.String())
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, id+".holders"))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("nodeshare: writing holders of %s: %w", id, err)
	}
	return nil
}

// ownDir makes dir (mode 0700) or checks that it is a folder of this
// user's that no one else may write or list.
func ownDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("nodeshare: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("nodeshare: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Getuid() || st.Mode&0o077 != 0 {
		return fmt.Errorf("%w: %s (mode %o, owner %d)", ErrDir, dir, st.Mode&0o7777, st.Uid)
	}
	return nil
}

// lock takes the exclusive lock of path, made if absent; a lock file
// removed while this process waited is made again and locked anew.
func lock(path string) (*os.File, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("nodeshare: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("nodeshare: locking %s: %w", path, err)
		}
		var held, now unix.Stat_t
		if unix.Fstat(int(f.Fd()), &held) == nil && unix.Stat(path, &now) == nil && held.Ino == now.Ino && held.Dev == now.Dev {
			return f, nil
		}
		f.Close()
	}
}
