package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/spf13/cobra"

	"github.com/splitzip/splitzip/internal/failure"
	"github.com/splitzip/splitzip/oci"
)

// registryOptions are the flags push and pull share.
type registryOptions struct {
	Insecure bool
	Jobs     int
}

func (o *registryOptions) addFlags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&o.Insecure, "insecure", false, "allow plain HTTP and registries whose TLS certificates do not verify")
	cmd.Flags().IntVar(&o.Jobs, "jobs", 8, "blobs moved at once")
}

func (o registryOptions) oci(g *globals) oci.Options {
	return oci.Options{Insecure: o.Insecure, Jobs: o.Jobs, Progress: g.progress()}
}

// registryError gives an error of the registry client its kind: the
// registry's own refusal (denied, unknown, unauthorized) is an input that
// cannot be used; a registry that still fails or throttles after the
// retries (5xx, 429) and a network failure are a resource the run lacks
// now, which a later run may find.
func registryError(err error) error {
	var te *transport.Error
	var ne net.Error
	switch {
	case err == nil || failure.KindOf(err) != failure.Internal:
		return err
	case errors.As(err, &te) && (te.StatusCode == http.StatusTooManyRequests || te.StatusCode >= 500):
		return failure.Mark(failure.Resource, err)
	case errors.As(err, &te):
		return failure.Mark(failure.Input, err)
	case errors.As(err, &ne):
		return failure.Mark(failure.Resource, err)
	}
	return err
}

const registryHelp = `REF is a registry reference as crane and docker take it (registry/repository:tag
or @sha256:digest; Docker Hub when no registry is named). Credentials come from
the Docker configuration and its credential helpers (docker login).`

func newPushCommand(g *globals) *cobra.Command {
	var o registryOptions
	cmd := &cobra.Command{
		Use:   "push CACHE REF",
		Short: "Push a cache to an OCI registry as an artifact",
		Long: `Push the cache as one OCI artifact: its index as the config blob, every object
file and pack as a layer blob (sha256 digest, BLAKE3 key in an annotation).
The registry keeps blobs by digest, so a checkpoint that shares tensors with
one pushed before uploads only its new files. The cache must not need its
source: compress it with --self-contained.

` + registryHelp,
		Args: args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, a []string) error { return runPush(cmd.Context(), g, o, a[0], a[1]) },
	}
	o.addFlags(cmd)
	return cmd
}

func runPush(ctx context.Context, g *globals, o registryOptions, cache, ref string) error {
	res, err := oci.Push(ctx, cache, ref, o.oci(g))
	if err != nil {
		return registryError(err)
	}
	if g.JSON {
		return printJSON(g.stdout, "push_summary", res)
	}
	fmt.Fprintf(g.stdout, "pushed %s to %s@%s: %s, %s; uploaded %s, %s (the registry had the rest)\n", cache, res.Ref, res.Digest,
		count(res.Blobs, "blob"), human(res.Bytes), count(res.Uploaded, "blob"), human(res.UploadedBytes))
	return nil
}
