package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/splitzip/splitzip/checkpoint"
	"github.com/splitzip/splitzip/internal/entstudy"
	"github.com/splitzip/splitzip/internal/synth"
)

// entropyOptions are the flags of bench entropy.
type entropyOptions struct {
	Synthetic bool
	Cast      bool
}

// newBenchEntropyCommand is `bench entropy`: how small entropy payloads
// would make each float dtype, measured before the format is fixed.
func newBenchEntropyCommand(g *globals) *cobra.Command {
	var o entropyOptions
	cmd := &cobra.Command{
		Use:   "entropy [SOURCE...]",
		Short: "Measure entropy coding of float exponents: bound, lane code, huff0, fixed rate",
		Long: `For every float tensor of the sources (checkpoints as compress takes them), or
of a synthetic 64 MiB N(0, 0.02) BF16 tensor and its casts with --synthetic,
report bits per value: the entropy bound of each tensor's exponent field (FP8
also as whole bytes); a canonical code of at most 12 bits in interleaved lanes
per 16,384-value chunk with everything it stores counted, its lanes padded to
words, bit-packed, bit-packed with compact lengths, and with no lengths (a
floor), and with one code per 65,536 values; the same code with compact
lengths over pairs of adjacent fields where a tensor has at most 256 pairs
and that is smaller (its table of pairs counted); huff0 4X in independent
64 Ki-symbol blocks; and for BF16 the fixed codec's payload.
--cast studies BF16 tensors cast to F16, F32 and FP8 (scaled per row) too.
Memory: the largest tensor, a few times over.`,
		Hidden: true,
		RunE: func(cmd *cobra.Command, a []string) error {
			if (len(a) == 0) != o.Synthetic {
				return usageError{fmt.Errorf("give a source or --synthetic (one of them)")}
			}
			if err := cmd.Context().Err(); err != nil {
				return err
			}
			return runBenchEntropy(cmd.Context(), g, o, a)
		},
	}
	cmd.Flags().BoolVar(&o.Synthetic, "synthetic", false, "study a 64 MiB N(0, 0.02) BF16 tensor and its casts")
	cmd.Flags().BoolVar(&o.Cast, "cast", false, "also study BF16 tensors cast to F16, F32, F8_E4M3 and F8_E5M2")
	return cmd
}

func runBenchEntropy(ctx context.Context, g *globals, o entropyOptions, sources []string) error {
	st := entstudy.New()
	if o.Synthetic {
		raw := synth.Normal(rand.New(rand.NewPCG(20261201, 12)), 32<<20, 0.02)
		if err := st.Add("BF16", raw); err != nil {
			return err
		}
		if err := st.Cast(raw, 4096); err != nil {
			return err
		}
	}
	for _, src := range sources {
		ck, err := checkpoint.Open(src)
		if err != nil {
			return err
		}
		for _, sh := range ck.Shards {
			if err := studyShard(ctx, st, sh, o.Cast); err != nil {
				return err
			}
		}
	}
	res := st.Results()
	if g.JSON {
		return printJSON(g.stdout, "entropy_study", map[string]any{"results": res})
	}
	tw := tabwriter.NewWriter(g.stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "dtype\tfield\ttensors\tvalues\tbound\tlanes in words\tlanes bit-packed\tcompact lengths\tno lengths\tcode per 64Ki\tpairs (tensors)\thuff0 4X\tfixed codec\tcompact over bound\tpairs over bound")
	for _, r := range res {
		fixed := "-"
		if r.Fixed > 0 {
			fixed = fmt.Sprintf("%.3f", r.Fixed)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f (%d)\t%.3f\t%s\t%+.3f\t%+.3f\n", r.DType, r.Field, r.Tensors, r.Values,
			r.Bound, r.Canonical, r.Packed, r.Compact, r.Free, r.Grouped, r.Pairs, r.PairTensors, r.Huff0, fixed, r.Compact-r.Bound, r.Pairs-r.Bound)
	}
	fmt.Fprintln(tw, "(bits per value of the whole value)")
	return tw.Flush()
}

// studyShard adds every float tensor of a shard, read one at a time,
// until ctx ends.
func studyShard(ctx context.Context, st *entstudy.Study, sh *checkpoint.Shard, cast bool) error {
	f, err := os.Open(sh.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, t := range sh.Header.Tensors {
		switch t.DType {
		case "BF16", "F16", "F32", "F8_E4M3", "F8_E5M2":
		default:
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		raw := make([]byte, t.Size())
		if _, err := f.ReadAt(raw, int64(t.Begin)); err != nil {
			return fmt.Errorf("%s: tensor %q: %w", sh.Path, t.Name, err)
		}
		if err := st.Add(t.DType, raw); err != nil {
			return fmt.Errorf("%s: tensor %q: %w", sh.Path, t.Name, err)
		}
		if cast && t.DType == "BF16" {
			cols := 1
			if len(t.Shape) > 0 {
				cols = int(t.Shape[len(t.Shape)-1])
			}
			if err := st.Cast(raw, cols); err != nil {
				return fmt.Errorf("%s: tensor %q: %w", sh.Path, t.Name, err)
			}
		}
	}
	return nil
}
