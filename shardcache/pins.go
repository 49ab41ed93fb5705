package shardcache

// Pins keep objects that no checkpoint of the index uses yet: a pull
// commits what it has fetched every few hundred MiB and records the
// artifact's checkpoints last, so until it finishes its objects are
// unreferenced, and gc would remove what a pull run again resumes from.
// A pin is a file under pins/ naming the keys it keeps; the writer that
// made it removes it when the checkpoints are recorded.

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/splitzip/splitzip/atomicfile"
)

// PinsDir is the folder of a cache's pins.
const PinsDir = "pins"

// maxPinKeys bounds the keys a pin file may name (an index's bound on
// objects is larger than any real checkpoint's count).
const maxPinKeys = 1 << 24

// Pin is a pin's file name and what it says.
type Pin struct {
	Name string `json:"name"`
	Note string `json:"note"` // what it keeps them for
	Keys []Key  `json:"-"`
}

// Pin keeps keys from gc under the name name (a file name: letters,
// digits, '.', '-' and '_'), with note saying why, until Unpin. Pinning
// a name again replaces its keys.
func (w *Writer) Pin(name, note string, keys []Key) error {
	if err := checkPinName(name); err != nil {
		return err
	}
	dir := filepath.Join(w.dir, PinsDir)
	if err := os.MkdirAll(dir, atomicfile.DirPerm); err != nil {
		return w.cacheError(err)
	}
	f, err := atomicfile.CreateTemp(filepath.Join(w.dir, "tmp"), "pin")
	if err != nil {
		return w.cacheError(err)
	}
	defer os.Remove(f.Name()) // gone after the rename
	bw := bufio.NewWriter(f)
	fmt.Fprintf(bw, "# %s\n", strings.ReplaceAll(note, "\n", " "))
	for _, k := range keys {
		fmt.Fprintln(bw, k)
	}
	err = bw.Flush()
	if err == nil && !w.noSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, name))
	}
	return w.cacheError(err)
}

// Unpin removes the pin name; a pin that is not there is no error.
func (w *Writer) Unpin(name string) error {
	if err := checkPinName(name); err != nil {
		return err
	}
	err := os.Remove(filepath.Join(w.dir, PinsDir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// checkPinName refuses a pin name that is not a plain file name.
func checkPinName(name string) error {
	if name == "" || name[0] == '.' || strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_')
	}) >= 0 {
		return fmt.Errorf("shardcache: pin name %q: want letters, digits, '.', '-' and '_'", name)
	}
	return nil
}

// readPins reads the pins of the cache in dir, by name. A pin file that
// does not parse is an error naming it: gc keeps what it cannot read
// rather than remove what it may pin.
func readPins(dir string) ([]Pin, error) { return readPinsAs(dir, false) }

// readPinsAs is readPins; with anyway, a damaged pin is no error but a
// Pin of its name whose note says what is wrong (gc --unfinished drops
// it like any other).
func readPinsAs(dir string, anyway bool) ([]Pin, error) {
	ents, err := os.ReadDir(filepath.Join(dir, PinsDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var pins []Pin
	for _, e := range ents {
		if e.IsDir() || checkPinName(e.Name()) != nil {
			continue
		}
		p, err := readPin(filepath.Join(dir, PinsDir, e.Name()))
		if err != nil && anyway {
			p, err = Pin{Name: e.Name(), Note: "a damaged pin (" + err.Error() + ")"}, nil
		}
		if err != nil {
			return nil, err
		}
		pins = append(pins, p)
	}
	sort.Slice(pins, func(i, j int) bool { return pins[i].Name < pins[j].Name })
	return pins, nil
}

// readPin reads one pin file.
func readPin(path string) (Pin, error) {
	f, err := os.Open(path)
	if err != nil {
		return Pin{}, err
	}
	defer f.Close()
	p := Pin{Name: filepath.Base(path)}
	s := bufio.NewScanner(f)
	for line := 1; s.Scan(); line++ {
		t := s.Text()
		switch {
		case line == 1 && strings.HasPrefix(t, "# "):
			p.Note = t[2:]
		case len(p.Keys) == maxPinKeys:
			return Pin{}, fmt.Errorf("%s: %w: more than %d keys", path, ErrPinCorrupt, maxPinKeys)
		default:
			k := Key(t)
			if _, err := k.hexPart(); err != nil {
				return Pin{}, fmt.Errorf("%s: line %d: %w: %q is not a content key (remove the file, and gc lets go of what it kept)", path, line, ErrPinCorrupt, t)
			}
			p.Keys = append(p.Keys, k)
		}
	}
	if err := s.Err(); err != nil {
		return Pin{}, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}
