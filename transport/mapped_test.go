package transport

import (
	"errors"
	"os"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/shardcache"
)

func TestMappedUploads(t *testing.T) {
	c, src := fixture(t)

	// An engine that cannot register mappings: uploads fall back to the
	// staging ring and still land bit for bit.
	eng := NewCPUEngine(2, Hooks{Register: func(int) error { return ErrInjected }})
	if _, err := Load(eng, c, src, LoadOptions{MapFiles: true, Check: true}); err != nil {
		t.Fatalf("fallback from a failed registration: %v", err)
	}
	if eng.Registered() != 0 || eng.PinnedBytes() != 0 {
		t.Errorf("%d registrations, %d pinned bytes leaked", eng.Registered(), eng.PinnedBytes())
	}
	eng.Close()

	// A payload changed on disk fails its checksum, naming its tensor.
	var victim string
	var path string
	for _, sh := range src.Shards {
		for _, tn := range sh.Tensors {
			if o, err := c.Lookup(tn.Key); err == nil && o.Kind != shardcache.KindRaw && o.Size > DefaultSmallBytes {
				victim = tn.Name
				if path, err = c.ObjectPath(tn.Key); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if victim == "" {
		t.Fatal("no payload in the fixture")
	}
	orig, _ := os.ReadFile(path)
	bad := append([]byte(nil), orig...)
	bad[len(bad)-3] ^= 0x10
	os.WriteFile(path, bad, 0o644)
	defer os.WriteFile(path, orig, 0o644)
	eng = NewCPUEngine(2, Hooks{})
	defer eng.Close()
	_, err := Load(eng, c, src, LoadOptions{MapFiles: true})
	var te *Error
	if !errors.As(err, &te) || te.Tensor != victim || !errors.Is(err, codec.ErrChecksum) {
		t.Fatalf("corrupt mapped payload: %v, want a checksum error naming %s", err, victim)
	}
	if eng.Registered() != 0 {
		t.Errorf("%d registrations left after a failed load", eng.Registered())
	}
}
