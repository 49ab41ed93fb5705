// Command splitzip makes BF16 safetensors checkpoints smaller on disk and
// faster to move into GPU memory, without changing a bit.
//
// Exit codes, one per kind of failure (package internal/failure) and the
// same for every command: 0 success, 1 integrity (a mismatch, a corrupt
// cache or payload), 2 usage, 3 input (missing, unreadable or changed),
// 4 resource (disk full, permission on output, memory, locked), 5 device
// (no GPU, CUDA), 70 internal (a bug), 130 interrupted (Ctrl-C or SIGTERM).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/splitzip/splitzip/internal/failure"
	"github.com/splitzip/splitzip/shardcache"
)

// abiVersion is SPLITZIP_ABI_VERSION of capi/splitzip.h (a test checks).
const abiVersion = 13

// version is the release; python/splitzip/_version.py says the same (a
// test checks).
const version = "0.4.0"

// globals are the options every command shares.
type globals struct {
	JSON       bool
	Quiet      bool
	CPUProfile string
	Trace      string
	Version    bool
	stdout     io.Writer
	stderr     io.Writer
	// jsonArg: the command line holds --json, for an error before (or
	// instead of) a successful parse of it; flagErr: parsing failed;
	// jsonErr: the error was printed as a JSON document.
	jsonArg, flagErr, jsonErr bool
	// started: the command's own work began (flags and arguments were
	// accepted); errors before it are cobra's, in how it was called.
	started bool
	// stops end the profile and the trace, when the run ends however it
	// ends.
	stops []func()
}

func newRootCommand(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "splitzip",
		Short: "Lossless compressed checkpoints: smaller on disk, faster to the GPU",
		Long: `splitzip compresses the tensors of safetensors checkpoints into a cache of
payloads, bit-exact: the fixed codec's for BF16 (about 12 bits per value),
or with --codec entropy Huffman-coded exponents for every float dtype (BF16
about 10.6 bits per value; F16, F32, FP8). It verifies them, explains the
savings, restores the original files byte for byte, and loads caches into
GPU memory, decoding the payloads in place on the GPU.

With --json every run prints exactly one JSON document on stdout, with a
"message_type": the command's result, "version", "help" (with --help, the
text under "usage"), or "error" with "error", "kind", "exit_code" and, where
known, "file" and "tensor". Numeric flags refuse values that mean nothing
(negative counts, 0 where 0 means nothing, NaN, infinities) before any work.

` + exitCodes(),
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g.Version {
				return printVersion(g)
			}
			return cmd.Help()
		},
	}
	root.Flags().BoolVarP(&g.Version, "version", "v", false, "print the version (as the version command)")
	root.PersistentFlags().BoolVar(&g.JSON, "json", false, "print the result as JSON on stdout")
	root.PersistentFlags().BoolVarP(&g.Quiet, "quiet", "q", false, "no progress bars")
	root.PersistentFlags().StringVar(&g.CPUProfile, "cpuprofile", "", "write a CPU profile to this file")
	_ = root.PersistentFlags().MarkHidden("cpuprofile")
	root.PersistentFlags().StringVar(&g.Trace, "trace", "", "write an execution trace to this file")
	_ = root.PersistentFlags().MarkHidden("trace")
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		if err := checkFlags(cmd); err != nil {
			return err
		}
		if err := checkSchemes(cmd, args); err != nil {
			return err
		}
		g.started = true
		if g.Trace != "" {
			f, err := os.Create(g.Trace)
			if err != nil {
				return err
			}
			if err := trace.Start(f); err != nil {
				f.Close()
				return err
			}
			g.stops = append(g.stops, func() { trace.Stop(); f.Close() })
		}
		if g.CPUProfile == "" {
			return nil
		}
		f, err := os.Create(g.CPUProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return err
		}
		g.stops = append(g.stops, func() { pprof.StopCPUProfile(); f.Close() })
		return nil
	}
	root.SetOut(g.stdout)
	root.SetErr(g.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return g.flagError(err) })
	root.AddCommand(newCompressCommand(g), newVerifyCommand(g), newInspectCommand(g),
		newDecompressCommand(g), newCalibrateCommand(g), newGenCommand(g), newBenchCommand(g), newLoadCommand(g), newGCCommand(g), newRelocateCommand(g),
		newPlanCommand(g), newPushCommand(g), newPullCommand(g), newVersionCommand(g))
	setHelp(g, root)
	return root
}

// args wraps a cobra positional-argument check so its errors are usage
// errors that say what the command takes, from its Use line.
func args(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if err := check(cmd, a); err != nil {
			return usageError{argsError(cmd, a)}
		}
		// An empty argument (an unset shell variable) names no path: it
		// would be taken for the working folder.
		if i := slices.Index(a, ""); i >= 0 {
			return usageError{fmt.Errorf("%s: argument %d is empty (an unset shell variable?); %s",
				strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" "), i+1, argsError(cmd, a))}
		}
		return nil
	}
}

// localCache is check, and a usage error where the first argument, the
// cache, names a remote one (s3:// or oci://), which only verify, load
// and compress -o read or write in place.
func localCache(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if err := check(cmd, a); err != nil {
			return err
		}
		if isRemote(a[0]) {
			return usageError{fmt.Errorf("%s takes a local cache folder, not %s: pull it first (splitzip pull %s DIR), then name DIR",
				strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" "), a[0], remoteRef(a[0]))}
		}
		return nil
	}
}

// argsError says what cmd takes and what it was given.
func argsError(cmd *cobra.Command, a []string) error {
	takes := "no arguments"
	if _, rest, ok := strings.Cut(cmd.Use, " "); ok {
		takes = rest
	}
	got := "none"
	if len(a) > 0 {
		got = fmt.Sprintf("%d: %s", len(a), strings.Join(a, " "))
	}
	return fmt.Errorf("%s takes %s; got %s", strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" "), takes, got)
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line and returns the exit code; Ctrl-C and
// SIGTERM cancel it.
func run(argv []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runContext(ctx, argv, stdout, stderr)
}

// runContext executes the command line under ctx and returns the exit
// code of the kind of its failure (package failure): every error is
// classified and printed here, once, and with --json stdout holds exactly
// one JSON document whatever happened.
func runContext(ctx context.Context, argv []string, stdout, stderr io.Writer) int {
	code, _ := execute(ctx, argv, stdout, stderr)
	return code
}

// execute is runContext, returning the globals of the run for tests too.
func execute(ctx context.Context, argv []string, stdout, stderr io.Writer) (code int, g *globals) {
	g = &globals{stdout: stdout, stderr: stderr, jsonArg: jsonRequested(argv)}
	var cmd *cobra.Command
	defer func() {
		for _, stop := range g.stops {
			stop()
		}
	}()
	defer func() {
		if r := recover(); r != nil {
			code = g.report(cmd, failure.Mark(failure.Internal, fmt.Errorf("%v", r)))
		}
	}()
	root := newRootCommand(g)
	root.SetArgs(argv)
	cmd, err := root.ExecuteContextC(ctx)
	switch {
	case err == nil:
		return exitOK, g
	case errors.Is(err, errFailed):
		// The command printed its own report; the kind it marked says the
		// exit code (verify's problems: integrity, or input for a source
		// gone or changed).
		if k := failure.KindOf(err); k != failure.Internal {
			return k.ExitCode(), g
		}
		return exitFailure, g
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		err = interrupted(err)
	case !g.started && failure.KindOf(err) == failure.Internal:
		// cobra's own errors (an unknown command, a wrong number of
		// arguments) come before the command starts.
		err = usageError{err}
	}
	return g.report(cmd, err), g
}

// interrupted is the error of a run Ctrl-C or SIGTERM ended with err:
// "interrupted", and what the run had done that stays, where it says
// (gc stopped after its commit: its forget took effect, for --json too).
func interrupted(err error) error {
	msg := "interrupted"
	if errors.Is(err, shardcache.ErrStraysLeft) {
		msg += ": " + shardcache.ErrStraysLeft.Error()
	}
	return failure.Mark(failure.Interrupted, errors.New(msg))
}
