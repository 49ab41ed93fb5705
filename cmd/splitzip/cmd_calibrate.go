package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/splitzip/splitzip/costmodel"
	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/internal/calibrate"
	"github.com/splitzip/splitzip/internal/failure"
)

// calibrateOptions are the flags of calibrate.
type calibrateOptions struct {
	Device string
}

func newCalibrateCommand(g *globals) *cobra.Command {
	var o calibrateOptions
	cmd := &cobra.Command{
		Use:   "calibrate",
		Short: "Measure this host's cost model (what --codec cost chooses by)",
		Long: `Measure what loading a tensor costs on this host, by how it is stored (raw,
a fixed-codec payload, an entropy payload; tensors of at most 256 KiB, packed,
have costs of their own): generated checkpoints of tiny, small and large
tensors are compressed with each codec and loaded from the page cache on
--device (by default GPU 0 where there is one, else the CPU), and each
kind's cost a tensor and rate are fitted to the fastest loads. It takes seconds,
and up to about 0.6 GB of the temporary folder (TMPDIR) while it runs,
removed when it ends (or, if it was killed, by a calibration an hour later). The
profile is kept in the user's cache folder (splitzip/ in XDG_CACHE_HOME or
~/.cache) under this host's fingerprint (CPU model, core count, device), and
compress --codec cost uses it; on a host without one, compress measures it
first. SPLITZIP_PROFILE names a profile file to use instead (calibrate then
writes it), or "default" for the built-in one (measured on an H200).`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			p, file, err := measureProfile(cmd.Context(), g, o.Device)
			if p == nil {
				return err
			}
			if err != nil {
				// Measured, not kept: shown all the same, with the error
				// of the output that could not be written, and exit 4.
				err = failure.Mark(failure.Resource, fmt.Errorf("the profile measured could not be kept: %w", err))
				if !g.JSON {
					printProfile(g, p, "")
					return err
				}
			}
			if g.JSON {
				doc := struct {
					*costmodel.Profile
					File  string `json:"file"`
					Error string `json:"error,omitempty"`
				}{Profile: p, File: file}
				if err == nil {
					return printJSON(g.stdout, "profile", doc)
				}
				// One document: the profile, and why it was not kept
				// (said on stderr too, as every error is).
				doc.File, doc.Error = "", failure.Message(err)
				fmt.Fprintf(g.stderr, "splitzip: %s\n", doc.Error)
				if perr := printJSON(g.stdout, "profile", doc); perr != nil {
					return perr
				}
				return failure.Mark(failure.Resource, errFailed)
			}
			printProfile(g, p, file)
			return nil
		},
	}
	cmd.Flags().StringVar(&o.Device, "device", "", "engine to measure: a GPU ordinal or cpu (default: GPU 0 where there is one, else cpu)")
	return cmd
}

// envCalibrateQuick, when set, makes calibrations a few times smaller and
// so less exact: for the tests, which measure a profile twice.
const envCalibrateQuick = "SPLITZIP_CALIBRATE_QUICK"

// defaultDevice is GPU 0 where a driver finds one, else the CPU.
func defaultDevice() string {
	l, err := cuda.Open()
	if err != nil {
		return "cpu"
	}
	if n, err := l.DeviceCount(); err != nil || n == 0 {
		return "cpu"
	}
	return "0"
}

// measureProfile calibrates on device ("" for defaultDevice) and keeps
// the profile in the user's cache folder; it returns where. A profile
// measured but not kept (no cache folder, a read-only one) comes back
// with the error of keeping it: a caller may use it for its run.
func measureProfile(ctx context.Context, g *globals, device string) (*costmodel.Profile, string, error) {
	if device == "" {
		device = defaultDevice()
	}
	eng, err := loadOptions{Streams: 2}.engineFor("--device", device)
	if err != nil {
		return nil, "", err
	}
	defer eng.Close()
	pr := g.progress()
	pr.Start("calibrating the cost model on "+eng.Name(), 0)
	var co calibrate.Options
	if os.Getenv(envCalibrateQuick) != "" {
		co = calibrate.Options{Tiny: 300, Small: 40, Large: 4 << 20, Runs: 2, Least: 20 * time.Millisecond}
	}
	p, err := calibrate.Measure(ctx, eng, co)
	pr.Finish()
	if err != nil {
		return nil, "", err
	}
	if file := profileFile(); file != "" {
		// The file the variable names, which every command reads.
		return p, file, costmodel.SaveFile(file, p)
	}
	dir, err := costmodel.Dir()
	if err != nil {
		return p, "", err
	}
	file, err := costmodel.Save(dir, p)
	return p, file, err
}

// profileFile is the profile file SPLITZIP_PROFILE names, "" where it
// names none (unset, or "default" for the built-in profile).
func profileFile() string {
	if env := os.Getenv(costmodel.EnvProfile); env != "default" {
		return env
	}
	return ""
}

// hostProfile is the cost model of this host with device (a GPU ordinal
// or cpu; "" for defaultDevice): the file SPLITZIP_PROFILE names (or the
// built-in one for "default"), else the profile kept for the host and
// device. Where there is none, measure says whether to measure it now
// (compress) or to fail, naming the command that does (a load, whose
// engine is open).
func hostProfile(ctx context.Context, g *globals, device string, measure bool) (*costmodel.Profile, error) {
	switch env := os.Getenv(costmodel.EnvProfile); env {
	case "":
	case "default":
		return costmodel.Default(), nil
	default:
		p, err := costmodel.Read(env)
		if err != nil {
			// The file the variable names cannot be used: the user's input.
			return nil, failure.Mark(failure.Input, fmt.Errorf("%s=%s: %w (run splitzip calibrate to measure one, or set %s=default)", costmodel.EnvProfile, env, err, costmodel.EnvProfile))
		}
		if p.Decoders != costmodel.Decoders {
			// Used as asked, but said: a kept profile would be measured again.
			fmt.Fprintf(g.stderr, "note: %s=%s was measured with decoders %d, this build's are %d: its costs may be stale (splitzip calibrate writes it again)\n",
				costmodel.EnvProfile, env, p.Decoders, costmodel.Decoders)
		}
		return p, nil
	}
	if device == "" {
		device = defaultDevice()
	}
	dir, err := costmodel.Dir()
	if err != nil {
		// No folder keeps profiles (no HOME, as in some services): one
		// is measured for this run, as where the folder is read-only.
		if !measure {
			return nil, failure.Mark(failure.Input, fmt.Errorf("no cost model is kept on this host: %w (set $XDG_CACHE_HOME to an absolute folder, or $HOME, and run splitzip calibrate --device %s; or set %s to a profile's file or to default)",
				err, device, costmodel.EnvProfile))
		}
		return measureUnkept(ctx, g, device)
	}
	name := "cpu"
	if device != "cpu" {
		n, err := strconv.Atoi(device)
		if err != nil {
			return nil, usageError{fmt.Errorf("--device must be a GPU ordinal or cpu, got %q", device)}
		}
		gpu, err := openGPU(n)
		if err != nil {
			return nil, err
		}
		name, err = gpu.Name()
		gpu.Close()
		if err != nil {
			return nil, err
		}
	}
	p, err := costmodel.Lookup(dir, costmodel.Fingerprint(name))
	// A cache folder that cannot be read (not a folder, no access) keeps
	// no profile: one is measured as where none is kept.
	var pe *fs.PathError
	unreadable := errors.As(err, &pe) && !errors.Is(err, fs.ErrNotExist)
	switch {
	case err == nil:
		return p, nil
	case !errors.Is(err, fs.ErrNotExist) && !(measure && unreadable):
		return nil, err
	case !measure && errors.Is(err, costmodel.ErrStale):
		return nil, fmt.Errorf("this host's cost model for %s (in %s) was measured with an older build's decoders: run splitzip calibrate --device %s again (or set %s=default): %w",
			name, dir, device, costmodel.EnvProfile, err)
	case !measure:
		return nil, fmt.Errorf("no cost model measured on this host for %s (looked in %s): run splitzip calibrate --device %s (or set %s=default): %w",
			name, dir, device, costmodel.EnvProfile, err)
	case unreadable || errors.Is(err, costmodel.ErrStale) || errors.Is(err, costmodel.ErrProfile):
		// Said, not silently replaced.
		fmt.Fprintf(g.stderr, "note: the cost model kept for this host cannot be used (%v): it is measured again\n", err)
	}
	return measureUnkept(ctx, g, device)
}

// measureUnkept measures this host's profile for a run that found none:
// kept where the profiles are, or, where it cannot be (a read-only cache
// folder, none at all), used by this run alone.
func measureUnkept(ctx context.Context, g *globals, device string) (*costmodel.Profile, error) {
	fmt.Fprintf(g.stderr, "measuring this host's cost model once (splitzip calibrate; SPLITZIP_PROFILE=default skips it)\n")
	p, _, err := measureProfile(ctx, g, device)
	if p != nil && err != nil {
		// Measured but not kept: the next run measures it again.
		fmt.Fprintf(g.stderr, "note: the cost model measured now could not be kept, so this run alone uses it: %v\n", err)
		return p, nil
	}
	return p, err
}

// printProfile prints a profile as a table.
func printProfile(g *globals, p *costmodel.Profile, file string) {
	fmt.Fprintf(g.stdout, "cost model of %s, measured %s", p.Host, p.Measured)
	if file != "" {
		fmt.Fprintf(g.stdout, ", kept in %s", file)
	}
	fmt.Fprintln(g.stdout)
	fmt.Fprintf(g.stdout, "%-22s %12s %12s\n", "stored as", "µs a tensor", "GB/s")
	for _, r := range []struct {
		name string
		c    costmodel.Cost
	}{{fmt.Sprintf("raw <= %s", human(p.SmallBytes)), p.RawSmall}, {"raw", p.Raw},
		{fmt.Sprintf("fixed <= %s", human(p.SmallBytes)), p.FixedSmall}, {"fixed", p.Fixed},
		{fmt.Sprintf("entropy <= %s", human(p.SmallBytes)), p.EntropySmall}, {"entropy", p.Entropy}} {
		fmt.Fprintf(g.stdout, "%-22s %12.2f %12.2f\n", r.name, r.c.Tensor*1e6, r.c.Rate/1e9)
	}
}
