package pipeline

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/splitzip/splitzip/internal/cachetest"
	"github.com/splitzip/splitzip/shardcache"
)

// TestCompressMendsDamage: compressing a checkpoint again into a cache
// whose objects were damaged (a flipped byte, a payload forged to check
// by itself, a removed file) stores them anew, says so in Mended, and
// leaves a cache verify accepts; an intact cache is reused unchanged.
// Each codec, packed objects and objects in files of their own, payloads
// and raw copies.
func TestCompressMendsDamage(t *testing.T) {
	type damage struct {
		name string
		do   func(*shardcache.Cache, shardcache.Key, *shardcache.Object)
	}
	damages := []damage{
		{"flip", func(c *shardcache.Cache, k shardcache.Key, o *shardcache.Object) {
			cachetest.Flip(t, c, k, int64(o.Size/2), 0x10)
		}},
		{"forge", func(c *shardcache.Cache, k shardcache.Key, o *shardcache.Object) {
			cachetest.Forge(t, c, k, -1, 0x01)
		}},
		{"remove", func(c *shardcache.Cache, k shardcache.Key, _ *shardcache.Object) {
			cachetest.Remove(t, c, k)
		}},
	}
	for _, codecName := range []string{CodecFixed, CodecEntropy} {
		for _, packMax := range []int64{-1, 0} {
			kinds := map[string]string{CodecFixed: shardcache.KindFixed, CodecEntropy: shardcache.KindEntropy}
			for _, kind := range []string{kinds[codecName], shardcache.KindRaw} {
				for _, d := range damages {
					if d.name == "forge" && kind == shardcache.KindRaw {
						continue // a raw object has no checksum of its own to forge
					}
					name := fmt.Sprintf("%s/pack%d/%s/%s", codecName, packMax, kind, d.name)
					t.Run(name, func(t *testing.T) {
						dir := t.TempDir()
						src, cache := filepath.Join(dir, "ck"), filepath.Join(dir, "cache")
						gen(t, src, 2<<20, 1, 5)
						opts := CompressOptions{Output: cache, Jobs: 2, MinSaving: DefaultMinSaving, SelfContained: true, NoSync: true, Codec: codecName, PackMax: packMax}
						if _, err := Compress(context.Background(), src, opts); err != nil {
							t.Fatal(err)
						}
						c, err := shardcache.Open(cache)
						if err != nil {
							t.Fatal(err)
						}
						defer c.Close()
						key, o := objectOf(c, kind, packMax == 0)
						if o == nil {
							t.Fatalf("no %s object (packed: %v)", kind, packMax == 0)
						}
						d.do(c, key, o)
						if v := mustVerify(t, cache); v.OK() {
							t.Fatal("verify accepts the damaged cache")
						}
						res, err := Compress(context.Background(), src, opts)
						if err != nil {
							t.Fatal(err)
						}
						// A removed pack takes its other members with it.
						if !slices.ContainsFunc(res.Mended, func(m shardcache.Mend) bool { return m.Key == key }) || len(res.Mended) > 1 && d.name != "remove" {
							t.Fatalf("mended %d objects, want %s among them: %.500v", len(res.Mended), key, res.Mended)
						}
						if v := mustVerify(t, cache); !v.OK() {
							t.Fatalf("verify after compressing again: %+v", v.Problems)
						}
						if res, err := Compress(context.Background(), src, opts); err != nil || len(res.Mended) != 0 {
							t.Fatalf("a third compress: mended %+v, %v", res.Mended, err)
						}
						// The damaged bytes left in a pack go with gc.
						c.Close()
						w, err := shardcache.Create(cache)
						if err != nil {
							t.Fatal(err)
						}
						_, err = w.GC(context.Background(), shardcache.GCOptions{Check: CheckStoredPayload})
						w.Close()
						if err != nil {
							t.Fatal(err)
						}
						after, err := shardcache.Open(cache)
						if err != nil {
							t.Fatal(err)
						}
						after.Close()
						if dead := after.Index().Packs().DeadBytes; dead != 0 {
							t.Fatalf("gc after the mend left %d bytes in packs that no object covers", dead)
						}
						if v := mustVerify(t, cache); !v.OK() {
							t.Fatalf("verify after gc: %+v", v.Problems)
						}
					})
				}
			}
		}
	}
}

// objectOf returns an object of kind in c (a fixed or entropy payload,
// or a raw copy of a tensor), a pack member or not, or nil.
func objectOf(c *shardcache.Cache, kind string, packed bool) (shardcache.Key, *shardcache.Object) {
	for _, s := range c.Index().Sources {
		for _, sh := range s.Shards {
			for _, t := range sh.Tensors {
				if o, err := c.Lookup(t.Key); err == nil && t.InCache() && o.Kind == kind && (o.Pack != "") == packed {
					return t.Key, o
				}
			}
		}
	}
	return "", nil
}

// TestCheckStoredPayloadKind: a payload of one codec recorded as the
// other's is refused.
func TestCheckStoredPayloadKind(t *testing.T) {
	_, _, cache := compressedFixture(t, 1<<20, 1, 6)
	c, err := shardcache.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key, o := objectOf(c, shardcache.KindFixed, true)
	if o == nil {
		t.Fatal("no packed fixed payload")
	}
	r, _, err := c.OpenObject(key)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := CheckStoredPayload(o, r); err != nil {
		t.Fatalf("an intact payload: %v", err)
	}
	wrong := *o
	wrong.Kind = shardcache.KindEntropy
	if err := CheckStoredPayload(&wrong, r); !errors.Is(err, shardcache.ErrObjectCorrupt) {
		t.Fatalf("a fixed payload recorded as entropy: %v", err)
	}
	short := *o
	short.Size--
	if err := CheckStoredPayload(&short, r); !errors.Is(err, shardcache.ErrObjectCorrupt) {
		t.Fatalf("a payload a byte short: %v", err)
	}
	broken := errors.New("the disk says no")
	if err := CheckStoredPayload(o, failingReader{broken}); !errors.Is(err, broken) || errors.Is(err, shardcache.ErrObjectCorrupt) {
		t.Fatalf("a payload that cannot be read: %v, want the read's error, not a damaged object", err)
	}
}

// failingReader fails every read with err.
type failingReader struct{ err error }

func (f failingReader) ReadAt([]byte, int64) (int, error) { return 0, f.err }

// TestVerifyNamesDamagedRegion: a damaged copy of a shard's header (a
// region stored whole) is a problem naming the cache object it lies in,
// as a damaged tensor's is.
func TestVerifyNamesDamagedRegion(t *testing.T) {
	dir := t.TempDir()
	src, cache := filepath.Join(dir, "ck"), filepath.Join(dir, "cache")
	gen(t, src, 1<<20, 1, 12)
	compress(t, src, cache, true)
	c, err := shardcache.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hk := c.Index().Sources[0].Shards[0].Header.Key
	loc, _, err := c.Locate(hk)
	if err != nil {
		t.Fatal(err)
	}
	cachetest.Flip(t, c, hk, 3, 0x20)
	v := mustVerify(t, cache)
	if len(v.Problems) != 1 || v.Problems[0].Object != loc.Name() || !errors.Is(v.Problems[0].Err, shardcache.ErrObjectCorrupt) {
		t.Fatalf("verify of a damaged header copy: %+v", v.Problems)
	}
}
