package main

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

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

// urlScheme matches the scheme of a URL (RFC 3986: a letter, then
// letters, digits, "+", "-" or ".") and its "://".
var urlScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://`)

// pathFlags are the flags whose values name a cache, a checkpoint or a
// folder, as positional arguments do.
var pathFlags = []string{"output", "local-cache", "source"}

// remoteAnnotation marks, on a command, the positions of its arguments
// that may name a remote cache or reference ("0", "1"), and, on a flag,
// one whose value may (remoteArg, remoteFlag).
const remoteAnnotation = "splitzip_remote"

// remoteArg declares that argument pos of cmd may name a remote cache or
// reference (s3://, oci://); every other argument is a local path.
func remoteArg(cmd *cobra.Command, pos int) {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[remoteAnnotation] += strconv.Itoa(pos)
}

// remoteFlag declares that flag name of cmd may name a remote cache.
func remoteFlag(cmd *cobra.Command, name string) {
	if err := cmd.Flags().SetAnnotation(name, remoteAnnotation, []string{"yes"}); err != nil {
		panic(err) // a flag name misspelled in this package
	}
}

// checkSchemes refuses, as a usage error, a positional argument or path
// flag of cmd that starts with a URL scheme where it names a local path,
// and one with a scheme other than s3:// and oci:// where it may name a
// remote cache: compress -o http://host/repo wrote a whole cache into a
// folder called "http:", push took "http" for a registry's host name,
// and decompress -o s3://b/x wrote into ./s3:/b/x (trial 71, review 71).
// A folder of such a name is still reachable as ./http:/... Shell
// completion (cobra's __complete, given the line being completed) is
// left alone.
func checkSchemes(cmd *cobra.Command, args []string) error {
	if strings.HasPrefix(cmd.Name(), "__complete") {
		return nil
	}
	check := func(what, v string, remote bool) error {
		m := urlScheme.FindString(v)
		switch {
		case m == "":
			return nil
		case !remote:
			return usageError{fmt.Errorf("%s %q: a local path here, not a URL (a folder of that name is ./%s)", what, v, v)}
		case m == "s3://" || m == ociScheme:
			return nil
		}
		return usageError{fmt.Errorf("%s %q: %s is no scheme splitzip reads: a remote cache is s3://BUCKET/PREFIX[:TAG] or oci://REGISTRY/REPOSITORY[:TAG]; a local folder of that name is ./%s", what, v, m, v)}
	}
	remoteArgs := cmd.Annotations[remoteAnnotation]
	for i, a := range args {
		if err := check("argument", a, strings.Contains(remoteArgs, strconv.Itoa(i))); err != nil {
			return err
		}
	}
	for _, name := range pathFlags {
		if f := cmd.Flags().Lookup(name); f != nil && f.Changed {
			if err := check("--"+name, f.Value.String(), len(f.Annotations[remoteAnnotation]) > 0); err != nil {
				return err
			}
		}
	}
	return nil
}
