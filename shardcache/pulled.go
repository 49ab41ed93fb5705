package shardcache

import (
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"regexp"
)

// PulledFolder is the folder of a cache under which a pull records the
// checkpoints it brings (PulledRoot); nothing is ever written there.
const PulledFolder = "checkpoints"

// PulledRoot is where a pull into the cache at dir (absolute) records a
// checkpoint compressed from the folder root on the machine that pushed
// it: dir/checkpoints/NAME-HASH (root's last element and the start of its
// SHA-256). No file lies there (decompress and relocate refuse folders
// inside a cache), so loads and verify serve the checkpoint from the
// cache, which holds every tensor of a pushed one, whatever lies at root
// on this machine: a file there of the recorded size and time was read in
// the cache's stead, and any other file failed loads as a source changed.
// relocate attaches the checkpoint to a copy of its files; FindSource
// takes root for it.
func PulledRoot(dir, root string) string {
	return filepath.Join(dir, PulledFolder, pulledName(root))
}

// pulledName is PulledRoot's last element for root: NAME-HASH, NAME
// kept from a root that is a PulledRoot already (a checkpoint pulled,
// pushed and pulled again is named once, not a hash a hop).
func pulledName(root string) string {
	name := filepath.Base(root)
	switch {
	case name == "/" || name == "." || name == "":
		name = "checkpoint"
	case IsPulledRoot(root):
		name = name[:len(name)-9]
	}
	sum := sha256.Sum256([]byte(root))
	return fmt.Sprintf("%s-%x", name, sum[:4])
}

// IsPulledRoot reports whether root has PulledRoot's form: a checkpoint
// a pull recorded, whose files are never read.
func IsPulledRoot(root string) bool {
	return filepath.Base(filepath.Dir(root)) == PulledFolder && pulledSuffix.MatchString(filepath.Base(root))
}

// pulledSuffix matches the last element of a PulledRoot.
var pulledSuffix = regexp.MustCompile(`.-[0-9a-f]{8}$`)

// pulledAt returns the position in srcs of the checkpoint a pull recorded
// from the folder sel names, or the file sel names in it (the path it was
// compressed from, on the machine that pushed it), by the name
// PulledRoot gave it (in whatever folder the cache is now); -1 if none
// or several match.
func pulledAt(srcs []Source, sel string) int {
	abs, err := filepath.Abs(sel)
	if err != nil {
		return -1
	}
	at := -1
	for _, f := range []struct{ root, file string }{{abs, ""}, {filepath.Dir(abs), filepath.Base(abs)}} {
		name := pulledName(f.root)
		for i := range srcs {
			s := &srcs[i]
			if !IsPulledRoot(s.Root) || filepath.Base(s.Root) != name || f.file != "" && filepath.Base(s.Path()) != f.file {
				continue
			}
			if at >= 0 && at != i {
				return -1
			}
			at = i
		}
		if at >= 0 {
			return at
		}
	}
	return -1
}
