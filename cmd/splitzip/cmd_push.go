package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/spf13/cobra"

	"github.com/splitzip/splitzip/internal/failure"
	"github.com/splitzip/splitzip/oci"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/s3store"
)

// registryOptions are the flags push and pull share.
type registryOptions struct {
	Insecure bool
	Jobs     int
	Endpoint string
	NoSync   bool // pull only
}

func (o *registryOptions) addFlags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&o.Insecure, "insecure", false, "allow plain HTTP and registries whose TLS certificates do not verify")
	cmd.Flags().IntVar(&o.Jobs, "jobs", 8, "blobs moved at once")
	atLeast(cmd.Flags(), "jobs", 1, "omit --jobs for the default, 8")
	cmd.Flags().StringVar(&o.Endpoint, "endpoint-url", "", "an S3-compatible store's URL for s3:// references (default: $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, else AWS)")
}

// check refuses the flags that would do nothing for ref: --insecure for
// an s3:// one, --endpoint-url for a registry's.
func (o registryOptions) check(ref string) error {
	s3 := s3store.IsURL(ref)
	return refuseFlags(ref, []flagUse{
		{o.Insecure, !s3, "--insecure", "a registry reference"},
		{o.Endpoint != "", s3, "--endpoint-url", "an s3:// reference"},
	})
}

func (o registryOptions) oci(g *globals) oci.Options {
	return oci.Options{Insecure: o.Insecure, Jobs: o.Jobs, Progress: g.progress(), NoSync: o.NoSync, S3: s3store.Options{Endpoint: o.Endpoint},
		Check: pipeline.CheckStoredPayload}
}

// registryError gives an error of the registry or S3 client its kind: the
// server's own refusal (denied, unknown, unauthorized) is an input that
// cannot be used; a server that still fails or throttles after the
// retries (5xx, 429) and a network failure are a resource the run lacks
// now, which a later run may find.
func registryError(err error) error {
	var te *transport.Error
	var se interface{ HTTPStatusCode() int } // S3's answers
	var ne net.Error
	err = plainDetail(err)
	switch {
	case err == nil || failure.KindOf(err) != failure.Internal:
		return err
	case errors.As(err, &te) && (te.StatusCode == http.StatusTooManyRequests || te.StatusCode >= 500):
		return failure.Mark(failure.Resource, err)
	case errors.As(err, &te):
		return failure.Mark(failure.Input, err)
	case errors.As(err, &se) && (se.HTTPStatusCode() == http.StatusTooManyRequests || se.HTTPStatusCode() >= 500):
		return failure.Mark(failure.Resource, err)
	case errors.As(err, &se) && se.HTTPStatusCode() >= 400:
		return failure.Mark(failure.Input, err)
	case errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ETIMEDOUT):
		// A connection cut mid-body surfaces as a short read.
		return failure.Mark(failure.Resource, err)
	}
	return err
}

// detailedError is an error whose text shows a registry's diagnostic
// details as JSON, not in Go's syntax ("map[Tag:v1]").
type detailedError struct {
	msg string
	err error
}

func (e *detailedError) Error() string { return e.msg }
func (e *detailedError) Unwrap() error { return e.err }

// plainDetail rewrites the text of a registry's refusal in err whose
// diagnostics carry details: each detail as the JSON the registry sent.
func plainDetail(err error) error {
	var te *transport.Error
	if !errors.As(err, &te) {
		return err
	}
	// Advice to the client library's users, not to ours.
	msg := strings.Replace(err.Error(), " (HEAD responses have no body, use GET for details)", "", 1)
	if te.StatusCode == http.StatusUnauthorized || te.StatusCode == http.StatusForbidden {
		msg += " (check the registry's credentials: docker login REGISTRY writes them to the Docker configuration, $DOCKER_CONFIG/config.json or ~/.docker/config.json, which push and pull read)"
	}
	for _, d := range te.Errors {
		if d.Detail == nil {
			continue
		}
		j, jerr := json.Marshal(d.Detail)
		if jerr != nil {
			continue
		}
		msg = strings.Replace(msg, d.String(), fmt.Sprintf("%s: %s %s", d.Code, d.Message, j), 1)
	}
	if msg == err.Error() {
		return err
	}
	return &detailedError{msg, err}
}

const registryHelp = `REF is a registry reference as crane and docker take it (registry/repository:tag
or @sha256:digest; Docker Hub when no registry is named), with or without the
oci:// prefix the cache commands take it with. Credentials come from
the Docker configuration and its credential helpers (docker login).

REF may instead be s3://bucket/prefix[:tag|@sha256:digest] (tag "latest" when
none is named): the prefix holds an OCI image layout (oci-layout, index.json,
blobs/sha256/...) whose blobs every artifact under it shares. Credentials,
region and endpoint come from where the AWS CLI finds them (AWS_* variables,
~/.aws/config and credentials, SSO, the instance's role); --endpoint-url or
AWS_ENDPOINT_URL_S3 names an S3-compatible store, addressed path-style.`

func newPushCommand(g *globals) *cobra.Command {
	var o registryOptions
	cmd := &cobra.Command{
		Use:   "push CACHE REF",
		Short: "Push a cache to an OCI registry or an S3 bucket as an artifact",
		Long: `Push the cache as one OCI artifact: its index as the config blob, every object
file and pack as a layer blob (sha256 digest, BLAKE3 key in an annotation).
The registry keeps blobs by digest, so a checkpoint that shares tensors with
one pushed before uploads only its new files. The cache must not need its
source: compress it with --self-contained. Every tensor is verified against
its content key first (as verify does): a cache with damaged stored bytes
is not pushed (exit 1).

` + registryHelp,
		Args: args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, a []string) error { return runPush(cmd.Context(), g, o, a[0], a[1]) },
	}
	o.addFlags(cmd)
	remoteArg(cmd, 1)
	return cmd
}

func runPush(ctx context.Context, g *globals, o registryOptions, cache, ref string) error {
	// The reference's form first: a mistyped one is refused before the
	// cache is verified.
	if err := o.check(ref); err != nil {
		return err
	}
	if err := o.oci(g).CheckRef(ref); err != nil {
		return registryError(err)
	}
	// What push refuses of the cache, before the registry is asked.
	if err := oci.CheckPushable(ctx, cache); err != nil {
		return err
	}
	if err := checkBeforePush(ctx, g, cache); err != nil {
		return err
	}
	// What the tag holds now: another cache is replaced, with a note (it
	// stays pullable by digest); anything else is not replaced, as
	// compress -o refuses it.
	before, err := oci.Stat(ctx, ref, o.oci(g))
	switch {
	case errors.Is(err, oci.ErrNotFound):
		before = oci.Artifact{}
	case errors.Is(err, oci.ErrNotArtifact):
		return fmt.Errorf("%w; push replaces a splitzip cache's tag and nothing else: name another tag", err)
	case err != nil:
		return registryError(err)
	}
	res, err := oci.Push(ctx, cache, ref, o.oci(g))
	if err != nil {
		return registryError(err)
	}
	var replaced *oci.Artifact
	if before.Digest != "" && before.Digest != res.Digest {
		replaced = &before
	}
	if g.JSON {
		return printJSON(g.stdout, "push_summary", struct {
			oci.PushResult
			// Replaced is what the tag held before, another cache.
			Replaced *oci.Artifact `json:"replaced,omitempty"`
		}{res, replaced})
	}
	printPushed(g, cache, res)
	if replaced != nil {
		fmt.Fprintf(g.stderr, "note: %s held another cache (%s: %s); it now names this one, and the other stays pullable as %s\n",
			ref, replaced.Digest, strings.Join(replaced.Sources, ", "), replaced.ByDigest)
	}
	return nil
}

// checkBeforePush verifies a cache's stored bytes against their content
// keys before a push publishes them: a damaged object or record is
// refused (integrity), never uploaded for every puller to receive with
// digests that match. Problems of the source alone (changed, gone) do not
// stop a push of a self-contained cache.
func checkBeforePush(ctx context.Context, g *globals, cache string) error {
	res, err := pipeline.Verify(ctx, cache, pipeline.VerifyOptions{Progress: g.progress()})
	if err != nil {
		return err
	}
	bad := 0
	for _, p := range res.Problems {
		if failure.KindOf(p.Err) != failure.Integrity {
			continue
		}
		bad++
		if !g.JSON {
			p.Error = strings.TrimPrefix(failure.Message(p.Err), p.File+": ")
			fmt.Fprintln(g.stderr, failLine(p))
		}
	}
	if bad > 0 {
		return failure.Mark(failure.Integrity, fmt.Errorf("%s: the cache's stored bytes are damaged (%s): not pushed (verify %s says more; %s)",
			cache, count(bad, "problem"), cache, mendHint))
	}
	return nil
}

// printPushed says what a push moved.
func printPushed(g *globals, cache string, res oci.PushResult) {
	rest := ""
	if res.Uploaded < res.Blobs {
		rest = " (the registry or bucket had the rest)"
	}
	fmt.Fprintf(g.stdout, "pushed %s to %s@%s: %s, %s; uploaded %s, %s%s\n", cache, res.Ref, res.Digest,
		count(res.Blobs, "blob"), human(res.Bytes), count(res.Uploaded, "blob"), human(res.UploadedBytes), rest)
}
