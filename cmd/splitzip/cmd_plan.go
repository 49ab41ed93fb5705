package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/splitzip/splitzip/distplan"
	"github.com/splitzip/splitzip/shardcache"
)

// planOptions are the flags of plan.
type planOptions struct {
	Ranks  int
	TP     string
	Source string
	Cost   bool
}

// newPlanCommand is `plan`: which rank of a node reads and receives what
// when a cached checkpoint is loaded onto several GPUs (package distplan).
func newPlanCommand(g *globals) *cobra.Command {
	var o planOptions
	cmd := &cobra.Command{
		Use:   "plan CACHE",
		Short: "Plan a load onto several ranks: who reads each object once, who receives what",
		Long: `Plan the load of a cached checkpoint onto --ranks ranks of one node: each stored
object (or raw tensor slice) is read from disk by one rank, the largest first to
the rank that has read least, and its bytes go to the ranks that need them under
--tp rules (PATTERN=replicate or PATTERN=shard:DIM, comma separated, the first
match wins, replicate by default; a wildcard pattern's shard:DIM passes over a
tensor without dimension DIM, such as a scalar, but one that every tensor left
to it lacks is refused as a mistyped dimension): a replicated tensor to every
rank whole, a tensor sharded along dimension 0 as the payload chunks covering
each rank's values, along another dimension as the whole payload, each rank
keeping its part.
Prints per rank the bytes read, received, sent and kept; --json the whole plan.
With --cost, this host's cost model (splitzip calibrate) predicts each rank's
reads from the page cache by the path each tensor takes (raw, fixed, entropy),
as stored and all raw; the peer transfers are not in the prediction.
Nothing is moved: this is the plan the multi-GPU loaders carry out.`,
		Args: localCache(args(cobra.ExactArgs(1))),
		RunE: func(cmd *cobra.Command, a []string) error { return runPlan(cmd.Context(), g, o, a[0]) },
	}
	f := cmd.Flags()
	f.IntVar(&o.Ranks, "ranks", 2, fmt.Sprintf("ranks (GPUs) of the node, 1 to %d", distplan.MaxRanks))
	f.StringVar(&o.TP, "tp", "", `placement rules, e.g. "*embed*=replicate,*.q_proj.weight=shard:0,*.o_proj.weight=shard:1"`)
	f.StringVar(&o.Source, "source", "", "source to plan: a recorded root (when the cache holds several), or the directory a moved source is in now")
	f.BoolVar(&o.Cost, "cost", false, "predict each rank's reads by this host's cost model (splitzip calibrate makes it)")
	atLeast(f, "ranks", 1, "")
	return cmd
}

func runPlan(ctx context.Context, g *globals, o planOptions, dir string) error {
	if o.Ranks < 1 || o.Ranks > distplan.MaxRanks {
		return usageError{fmt.Errorf("--ranks must be 1 to %d (the GPUs of one node), got %d", distplan.MaxRanks, o.Ranks)}
	}
	rules, err := distplan.ParseRules(o.TP)
	if err != nil {
		return usageError{err}
	}
	c, err := shardcache.OpenContext(ctx, dir)
	if err != nil {
		return err
	}
	defer c.Close()
	warnBackup(g, errText(c.Damaged()))
	src, err := c.PickSource(o.Source)
	if err != nil {
		return err
	}
	p, err := distplan.New(c, src, o.Ranks, rules)
	if errors.Is(err, distplan.ErrPlan) {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	for _, r := range p.Unmatched {
		fmt.Fprintf(g.stderr, "warning: rule %q matches no tensor of %s\n", r, src.Path())
	}
	for _, r := range p.Shadowed {
		fmt.Fprintf(g.stderr, "warning: rule %q places nothing: earlier rules place every tensor it matches (the first matching rule wins)\n", r)
	}
	if o.Cost {
		prof, err := hostProfile(ctx, g, "", false)
		if err != nil {
			return err
		}
		p.Predict(prof)
	}
	if g.JSON {
		return printJSON(g.stdout, "plan", p)
	}
	sharded := 0
	for _, t := range p.Tensors {
		if t.Placement.Shard {
			sharded++
		}
	}
	fmt.Fprintf(g.stdout, "%s onto %d ranks: %s sharded, the others replicated; the node reads %s once\n",
		count(len(p.Tensors), "tensor"), p.Ranks, count(sharded, "tensor"), human(p.Read))
	tw := tabwriter.NewWriter(g.stdout, 2, 8, 2, ' ', 0)
	pr := p.Predicted
	head := "rank\treads\tobjects\treceives\tsends\tkeeps (raw)"
	if pr != nil {
		head += "\traw/fixed/entropy\tpredicted\tall raw"
	}
	fmt.Fprintln(tw, head)
	for r, st := range p.PerRank {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s", r, human(st.Read), st.Objects, human(st.Received), human(st.Sent), human(st.Bytes))
		if pr != nil {
			c := pr.PerRank[r]
			fmt.Fprintf(tw, "\t%d/%d/%d\t%.2f ms\t%.2f ms", c.Raw, c.Fixed, c.Entropy, c.Seconds*1e3, c.RawS*1e3)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if pr != nil {
		model := "the built-in cost model"
		if pr.Profile != "default" {
			model = fmt.Sprintf("the cost model of %s, measured %s", pr.Host, pr.Profile)
		}
		fmt.Fprintf(g.stdout, "predicted reads from the page cache (%s): %.2f ms as stored (rank %d the slowest), %.2f ms all raw (%.3fx); peer transfers not included\n",
			model, pr.Seconds*1e3, pr.Slowest, pr.Raw*1e3, pr.Raw/pr.Seconds)
	}
	return nil
}
