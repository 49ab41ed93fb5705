package transport

import (
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/shardcache"
)

// TestReadCheckedMatchesChecksum checks that pieces read in crcStep steps
// fold to the payload's checksum, for piece boundaries on and off steps.
func TestReadCheckedMatchesChecksum(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	v := synth.Normal(rng, 3*crcStep/2+777, 0.02)
	p, _, err := codec.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := codec.ParseHeader(p)
	path := filepath.Join(t.TempDir(), "payload")
	os.WriteFile(path, p, 0o644)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, piece := range []int{len(p), crcStep, crcStep + 16, 1000} {
		if sum := foldPieces(t, f, len(p), piece); sum != h.Checksum {
			t.Errorf("pieces of %d bytes: checksum %08x, header says %08x", piece, sum, h.Checksum)
		}
	}
}

// foldPieces reads a payload of n bytes from f in pieces of piece bytes
// with readChecked and folds their checksums in order.
func foldPieces(t *testing.T, f io.ReaderAt, n, piece int) uint32 {
	t.Helper()
	var sum uint32
	for off := 0; off < n; off += piece {
		q := make([]byte, min(piece, n-off))
		c, _, _, err := readChecked(f, q, uint64(off))
		if err != nil {
			t.Fatal(err)
		}
		sum = codec.CombineChecksums(sum, c, uint64(len(q)))
	}
	return sum
}

// fakeStretches serves p as a remote object whose reads arrive in
// stretches read in parallel (shardcache.StretchFiles), each told span
// by span; gap leaves a byte of each read untold after its first
// stretch, and dup tells the first stretch twice (readers that break the
// contract: readStretches must checksum the bytes whole then). scrub
// zeroes the bytes once told, so that a checksum of the whole piece
// afterwards would be wrong: only the stretches' own checksums give the
// right one.
type fakeStretches struct {
	p               []byte
	stretches, span int
	gap, dup, scrub bool
}

func (r fakeStretches) ReadAtStretches(q []byte, off int64, stretches shardcache.Stretches) error {
	copy(q, r.p[off:])
	each := (len(q) + r.stretches - 1) / r.stretches
	var wg sync.WaitGroup
	for i := 0; i*each < len(q); i++ {
		s, at := q[i*each:min((i+1)*each, len(q))], off+int64(i*each)
		if r.gap && i > 0 {
			s, at = s[1:], at+1
		}
		times := 1
		if r.dup && i == 0 {
			times = 2
		}
		for range times {
			wg.Go(func() {
				tell := stretches(at)
				for o := 0; o < len(s); o += r.span {
					tell(s[o:min(o+r.span, len(s))])
				}
			})
		}
	}
	wg.Wait()
	if r.scrub {
		clear(q)
	}
	return nil
}

func (fakeStretches) ReadAt([]byte, int64) (int, error) {
	return 0, errors.New("ReadAt: want ReadAtStretches")
}
func (fakeStretches) Remote() bool { return true }

// TestReadStretchesMatchesChecksum: a remote piece checksummed span by
// span in parallel stretches (readStretches) folds to the payload's
// checksum, for spans across the header's checksum field and pieces on
// and off the stretches' ends, from the stretches' checksums alone
// (scrub); a reader whose stretches leave a gap or overlap has its
// pieces checksummed again whole (wholeChecks), with the right sum.
func TestReadStretchesMatchesChecksum(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	p, _, err := codec.Encode(synth.Normal(rng, 200_001, 0.02))
	if err != nil {
		t.Fatal(err)
	}
	h, _ := codec.ParseHeader(p)
	for _, r := range []fakeStretches{
		{stretches: 1, span: 1, scrub: true}, {stretches: 3, span: 7, scrub: true}, {stretches: 4, span: 4096, scrub: true},
		{stretches: 2, span: 1 << 20, scrub: true}, {stretches: 3, span: 61, gap: true}, {stretches: 2, span: 999, dup: true},
	} {
		r.p = p
		for _, piece := range []int{len(p), 100_000, 4099} {
			before := wholeChecks.Load()
			if sum := foldPieces(t, r, len(p), piece); sum != h.Checksum {
				t.Errorf("%+v, pieces of %d bytes: checksum %08x, header says %08x", r, piece, sum, h.Checksum)
			}
			whole := wholeChecks.Load() - before
			if broken := r.gap || r.dup; broken != (whole > 0) {
				t.Errorf("%+v, pieces of %d bytes: %d pieces checksummed again whole", r, piece, whole)
			}
		}
	}
}
