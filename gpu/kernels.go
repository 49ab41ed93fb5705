package gpu

import (
	_ "embed"
	"fmt"
	"os"
)

// decodeFatbin holds SASS for sm_80, sm_90 and sm_100 and PTX for
// compute_80, built from decode.cu by `make kernels`.
//
//go:embed decode.fatbin
var decodeFatbin []byte

// kernelImage returns the fatbin to load: the embedded one, or the file
// SPLITZIP_FATBIN names (for kernel development on the GPU machine).
func kernelImage() ([]byte, error) {
	return imageOf("SPLITZIP_FATBIN", decodeFatbin, "decode")
}

// imageOf returns the fatbin the environment variable env names, or else
// the embedded one; what names the kernels in errors.
func imageOf(env string, embedded []byte, what string) ([]byte, error) {
	if p := os.Getenv(env); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("gpu: %s: %w", env, err)
		}
		return b, nil
	}
	if len(embedded) == 0 {
		return nil, fmt.Errorf("gpu: no %s kernel image embedded; run make kernels", what)
	}
	return embedded, nil
}
