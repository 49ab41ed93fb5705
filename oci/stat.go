package oci

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/splitzip/splitzip/s3store"
)

// Artifact describes the cache artifact at a reference, as Stat reads it.
type Artifact struct {
	Ref    string `json:"ref"`
	Digest string `json:"digest"` // the manifest's
	// ByDigest is Ref with the digest for its tag: the artifact Stat
	// read, however the tag moves after it.
	ByDigest string `json:"by_digest"`
	// Blobs and Bytes: the artifact's object files and packs.
	Blobs   int      `json:"blobs"`
	Bytes   uint64   `json:"bytes"`
	Sources []string `json:"sources"` // its checkpoints, by Source.Path
}

// Stat reads the manifest and the index of the cache artifact at ref,
// checked against each other as Pull checks them, and fetches none of
// its objects. A reference that names nothing yet (a tag not pushed, a
// repository not made) is ErrNotFound; a manifest that is not a splitzip
// cache's is ErrNotArtifact.
//
// It is the look a writer takes before replacing a tag: a registry is
// asked with the push scope, the one the push that follows asks for, so
// that a repository the caller may create but not yet read is told
// apart from one it may not use.
func Stat(ctx context.Context, ref string, o Options) (Artifact, error) {
	src, err := o.source(ctx, ref, true)
	if err != nil {
		return Artifact{}, err
	}
	// The manifest alone first: a blob it names that is missing is a
	// broken artifact, not an absent one.
	if _, _, err := src.manifest(); notFound(err) {
		return Artifact{}, fmt.Errorf("stat %s: %w: %w", src, ErrNotFound, err)
	} else if err != nil {
		return Artifact{}, fmt.Errorf("stat %s: %w", src, err)
	}
	art, err := readArtifact(ctx, src, "stat")
	if err != nil {
		return Artifact{}, err
	}
	a := Artifact{Ref: src.String(), Digest: art.digest.String(), Blobs: len(art.files)}
	if a.ByDigest, err = o.digestRef(ref, a.Digest); err != nil {
		return Artifact{}, err
	}
	for _, k := range art.files {
		a.Bytes += art.ix.Objects[k].Size
	}
	for _, s := range art.ix.Sources {
		a.Sources = append(a.Sources, s.Path())
	}
	return a, nil
}

// notFound reports whether err says that the reference names no
// manifest: a layout without the tag (or the digest's blob), or a
// registry's 404 (MANIFEST_UNKNOWN, NAME_UNKNOWN).
func notFound(err error) bool {
	var te *transport.Error
	return errors.Is(err, ErrNoTag) || errors.Is(err, s3store.ErrNotFound) ||
		errors.As(err, &te) && te.StatusCode == http.StatusNotFound
}

// pushScope returns the transport of a registry's requests for repo
// authenticated for the push scope (push and pull), which a writer's look
// at a tag asks for.
func (o Options) pushScope(ctx context.Context, repo name.Repository) (http.RoundTripper, error) {
	auth, err := authn.Resolve(ctx, o.keychain(), repo)
	if err != nil {
		return nil, err
	}
	base := o.transport()
	base = transport.NewRetry(base, transport.WithRetryStatusCodes(retryStatusCodes...))
	// A transport.Wrapper: the client uses it as it is, with its scope.
	return transport.NewWithContext(ctx, repo.Registry, auth, base, []string{repo.Scope(transport.PushScope)})
}

// digestRef is ref (a registry's or an s3:// layout's) naming digest
// instead of its tag or digest.
func (o Options) digestRef(ref, digest string) (string, error) {
	if s3store.IsURL(ref) {
		dir, last := path.Split(ref)
		if i := strings.IndexAny(last, ":@"); i >= 0 {
			last = last[:i]
		}
		return dir + last + "@" + digest, nil
	}
	r, err := o.parse(ref)
	if err != nil {
		return "", err
	}
	return r.Context().Digest(digest).String(), nil
}
