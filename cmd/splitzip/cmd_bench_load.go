package main

import "github.com/spf13/cobra"

// newBenchLoadCommand is `bench load`: raw and compressed loads of the same
// cache, alternating in one process (load --compare).
func newBenchLoadCommand(g *globals) *cobra.Command {
	var o loadOptions
	cmd := &cobra.Command{
		Use:   "load CACHE",
		Short: "Alternate raw and compressed loads of a cache and print the ratio",
		Long: `Alternate raw and compressed loads of the same cache in one process and print
the median rates and their ratio (after one uncounted load of each kind;
each kind goes first in every other round, the heap collected before each
load): first loads (from files), and with
--resident --repeat N, re-faults from pinned-resident bytes; with
--device-resident, compressed re-faults from payloads kept in device memory
beside raw re-faults from pinned memory.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			return flagError(runLoad(cmd.Context(), g, o.withDefaults(cmd.Flags()), a[0]))
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.Resident, "resident", false, "keep bytes in pinned memory: repeats read no file")
	f.BoolVar(&o.DeviceResident, "device-resident", false, "keep payloads compressed in device memory, raw bytes in pinned memory: repeats read no file")
	f.IntVar(&o.Repeat, "repeat", 2, "fault everything in this many times per load")
	f.IntVar(&o.Compare, "rounds", 3, "alternations of raw and compressed loads")
	o.addRuntimeFlags(f)
	atLeast(f, "repeat", 1, "")
	atLeast(f, "rounds", 1, "")
	return cmd
}
