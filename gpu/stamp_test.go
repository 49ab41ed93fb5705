package gpu

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"testing"
)

// TestKernelStamp fails when a kernel source changed without `make
// kernels`, or when a fatbin is not the file its stamp was made for, so a
// stale kernel binary cannot land.
func TestKernelStamp(t *testing.T) {
	for _, k := range []struct {
		src, srcSum, binSum string
		bin                 []byte
	}{
		{"decode.cu", decodeSourceSHA256, decodeFatbinSHA256, decodeFatbin},
		{"entropy.cu", entropySourceSHA256, entropyFatbinSHA256, entropyFatbin},
		{"gemv.cu", gemvSourceSHA256, gemvFatbinSHA256, gemvFatbin},
	} {
		src, err := os.ReadFile(k.src)
		if err != nil {
			t.Fatal(err)
		}
		if got := sum(src); got != k.srcSum {
			t.Errorf("%s has SHA-256 %s, its fatbin was built from %s: run make kernels on a machine with nvcc", k.src, got, k.srcSum)
		}
		if got := sum(k.bin); got != k.binSum {
			t.Errorf("the fatbin of %s has SHA-256 %s, kernels_gen.go stamps %s", k.src, got, k.binSum)
		}
		if len(k.bin) < 1024 {
			t.Errorf("the fatbin of %s is %d bytes: not a built kernel", k.src, len(k.bin))
		}
	}
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
