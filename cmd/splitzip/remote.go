package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/splitzip/splitzip/oci"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/s3store"
	"github.com/splitzip/splitzip/shardcache"
)

// ociScheme marks a registry reference where a command takes a cache
// folder or a reference (verify, load, compress -o).
const ociScheme = "oci://"

// isRemote reports whether a cache argument names a remote cache: an
// s3:// layout or an oci:// registry reference.
func isRemote(s string) bool { return s3store.IsURL(s) || strings.HasPrefix(s, ociScheme) }

// remoteRef is the reference oci.Push and oci.Pull take for a remote
// cache argument.
func remoteRef(s string) string { return strings.TrimPrefix(s, ociScheme) }

// remoteOptions are the flags of a command whose cache may be remote.
type remoteOptions struct {
	Insecure   bool
	Endpoint   string
	LocalCache string
}

const remoteHelp = `CACHE may be remote: s3://bucket/prefix[:tag] (an OCI layout in a bucket, as
push writes it) or oci://registry/repository:tag. It is pulled into
--local-cache (kept: a later run fetches only what the folder lacks) or, by
default, into a temporary folder removed at the end; every blob is checked
against its digest as it arrives.`

func (o *remoteOptions) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.LocalCache, "local-cache", "", "for a remote CACHE: the local cache folder it is pulled into and kept in (default: a temporary folder, removed)")
	f.BoolVar(&o.Insecure, "insecure", false, "for an oci:// CACHE: allow plain HTTP and registries whose TLS certificates do not verify")
	f.StringVar(&o.Endpoint, "endpoint-url", "", "for an s3:// CACHE: an S3-compatible store's URL (default: $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, else AWS)")
}

// check refuses the flags that would do nothing for cache: any of them
// for a local cache, --insecure for an s3:// one, --endpoint-url for an
// oci:// one.
func (o remoteOptions) check(cache string) error {
	s3, reg := s3store.IsURL(cache), strings.HasPrefix(cache, ociScheme)
	return refuseFlags(cache, []flagUse{
		{o.LocalCache != "", s3 || reg, "--local-cache", "a remote cache (s3:// or oci://)"},
		{o.Insecure, reg, "--insecure", "an oci:// cache"},
		{o.Endpoint != "", s3, "--endpoint-url", "an s3:// cache"},
	})
}

// flagUse is a flag, whether it is set, and whether it does anything for
// the reference at hand (what says for what it does).
type flagUse struct {
	set, applies bool
	name, what   string
}

// refuseFlags is a usage error naming the first flag set that does
// nothing for ref, or nil.
func refuseFlags(ref string, flags []flagUse) error {
	for _, f := range flags {
		if f.set && !f.applies {
			return usageError{fmt.Errorf("%s is for %s, not %s", f.name, f.what, ref)}
		}
	}
	return nil
}

func (o remoteOptions) oci(g *globals) oci.Options {
	return oci.Options{Insecure: o.Insecure, Progress: g.progress(), S3: s3store.Options{Endpoint: o.Endpoint}, Check: pipeline.CheckStoredPayload}
}

// local returns the folder of a local cache: --local-cache, or a new
// temporary folder that done removes.
func (o remoteOptions) local(what string) (dir string, done func(), err error) {
	if o.LocalCache != "" {
		return o.LocalCache, func() {}, nil
	}
	tmp, err := os.MkdirTemp("", "splitzip-"+what+"-")
	if err != nil {
		return "", nil, err
	}
	return filepath.Join(tmp, "cache"), func() { os.RemoveAll(tmp) }, nil
}

// pull brings a remote cache into a local folder and returns it, with
// the checkpoints the remote cache holds (a --local-cache folder may hold
// others too); a local one is returned as it is, with none. done removes
// a temporary folder.
func (o remoteOptions) pull(ctx context.Context, g *globals, cache string) (dir string, sources []string, done func(), err error) {
	if err := o.check(cache); err != nil {
		return "", nil, nil, err
	}
	if !isRemote(cache) {
		return cache, nil, func() {}, nil
	}
	dir, done, err = o.local("pull")
	if err != nil {
		return "", nil, nil, err
	}
	oo := o.oci(g)
	oo.NoSync = o.LocalCache == "" // a temporary copy need not outlive a power loss
	oo.Temporary = o.LocalCache == ""
	res, err := oci.Pull(ctx, remoteRef(cache), dir, oo)
	for waited := false; errors.Is(err, shardcache.ErrLocked) && o.LocalCache != ""; {
		// Another command writes to --local-cache (often a load pulling
		// the same reference): wait for it, as its pull may leave this
		// one nothing to fetch.
		if !waited {
			fmt.Fprintf(g.stderr, "waiting for another splitzip command writing to %s\n", dir)
			waited = true
		}
		select {
		case <-ctx.Done():
			done()
			return "", nil, nil, ctx.Err()
		case <-time.After(lockPoll):
		}
		res, err = oci.Pull(ctx, remoteRef(cache), dir, oo)
	}
	if err != nil {
		done()
		return "", nil, nil, registryError(err)
	}
	fmt.Fprintf(g.stderr, "pulled %s@%s into %s: fetched %s, %s of %s\n", res.Ref, res.Digest, dir,
		count(res.Fetched, "blob"), human(res.FetchedBytes), human(res.Bytes))
	pullNotes(g, res)
	return dir, res.Sources, done, nil
}

// lockPoll is how often a pull into a --local-cache folder another
// command writes to tries again.
const lockPoll = 200 * time.Millisecond

// sourceOf is the checkpoint a load of a pulled remote cache reads: the
// one named (--source), else the remote cache's own when it holds one,
// not the others a --local-cache folder may hold ("" lets the cache
// choose, as for a local one: a remote cache of several checkpoints
// needs --source, as a local one does).
func sourceOf(named string, remote []string) string {
	if named == "" && len(remote) == 1 {
		return remote[0]
	}
	return named
}

// base pulls what a remote cache's tag holds into dir, the local folder
// compress writes before it pushes, so that the push keeps the tag's
// checkpoints beside the new one (a pull fetches only what dir lacks). It
// returns nil when the tag names nothing yet; a tag that holds something
// other than a splitzip cache is refused, never replaced.
func (o remoteOptions) base(ctx context.Context, g *globals, cache, dir string, noSync bool) (*oci.PullResult, error) {
	oo := o.oci(g)
	art, err := oci.Stat(ctx, remoteRef(cache), oo)
	switch {
	case errors.Is(err, oci.ErrNotFound):
		return nil, nil
	case errors.Is(err, oci.ErrNotArtifact):
		return nil, fmt.Errorf("%w; compress adds checkpoints to a splitzip cache and replaces nothing else: name another tag", err)
	case err != nil:
		return nil, registryError(err)
	}
	oo.NoSync = noSync
	oo.KeepRoots = true // pushed again: the checkpoints' own folders
	// By digest: what Stat found, though the tag moves meanwhile.
	res, err := oci.Pull(ctx, art.ByDigest, dir, oo)
	if err != nil {
		return nil, registryError(err)
	}
	return &res, nil
}

// open opens the cache a load reads: a local folder; a remote cache
// pulled into --local-cache, with its checkpoints (as pull gives them);
// or, without it, the remote cache read in place (oci.Open: ranged GETs
// as the load reads, no local copy).
func (o remoteOptions) open(ctx context.Context, g *globals, cache string) (*shardcache.Cache, []string, func(), error) {
	if err := o.check(cache); err != nil {
		return nil, nil, nil, err
	}
	if isRemote(cache) && o.LocalCache == "" {
		c, err := oci.Open(ctx, remoteRef(cache), o.oci(g))
		if err != nil {
			return nil, nil, nil, registryError(err)
		}
		fmt.Fprintf(g.stderr, "streaming %s: no local copy\n", cache)
		return c, nil, func() {}, nil
	}
	dir, sources, done, err := o.pull(ctx, g, cache)
	if err != nil {
		return nil, nil, nil, err
	}
	c, err := shardcache.OpenContext(ctx, dir)
	if err != nil {
		done()
		return nil, nil, nil, err
	}
	return c, sources, func() { c.Close(); done() }, nil
}
