package nodeshare

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"sync"
)

var (
	// ErrID is an id that is not 1 to 128 letters, digits, '.', '_' or
	// '-'.
	ErrID = errors.New("nodeshare: bad segment id")
	// ErrDir is a holders folder that is not a folder of this user's,
	// closed to others.
	ErrDir = errors.New("nodeshare: unsafe holders folder")
	// ErrSize is an open of an id this process holds with another size.
	ErrSize = errors.New("nodeshare: segment size differs")
	// ErrUnsupported is a system without anonymous memory files and /proc
	// (only Linux has both).
	ErrUnsupported = errors.New("nodeshare: not supported on this system")
)

// Options configures Open.
type Options struct {
	// Dir holds the holders and lock files; "" is DefaultDir().
	Dir string
	// Pin, if set, is called with a segment's bytes once per process,
	// when this process maps it (to register it with the GPU driver);
	// Unpin with the same bytes when the last Close unmaps it.
	Pin, Unpin func([]byte) error
}

// Info describes an open segment.
type Info struct {
	ID    string
	Bytes uint64
	// Made reports whether this process made (and filled) the segment,
	// rather than attaching to another process's.
	Made bool
	// Holders is how many processes held the segment when this process
	// opened it, itself included. Later opens in the same process report
	// what the first found.
	Holders int
}

// Segment is one open of a shared segment; Close it once.
type Segment struct {
	m    *mapping
	info Info
	once sync.Once
	err  error
}

// Bytes returns the segment's bytes, read-only: writing them faults.
func (s *Segment) Bytes() []byte { return s.m.body }

// Info returns what Open found.
func (s *Segment) Info() Info { return s.info }

// Close gives this open back; the last in the process unpins and unmaps
// the segment and leaves the holders list, and the kernel frees the
// memory once no process holds it.
func (s *Segment) Close() error {
	s.once.Do(func() { s.err = release(s.m) })
	return s.err
}

// mapping is a segment as this process holds it: the descriptor others
// open through /proc and the read-only mapping.
type mapping struct {
	id    string
	dir   string
	fd    int
	all   []byte // header and body, as mapped
	body  []byte
	refs  int
	unpin func([]byte) error
	info  Info // what the process's first open found
}

var (
	procMu   sync.Mutex
	mappings = map[string]*mapping{}
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// DirEnv names the environment variable that, when set, is DefaultDir.
const DirEnv = "SPLITZIP_SHARE_DIR"

// DefaultDir is the holders folder: $SPLITZIP_SHARE_DIR when set, else
// this user's /dev/shm/splitzip-UID, or under the temporary folder where
// /dev/shm is absent. Processes find each other's copies only through
// one folder.
func DefaultDir() string {
	if d := os.Getenv(DirEnv); d != "" {
		return d
	}
	base := "/dev/shm"
	if st, err := os.Stat(base); err != nil || !st.IsDir() {
		base = os.TempDir()
	}
	return fmt.Sprintf("%s/splitzip-%d", base, os.Getuid())
}

// Open returns the segment id of size bytes: attached to the one a live
// process on this machine holds, or else made, filled by fill (which
// writes all size bytes and returns nil, or an error to give up: nothing
// is left behind then), sealed and published. Processes opening the same
// id meanwhile wait for the fill and attach. Within a process, opens of
// one id share one mapping.
func Open(id string, size uint64, fill func([]byte) error, o Options) (*Segment, error) {
	if !idPattern.MatchString(id) {
		return nil, fmt.Errorf("%w: %q", ErrID, id)
	}
	dir := o.Dir
	if dir == "" {
		dir = DefaultDir()
	}
	procMu.Lock()
	defer procMu.Unlock()
	if m := mappings[id]; m != nil {
		if uint64(len(m.body)) != size {
			return nil, fmt.Errorf("%w: %s holds %d bytes, not %d", ErrSize, id, len(m.body), size)
		}
		m.refs++
		return &Segment{m: m, info: m.info}, nil
	}
	m, info, err := openShared(dir, id, size, fill)
	if err != nil {
		return nil, err
	}
	if o.Pin != nil {
		if err := o.Pin(m.body); err != nil {
			m.refs = 1
			leave(m)
			return nil, fmt.Errorf("nodeshare: pinning segment %s: %w", id, err)
		}
		m.unpin = o.Unpin
	}
	m.refs, m.info = 1, info
	mappings[id] = m
	return &Segment{m: m, info: info}, nil
}

// release gives back one reference to m; the last leaves.
func release(m *mapping) error {
	procMu.Lock()
	defer procMu.Unlock()
	if m.refs--; m.refs > 0 {
		return nil
	}
	delete(mappings, m.id)
	var err error
	if m.unpin != nil {
		err = m.unpin(m.body)
	}
	return errors.Join(err, leave(m))
}
