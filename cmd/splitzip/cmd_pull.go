package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/splitzip/splitzip/oci"
)

func newPullCommand(g *globals) *cobra.Command {
	var o registryOptions
	cmd := &cobra.Command{
		Use:   "pull REF CACHE",
		Short: "Pull a cache artifact from an OCI registry or an S3 bucket into a cache",
		Long: `Pull the cache artifact at REF into CACHE (made when absent or empty; a cache
already there keeps what it holds, so only the files it lacks are fetched).
Every blob is checked against the manifest's size and digest as it streams.
An interrupted pull keeps the files that arrived whole and records the
artifact's checkpoints only at the end: run it again to fetch the rest.

` + registryHelp,
		Args: args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, a []string) error { return runPull(cmd.Context(), g, o, a[0], a[1]) },
	}
	o.addFlags(cmd)
	cmd.Flags().BoolVar(&o.NoSync, "no-sync", false, "do not wait for the disk before committing the cache (faster; a power loss may then lose what was fetched, which the next pull fetches again)")
	remoteArg(cmd, 0)
	return cmd
}

// pullNotes says what a pull mended and which checkpoints it replaced.
func pullNotes(g *globals, res oci.PullResult) {
	mendedNote(g, res.Mended, "fetched")
	for _, p := range res.Replaced {
		fmt.Fprintf(g.stderr, "note: the cache recorded another checkpoint at %s: the pulled one replaced it (a cache knows one checkpoint a path); gc frees the objects only the replaced one used\n", p)
	}
}

func runPull(ctx context.Context, g *globals, o registryOptions, ref, cache string) error {
	if err := o.check(ref); err != nil {
		return err
	}
	res, err := oci.Pull(ctx, ref, cache, o.oci(g))
	if err != nil {
		return registryError(err)
	}
	if g.JSON {
		return printJSON(g.stdout, "pull_summary", res)
	}
	pullNotes(g, res)
	pulled := res.Ref // a reference by digest names it already
	if !strings.HasSuffix(pulled, "@"+res.Digest) {
		pulled += "@" + res.Digest
	}
	rest := ""
	if res.Fetched < res.Blobs {
		rest = " (the cache had the rest)"
	}
	fmt.Fprintf(g.stdout, "pulled %s into %s: %s, %s; fetched %s, %s%s; checkpoints %s\n", pulled, res.Cache,
		count(res.Blobs, "blob"), human(res.Bytes), count(res.Fetched, "blob"), human(res.FetchedBytes), rest, strings.Join(res.Sources, ", "))
	return nil
}
