package main

import (
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
match wins, replicate by default): a replicated tensor to every rank whole, a
tensor sharded along dimension 0 as the payload chunks covering each rank's
values, along another dimension as the whole payload, each rank keeping its part.
Prints per rank the bytes read, received, sent and kept; --json the whole plan.
Nothing is moved: this is the plan the multi-GPU loaders carry out.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(_ *cobra.Command, a []string) error { return runPlan(g, o, a[0]) },
	}
	f := cmd.Flags()
	f.IntVar(&o.Ranks, "ranks", 2, "ranks (GPUs) of the node")
	f.StringVar(&o.TP, "tp", "", `placement rules, e.g. "*embed*=replicate,*.q_proj.weight=shard:0,*.o_proj.weight=shard:1"`)
	f.StringVar(&o.Source, "source", "", "source to plan: a recorded root, when the cache holds several")
	atLeast(f, "ranks", 1, "")
	return cmd
}

func runPlan(g *globals, o planOptions, dir string) error {
	if o.Ranks < 1 {
		return usageError{fmt.Errorf("--ranks must be at least 1")}
	}
	rules, err := distplan.ParseRules(o.TP)
	if err != nil {
		return usageError{err}
	}
	c, err := shardcache.Open(dir)
	if err != nil {
		return err
	}
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
	fmt.Fprintln(tw, "rank\treads\tobjects\treceives\tsends\tkeeps (raw)")
	for r, st := range p.PerRank {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\n", r, human(st.Read), st.Objects, human(st.Received), human(st.Sent), human(st.Bytes))
	}
	return tw.Flush()
}
