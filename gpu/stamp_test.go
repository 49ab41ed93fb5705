package gpu

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"testing"
)

// TestKernelStamp fails when decode.cu changed without `make kernels`, or
// when decode.fatbin is not the file the stamp was made for, so a stale
// kernel binary cannot land.
func TestKernelStamp(t *testing.T) {
	src, err := os.ReadFile("decode.cu")
	if err != nil {
		t.Fatal(err)
	}
	if got := sum(src); got != decodeSourceSHA256 {
		t.Errorf("decode.cu has SHA-256 %s, the fatbin was built from %s: run make kernels on a machine with nvcc", got, decodeSourceSHA256)
	}
	if got := sum(decodeFatbin); got != decodeFatbinSHA256 {
		t.Errorf("decode.fatbin has SHA-256 %s, kernels_gen.go stamps %s", got, decodeFatbinSHA256)
	}
	if len(decodeFatbin) < 1024 {
		t.Errorf("decode.fatbin is %d bytes: not a built kernel", len(decodeFatbin))
	}
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
