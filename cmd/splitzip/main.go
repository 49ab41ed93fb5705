// Command splitzip makes BF16 safetensors checkpoints smaller on disk and
// faster to move into GPU memory, without changing a bit.
//
// Exit codes: 0 success, 1 failure (a mismatch, a corrupt or changed input,
// an I/O error), 2 usage error, 130 interrupted (Ctrl-C or SIGTERM).
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
	"syscall"

	"github.com/spf13/cobra"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/shardcache"
)

// abiVersion is SPLITZIP_ABI_VERSION of capi/splitzip.h (a test checks).
const abiVersion = 5

// Exit codes.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitInterrupted = 130 // as shells report a command ended by Ctrl-C
)

// version is the release; python/splitzip/_version.py says the same (a
// test checks).
const version = "0.4.0"

// usageError marks errors in how the command was called.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// errFailed reports a job that ran but found problems it already printed.
var errFailed = errors.New("failed")

// globals are the options every command shares.
type globals struct {
	JSON       bool
	Quiet      bool
	CPUProfile string
	Trace      string
	stdout     io.Writer
	stderr     io.Writer
}

func newRootCommand(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "splitzip",
		Short: "Lossless 12-bit BF16 checkpoints: smaller on disk, faster to the GPU",
		Long: `splitzip compresses the BF16 tensors of safetensors checkpoints into a cache
of SplitZip payloads (about 12 bits per value, bit-exact), verifies them,
explains the savings and restores the original files byte for byte.

Exit codes: 0 success, 1 failure (mismatch, corrupt or changed input, I/O
error), 2 usage error, 130 interrupted.`,
		Version:       version,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.PersistentFlags().BoolVar(&g.JSON, "json", false, "print the result as JSON on stdout")
	root.PersistentFlags().BoolVarP(&g.Quiet, "quiet", "q", false, "no progress bars")
	root.PersistentFlags().StringVar(&g.CPUProfile, "cpuprofile", "", "write a CPU profile to this file")
	_ = root.PersistentFlags().MarkHidden("cpuprofile")
	root.PersistentFlags().StringVar(&g.Trace, "trace", "", "write an execution trace to this file")
	_ = root.PersistentFlags().MarkHidden("trace")
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if g.Trace != "" {
			f, err := os.Create(g.Trace)
			if err != nil {
				return err
			}
			if err := trace.Start(f); err != nil {
				return err
			}
		}
		if g.CPUProfile == "" {
			return nil
		}
		f, err := os.Create(g.CPUProfile)
		if err != nil {
			return err
		}
		return pprof.StartCPUProfile(f)
	}
	root.PersistentPostRun = func(*cobra.Command, []string) {
		if g.CPUProfile != "" {
			pprof.StopCPUProfile()
		}
		if g.Trace != "" {
			trace.Stop()
		}
	}
	root.SetVersionTemplate(fmt.Sprintf("splitzip %s (payload format %d, entropy payload format %d, cache index %d, C ABI %d)\n", version, codec.Version, entropy.PayloadVersion, shardcache.IndexVersion, abiVersion))
	root.SetOut(g.stdout)
	root.SetErr(g.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newCompressCommand(g), newVerifyCommand(g), newInspectCommand(g),
		newDecompressCommand(g), newGenCommand(g), newBenchCommand(g), newLoadCommand(g), newGCCommand(g), newRelocateCommand(g),
		newPlanCommand(g))
	return root
}

// args wraps a cobra positional-argument check so its errors are usage errors.
func args(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if err := check(cmd, a); err != nil {
			return usageError{err}
		}
		return nil
	}
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
// code: exitInterrupted when ctx ended the run.
func runContext(ctx context.Context, argv []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "splitzip: internal error: %v\n", r)
			code = exitFailure
		}
	}()
	g := &globals{stdout: stdout, stderr: stderr}
	root := newRootCommand(g)
	root.SetArgs(argv)
	err := root.ExecuteContext(ctx)
	var ue usageError
	msg := ""
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errFailed):
		// The command printed its own report.
		return exitFailure
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		code, msg = exitInterrupted, "interrupted"
		fmt.Fprintf(stderr, "splitzip: %s\n", msg)
	case errors.As(err, &ue) || isCobraUsage(err):
		code, msg = exitUsage, err.Error()
		fmt.Fprintf(stderr, "splitzip: %v\nRun 'splitzip --help' for usage.\n", err)
	default:
		code, msg = exitFailure, err.Error()
		fmt.Fprintf(stderr, "splitzip: %v\n", err)
	}
	if g.JSON {
		// Scripts read stdout: a failure is a JSON document there too.
		printJSON(stdout, "error", map[string]any{"error": msg, "exit_code": code})
	}
	return code
}

// isCobraUsage recognizes cobra's own errors for unknown commands.
func isCobraUsage(err error) bool {
	s := err.Error()
	return len(s) > 16 && s[:16] == "unknown command "
}
