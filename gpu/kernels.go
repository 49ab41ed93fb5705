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
	if p := os.Getenv("SPLITZIP_FATBIN"); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("gpu: SPLITZIP_FATBIN: %w", err)
		}
		return b, nil
	}
	if len(decodeFatbin) == 0 {
		return nil, fmt.Errorf("gpu: no kernel image embedded; run make kernels")
	}
	return decodeFatbin, nil
}
