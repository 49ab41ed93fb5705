package loader

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/splitzip/splitzip/safetensors"
)

// TestMetadata: every shard's __metadata__, in the checkpoint's order, as
// its file says, also with the source moved away (the headers are the
// cache's).
func TestMetadata(t *testing.T) {
	l, src := openFixture(t)
	want := func() []ShardMetadata {
		var out []ShardMetadata
		for _, sh := range l.src.Shards {
			f, err := os.Open(filepath.Join(src, sh.Name))
			if err != nil {
				t.Fatal(err)
			}
			st, _ := f.Stat()
			h, err := safetensors.Read(f, st.Size(), sh.Name)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, ShardMetadata{Shard: sh.Name, Metadata: h.Metadata})
		}
		return out
	}()
	if len(want) < 2 {
		t.Fatalf("%d shards in the fixture", len(want))
	}
	got, err := l.Metadata()
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Metadata: %+v, %v; want %+v", got, err, want)
	}
	if err := os.Rename(src, src+".gone"); err != nil {
		t.Fatal(err)
	}
	if got, err := l.Metadata(); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Metadata with the source gone: %+v, %v", got, err)
	}
}
