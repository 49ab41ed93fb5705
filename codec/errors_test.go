package codec

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/splitzip/splitzip/internal/synth"
)

// TestErrorsNameFixedCodec: a fixed payload's checksum and format errors
// name the fixed codec, match their sentinels, and never say SplitZip
// (the project's name, not a codec's).
func TestErrorsNameFixedCodec(t *testing.T) {
	raw := synth.Normal(rand.New(rand.NewPCG(41, 3)), 2*ChunkValues+9, 0.02)
	p, _, err := Encode(raw)
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(p)
	flipped[len(p)/2] ^= 1
	for _, tc := range []struct {
		name     string
		err      error
		sentinel error
		prefix   string
	}{
		{"checksum", Decode(make([]byte, len(raw)), flipped), ErrChecksum, "fixed payload checksum mismatch: "},
		{"format", Decode(make([]byte, len(raw)), p[:HeaderSize-1]), ErrCorrupt, "corrupt fixed payload"},
	} {
		if !errors.Is(tc.err, tc.sentinel) || !strings.HasPrefix(tc.err.Error(), tc.prefix) || strings.Contains(tc.err.Error(), "SplitZip") {
			t.Errorf("%s: %v; want %q first", tc.name, tc.err, tc.prefix)
		}
	}
	for _, e := range []error{ErrCorrupt, ErrChecksum, ErrVersion, ErrTooLarge} {
		if strings.Contains(e.Error(), "SplitZip") {
			t.Errorf("sentinel %q names SplitZip", e)
		}
	}
}
