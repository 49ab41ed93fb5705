package oci

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/splitzip/splitzip/internal/netidle"
	"github.com/splitzip/splitzip/s3store"
	"github.com/splitzip/splitzip/shardcache"
)

// Media types of a splitzip artifact. The index's own format version is
// inside its bytes; these name the artifact's layout, version 1.
const (
	// ArtifactType is the manifest's artifactType.
	ArtifactType = "application/vnd.splitzip.cache.v1"
	// IndexMediaType is the config blob's: the cache's index file.
	IndexMediaType types.MediaType = "application/vnd.splitzip.cache.index.v1"
	// ObjectMediaType is a layer's: an object file or a pack, byte for
	// byte as the cache stores it.
	ObjectMediaType types.MediaType = "application/vnd.splitzip.cache.object.v1"
	// KeyAnnotation names a layer's object: its key in the index.
	KeyAnnotation = "dev.splitzip.key"
)

// Errors.
var (
	// ErrNotArtifact: the manifest is not a splitzip cache's.
	ErrNotArtifact = errors.New("not a splitzip cache artifact")
	// ErrBlob: a blob's bytes are not what the manifest says (size or
	// digest), or the manifest and the index disagree.
	ErrBlob = errors.New("blob does not match the manifest")
	// ErrNotFound: the reference names no manifest (a tag not pushed
	// yet); Stat's.
	ErrNotFound = errors.New("no artifact at the reference")
	// ErrReference: a reference that names no repository and tag or
	// digest (a command-line mistake).
	ErrReference = errors.New("not a registry reference")
	// ErrLayoutRef: an s3:// reference whose tag or digest is malformed
	// (a command-line mistake).
	ErrLayoutRef = errors.New("want s3://bucket/prefix[:tag|@sha256:HEX]")
)

// manifest is an OCI image manifest with the artifactType field of
// image-spec 1.1 (the registry client's type predates it).
type manifest struct {
	SchemaVersion int64             `json:"schemaVersion"`
	MediaType     types.MediaType   `json:"mediaType"`
	ArtifactType  string            `json:"artifactType,omitempty"`
	Config        v1.Descriptor     `json:"config"`
	Layers        []v1.Descriptor   `json:"layers"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

// Options are what Push and Pull share.
type Options struct {
	// Insecure allows plain HTTP and registries whose TLS certificates
	// do not verify.
	Insecure bool
	// Jobs is how many blobs move at once (0: 8).
	Jobs int
	// Keychain finds credentials (nil: the Docker configuration and
	// credential helpers, authn.DefaultKeychain).
	Keychain authn.Keychain
	// Transport, if set, carries the requests (tests use it to inject
	// faults); Insecure still decides the reference's scheme.
	Transport http.RoundTripper
	// Idle is how long a registry's connection may send nothing, awaiting
	// an answer or mid-blob, before its request fails, to be retried or
	// resumed (0: netidle.Timeout); not with Transport. (S3.Idle is the
	// S3 client's.)
	Idle time.Duration
	// NoSync makes a pull commit its cache without flushing it to disk
	// (faster; a power loss may then lose what it fetched, which the
	// next pull fetches again).
	NoSync bool
	// S3 configures the client of s3:// references (its endpoint, part
	// size, parts in flight, retries); credentials and the rest come
	// from the environment and the AWS files.
	S3 s3store.Options
	// Progress, if set, is told the bytes to move and, as they move,
	// how many more moved; it must be safe for concurrent calls.
	Progress Progress
	// Check, if set, checks the payloads a pull finds in the cache
	// already before it counts them as held (shardcache.PayloadCheck;
	// raw objects are checked against their keys regardless).
	Check shardcache.PayloadCheck
	// KeepRoots makes Pull record the artifact's checkpoints at the
	// folders they were compressed from, on the machine that compressed
	// them (for a cache pushed again: compress -o's), not under the
	// cache's own checkpoints/ folder (shardcache.PulledRoot).
	KeepRoots bool
	// Temporary says the cache a pull fills is a folder removed after
	// the run: its errors do not advise running the pull again into it.
	Temporary bool
}

// Progress follows the bytes a push or pull moves.
type Progress interface {
	Start(label string, total uint64)
	Add(n uint64)
	Finish()
}

type nopProgress struct{}

func (nopProgress) Start(string, uint64) {}
func (nopProgress) Add(uint64)           {}
func (nopProgress) Finish()              {}

func (o Options) jobs() int {
	if o.Jobs <= 0 {
		return 8
	}
	return o.Jobs
}

func (o Options) progress() Progress {
	if o.Progress == nil {
		return nopProgress{}
	}
	return o.Progress
}

// retryStatusCodes are the answers a request is retried after (with the
// client's backoff): the registry client's own list (timeouts, 500 and
// the gateways' 502, 503, 504) and 429, a registry's or a CDN's "too
// many requests", which asks the client to come back later.
var retryStatusCodes = []int{
	http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
	http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout,
	499, // nginx: the client closed the request
	522, // Cloudflare: the origin timed out
}

// parse parses a reference as crane does (a tag or a digest, the Docker
// Hub by default), with or without the oci:// scheme the cache commands
// take it with.
func (o Options) parse(ref string) (name.Reference, error) {
	var opts []name.Option
	if o.Insecure {
		opts = append(opts, name.Insecure)
	}
	bare := strings.TrimPrefix(ref, "oci://")
	var r name.Reference
	var err error
	if bare == "" || strings.HasPrefix(bare, "/") {
		// oci:///repo would be Docker Hub's "/repo"; an empty one the
		// parser's "could not parse reference: " of nothing.
		err = errors.New("no registry named")
	} else {
		r, err = name.ParseReference(bare, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v (want [oci://]REGISTRY/REPOSITORY[:TAG|@sha256:DIGEST], a repository of lower-case letters, digits and separators, at least 2 characters)", ErrReference, ref, err)
	}
	return r, nil
}

// remote returns the registry client's options.
func (o Options) remote(ctx context.Context) []remote.Option {
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(o.keychain()), remote.WithJobs(o.jobs()),
		remote.WithRetryStatusCodes(retryStatusCodes...)}
	return append(opts, remote.WithTransport(o.transport()))
}

// transport is the transport requests go through: Options.Transport, or
// the client's default whose connections give up after Idle of silence
// (a registry that accepted and never answered held a pull forever),
// skipping TLS verification with Insecure.
func (o Options) transport() http.RoundTripper {
	if o.Transport != nil {
		return o.Transport
	}
	t := remote.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = netidle.Dial(t.DialContext, o.Idle)
	if o.Insecure {
		t.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // asked for with --insecure
	}
	return t
}

func (o Options) keychain() authn.Keychain {
	if o.Keychain == nil {
		return authn.DefaultKeychain
	}
	return o.Keychain
}
