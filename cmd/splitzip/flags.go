package main

import (
	"fmt"
	"math"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// minAnnotation is the flag annotation atLeast sets: the least value and a
// hint for the message.
const minAnnotation = "splitzip_min"

// jobsHint is what a refused --jobs 0 says, the same for every command
// with --jobs.
const jobsHint = "omit --jobs for the default, one job a CPU"

// atLeast declares that numeric flag name of f, where the command line
// gives it, must be at least min; checkFlags refuses a smaller value
// before the command does anything. A default below min (0 meaning
// "choose for me") stays allowed: only given values are checked. hint, if
// not empty, ends the message.
func atLeast(f *pflag.FlagSet, name string, min int64, hint string) {
	if err := f.SetAnnotation(name, minAnnotation, []string{strconv.FormatInt(min, 10), hint}); err != nil {
		panic(err) // a flag name misspelled in this package
	}
}

// checkFlags refuses, as usage errors, values of cmd's given flags that
// parsed but mean nothing: a float that is NaN or infinite, a number
// below its atLeast minimum.
func checkFlags(cmd *cobra.Command) error {
	var err error
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if err != nil {
			return
		}
		v := f.Value.String()
		switch f.Value.Type() {
		case "float32", "float64":
			x, perr := strconv.ParseFloat(v, 64)
			if perr == nil && (math.IsNaN(x) || math.IsInf(x, 0)) {
				err = usageError{fmt.Errorf("--%s: %s is refused: want a finite number", f.Name, v)}
				return
			}
		}
		ann := f.Annotations[minAnnotation]
		if len(ann) != 2 {
			return
		}
		min, _ := strconv.ParseInt(ann[0], 10, 64)
		x, perr := strconv.ParseFloat(v, 64)
		if perr == nil && x < float64(min) {
			msg := fmt.Sprintf("--%s %s is refused: want at least %d", f.Name, v, min)
			if ann[1] != "" {
				msg += "; " + ann[1]
			}
			err = usageError{fmt.Errorf("%s", msg)}
		}
	})
	return err
}
