package costmodel

import (
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestChoose: the default (H200) model stores tiny tensors raw and large
// ones coded, fixed over entropy where only the fixed codec applies, and
// breaks near-ties toward fewer bytes.
func TestChoose(t *testing.T) {
	p := Default()
	for _, c := range []struct {
		size           uint64
		fixed, entropy bool
		want           Kind
	}{
		{4 << 10, true, true, Raw},
		{16 << 10, true, false, Raw},
		{64 << 20, true, false, Fixed},
		{64 << 20, false, true, Entropy},
		{64 << 20, false, false, Raw},
		{64 << 20, true, true, Entropy}, // 42.9 against 41.0 GB/s
		{128 << 10, false, true, Raw},   // packed: the small entropy cost
	} {
		got := p.Choose(c.size, c.fixed, c.entropy)
		if got.Kind != c.want {
			t.Errorf("%d bytes (fixed %v, entropy %v): %v, want %v (%v)", c.size, c.fixed, c.entropy, got.Kind, c.want, got.Times)
		}
	}
	// The break-even size of fixed against raw: 0.32 µs more a tensor
	// against 1/36.0 - 1/41.0 ns a byte saved.
	even := 0.32e-6 / (1/36.0e9 - 1/41.0e9)
	if p.Choose(uint64(even*0.5), true, false).Kind != Raw || p.Choose(uint64(even*2), true, false).Kind != Fixed {
		t.Errorf("break-even near %.0f bytes not where the costs put it", even)
	}
	// Entropy payloads of at most SmallBytes cost what packed ones do.
	if p.Time(Entropy, p.SmallBytes) != p.EntropySmall.Time(p.SmallBytes) || p.Time(Entropy, p.SmallBytes+1) != p.Entropy.Time(p.SmallBytes+1) {
		t.Error("entropy time ignores SmallBytes")
	}
	// Equal times: the kind with fewer bytes.
	q := *p
	q.Fixed, q.Entropy = q.Raw, q.Raw
	if got := q.Choose(1<<20, true, true); got.Kind != Entropy {
		t.Errorf("tie: %v", got.Kind)
	}
	r := p.Choose(4<<10, true, false).Reason()
	if !strings.HasPrefix(r, "cost model: raw ") || !strings.Contains(r, "fixed") || strings.Contains(r, "entropy") {
		t.Errorf("reason %q", r)
	}
}

func TestCheck(t *testing.T) {
	if err := Default().Check(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []func(p *Profile){
		func(p *Profile) { p.Version = 0 },
		func(p *Profile) { p.Raw.Rate = 0 },
		func(p *Profile) { p.RawSmall.Tensor = -1 },
		func(p *Profile) { p.Fixed.Tensor = -1 },
		func(p *Profile) { p.FixedSmall.Rate = math.NaN() },
		func(p *Profile) { p.Raw.Tensor = 1e300 },
		func(p *Profile) { p.Entropy.Rate = 1e300 },
		func(p *Profile) { p.EntropySmall.Rate = 0.5 },
		func(p *Profile) { p.Entropy.Rate = math.Inf(1) },
		func(p *Profile) { p.EntropySmall.Tensor = math.NaN() },
		func(p *Profile) { p.SmallBytes = 0 },
	} {
		p := Default()
		bad(p)
		if err := p.Check(); !errors.Is(err, ErrProfile) {
			t.Errorf("%+v: %v", p, err)
		}
	}
}

// TestStore: a saved profile is found again for its host only; a
// corrupt or foreign file is not used.
func TestStore(t *testing.T) {
	dir := t.TempDir()
	p := Default()
	p.Host = Fingerprint("test GPU")
	file, err := Save(dir, p)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(file) != dir {
		t.Fatalf("saved in %s", file)
	}
	got, err := Lookup(dir, p.Host)
	if err != nil || *got != *p {
		t.Fatalf("%+v, %v", got, err)
	}
	if _, err := Lookup(dir, Fingerprint("another GPU")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("another host: %v", err)
	}
	// Measured with other decoders (or before their revision was kept):
	// measured again.
	stale := *p
	stale.Decoders = Decoders - 1
	if _, err := Save(dir, &stale); err != nil {
		t.Fatal(err)
	}
	if _, err := Lookup(dir, p.Host); !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, ErrStale) || strings.Contains(err.Error(), fs.ErrNotExist.Error()) {
		t.Fatalf("a profile of other decoders: %v (want ErrStale and fs.ErrNotExist, the text not saying the file is missing)", err)
	}
	if _, err := Save(dir, p); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("{\"version\": 1, \"host\""), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Lookup(dir, p.Host); !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, ErrProfile) || strings.Contains(err.Error(), fs.ErrNotExist.Error()) {
		t.Fatalf("corrupt: %v (want ErrProfile and fs.ErrNotExist, the text not saying the file is missing)", err)
	}
	other := *p
	other.Version = Version + 1
	b, _ := json.Marshal(other)
	os.WriteFile(file, b, 0o644)
	if _, err := Lookup(dir, p.Host); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "cannot use") || strings.Contains(err.Error(), fs.ErrNotExist.Error()) {
		t.Fatalf("a profile of another layout: %v", err)
	}
	if _, err := Read(file); !errors.Is(err, ErrProfile) || !strings.Contains(err.Error(), file) {
		t.Fatalf("corrupt: %v", err)
	}
	bad := *p
	bad.Raw.Rate = -1
	if _, err := Save(dir, &bad); !errors.Is(err, ErrProfile) {
		t.Fatalf("bad profile saved: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".splitzip-tmp-*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	if !strings.Contains(Fingerprint("cpu"), "cores/cpu") {
		t.Fatal(Fingerprint("cpu"))
	}
}

// TestSmallPairs: a raw tensor or fixed payload of at most SmallBytes is
// priced at its small pair, a larger one at its other; a profile file
// written before the small pairs prices them alike.
func TestSmallPairs(t *testing.T) {
	p := Default()
	p.RawSmall = Cost{Tensor: 0.1e-6, Rate: 10e9}
	p.FixedSmall = Cost{Tensor: 0.3e-6, Rate: 8e9}
	if got, want := p.Time(Fixed, p.SmallBytes), p.FixedSmall.Time(p.SmallBytes); got != want {
		t.Errorf("fixed of SmallBytes: %g s, want %g", got, want)
	}
	if got, want := p.Time(Fixed, p.SmallBytes+1), p.Fixed.Time(p.SmallBytes+1); got != want {
		t.Errorf("fixed past SmallBytes: %g s, want %g", got, want)
	}
	if got, want := p.Time(Raw, p.SmallBytes), p.RawSmall.Time(p.SmallBytes); got != want {
		t.Errorf("raw of SmallBytes: %g s, want %g", got, want)
	}
	if got, want := p.Time(Raw, p.SmallBytes+1), p.Raw.Time(p.SmallBytes+1); got != want {
		t.Errorf("raw past SmallBytes: %g s, want %g", got, want)
	}
	if c := p.Choose(4096, false, false); c.Times[Raw] != p.RawSmall.Time(4096) {
		t.Errorf("Choose priced a small raw tensor at %g s", c.Times[Raw])
	}
	old := Default()
	old.Decoders = 3
	b, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	delete(m, "raw_small")
	delete(m, "fixed_small")
	b, _ = json.Marshal(m)
	file := filepath.Join(t.TempDir(), "old.json")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Read(file)
	if err != nil || got.RawSmall != got.Raw || got.FixedSmall != got.Fixed {
		t.Fatalf("a profile without the small pairs: %v, %+v", err, got)
	}
	// One of this build's without them is damaged.
	m["decoders"] = Decoders
	b, _ = json.Marshal(m)
	os.WriteFile(file, b, 0o644)
	if _, err := Read(file); !errors.Is(err, ErrProfile) {
		t.Fatalf("a profile of decoders %d without the small pairs: %v", Decoders, err)
	}
}
