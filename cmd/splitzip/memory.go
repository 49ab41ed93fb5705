package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/pflag"

	"github.com/splitzip/splitzip/pipeline"
)

// addMemoryFlag adds --memory, the budget of compress, verify and
// decompress.
func addMemoryFlag(f *pflag.FlagSet, s *string) {
	f.StringVar(s, "memory", "512MiB", fmt.Sprintf("memory budget: what the run's buffers may hold at once, whatever the job count and the tensor sizes (at least %d MiB)", pipeline.MinMemory>>20))
}

// memoryBudget parses --memory and makes it the Go runtime's soft memory
// limit too, so garbage is collected before the heap outgrows the budget.
func memoryBudget(s string) (uint64, error) {
	m, err := parseSize(s)
	if err != nil {
		return 0, usageError{fmt.Errorf("--memory: %v", err)}
	}
	if m < pipeline.MinMemory {
		return 0, usageError{fmt.Errorf("--memory %s is below the minimum of %d MiB", s, pipeline.MinMemory>>20)}
	}
	debug.SetMemoryLimit(int64(m))
	return m, nil
}
