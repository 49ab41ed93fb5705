//go:build !unix

package transport

import "time"

// cpuTime is not measured here: benchmarks leave cpu-ns/tensor out.
func cpuTime() time.Duration { return 0 }
