package atomicfile

import (
	"os"
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
