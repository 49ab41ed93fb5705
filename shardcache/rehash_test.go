package shardcache

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRehash: a copy of a shard's bytes passes and returns its time; a
// byte changed is ErrSourceChanged naming the tensor; regions that leave
// a hole are ErrIndexCorrupt before anything is read.
func TestRehash(t *testing.T) {
	data := []byte("HEADERtensor-a..gapgaptensor-b!")
	sh := &Shard{Name: "m.safetensors", Size: uint64(len(data)),
		Header: Region{Offset: 0, Size: 6, Key: KeyOf(data[:6])},
		Tensors: []Tensor{
			{Name: "a", Offset: 6, Size: 10, Key: KeyOf(data[6:16])},
			{Name: "b", Offset: 22, Size: 9, Key: KeyOf(data[22:31])},
		},
		Gaps: []Region{{Offset: 16, Size: 6, Key: KeyOf(data[16:22])}},
	}
	path := filepath.Join(t.TempDir(), sh.Name)
	os.WriteFile(path, data, 0o644)
	when := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	os.Chtimes(path, when, when)
	if got, err := Rehash(context.Background(), sh, path); err != nil || !got.Equal(when) {
		t.Errorf("a copy of the same bytes: %v, %v", got, err)
	}
	changed := append([]byte(nil), data...)
	changed[25] ^= 1
	os.WriteFile(path, changed, 0o644)
	_, err := Rehash(context.Background(), sh, path)
	var te *TensorError
	if !errors.Is(err, ErrSourceChanged) || !strings.Contains(err.Error(), `tensor "b"`) || !errors.As(err, &te) || te.Tensor != "b" || te.File != path || strings.Count(err.Error(), path) != 1 || strings.Count(err.Error(), `"b"`) != 1 {
		t.Errorf("a byte of b changed: %v; want ErrSourceChanged naming tensor b (a field too) and the file once", err)
	}
	sh.Gaps = nil
	if _, err := Rehash(context.Background(), sh, path); !errors.Is(err, ErrIndexCorrupt) {
		t.Errorf("regions with a hole: %v, want ErrIndexCorrupt", err)
	}
}
