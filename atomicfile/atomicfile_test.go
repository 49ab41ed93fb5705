package atomicfile

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestCreateTempRespectsUmask(t *testing.T) {
	dir := t.TempDir()
	for _, mask := range []int{0o022, 0o077, 0o002} {
		old := syscall.Umask(mask)
		f, err := CreateTemp(dir, "x-")
		syscall.Umask(old)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		f.Close()
		if got, want := st.Mode().Perm(), os.FileMode(Perm&^mask); got != want {
			t.Errorf("umask %03o: mode %v, want %v", mask, got, want)
		}
	}
	a, _ := CreateTemp(dir, "y-")
	b, _ := CreateTemp(dir, "y-")
	if a.Name() == b.Name() {
		t.Errorf("two temp files named %s", a.Name())
	}
}

// TestTempNames: a temporary file's name starts with TempPrefix and this
// process's id and ends with its label; it is no stale file while this
// process runs.
func TestTempNames(t *testing.T) {
	f, err := CreateTemp(t.TempDir(), "model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	name := filepath.Base(f.Name())
	if want := TempPrefix + strconv.Itoa(os.Getpid()) + "-"; !strings.HasPrefix(name, want) || !strings.HasSuffix(name, "-model.safetensors") || !IsTemp(name) {
		t.Errorf("temporary file %s: want %s*-model.safetensors", name, want)
	}
	if Stale(name) {
		t.Errorf("%s of this live process is stale", name)
	}
	d, err := MkdirTemp(filepath.Dir(f.Name()), "out")
	if err != nil || !strings.HasPrefix(filepath.Base(d), TempPrefix+strconv.Itoa(os.Getpid())+"-") || !strings.HasSuffix(d, "-out") {
		t.Errorf("MkdirTemp: %s, %v", d, err)
	}
}

// TestRemoveStale: RemoveStale removes the temporary files of a process
// that is gone and leaves those of live processes (this one, pid 1),
// malformed names and other files.
func TestRemoveStale(t *testing.T) {
	dir := t.TempDir()
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := []string{
		TempPrefix + strconv.Itoa(gone.Process.Pid) + "-abc-index",
		TempPrefix + strconv.Itoa(gone.Process.Pid) + "-def-m.safetensors",
	}
	kept := []string{
		TempPrefix + strconv.Itoa(os.Getpid()) + "-abc-index",
		TempPrefix + "1-abc-index",
		TempPrefix + "x-abc-index",
		TempPrefix + "-1-abc",
		".m.safetensors.tmp-abc",
		"m.safetensors",
	}
	for _, n := range append(append([]string{}, dead...), kept...) {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("12345"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A folder built whole (MkdirTemp) by the process that is gone.
	folder := TempPrefix + strconv.Itoa(gone.Process.Pid) + "-ghi-out"
	os.MkdirAll(filepath.Join(dir, folder, "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, folder, "sub", "m.safetensors"), []byte("123"), 0o644)
	dead = append(dead, folder)
	files, bytes, err := RemoveStale(dir)
	if err != nil || files != 3 || bytes != 13 {
		t.Errorf("RemoveStale: %d files, %d bytes, %v; want 3 files, 13 bytes", files, bytes, err)
	}
	for _, n := range dead {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			t.Errorf("%s of a process that is gone is still there", n)
		}
	}
	for _, n := range kept {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			t.Errorf("%s was removed: %v", n, err)
		}
	}
	if files, _, err := RemoveStale(filepath.Join(dir, "none")); files != 0 || err != nil {
		t.Errorf("RemoveStale of a missing folder: %d, %v", files, err)
	}
}
