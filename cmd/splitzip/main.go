// Command splitzip makes BF16 safetensors checkpoints smaller on disk and
// faster to move into GPU memory, without changing a bit.
//
// Exit codes: 0 success, 1 failure (a mismatch, a corrupt or changed input,
// an I/O error), 2 usage error.
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
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

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
error), 2 usage error.`,
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
	root.SetOut(g.stdout)
	root.SetErr(g.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newCompressCommand(g), newVerifyCommand(g), newInspectCommand(g),
		newDecompressCommand(g), newGenCommand(g), newBenchCommand(g), newLoadCommand(g), newGCCommand(g))
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

// run executes the command line and returns the exit code.
func run(argv []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "splitzip: internal error: %v\n", r)
			code = exitFailure
		}
	}()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	g := &globals{stdout: stdout, stderr: stderr}
	root := newRootCommand(g)
	root.SetArgs(argv)
	err := root.ExecuteContext(ctx)
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue) || isCobraUsage(err):
		fmt.Fprintf(stderr, "splitzip: %v\nRun 'splitzip --help' for usage.\n", err)
		return exitUsage
	case errors.Is(err, errFailed):
		return exitFailure
	default:
		fmt.Fprintf(stderr, "splitzip: %v\n", err)
		return exitFailure
	}
}

// isCobraUsage recognizes cobra's own errors for unknown commands.
func isCobraUsage(err error) bool {
	s := err.Error()
	return len(s) > 16 && s[:16] == "unknown command "
}
