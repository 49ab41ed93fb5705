package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/splitzip/splitzip/internal/netidle"
)

// Scheme starts a store's URL: s3://bucket/prefix.
const Scheme = "s3://"

// Errors.
var (
	// ErrURL: not an s3://bucket[/prefix] URL.
	ErrURL = errors.New("not an s3://bucket/prefix URL")
	// ErrNotFound: no object has the name.
	ErrNotFound = errors.New("no such object")
	// ErrChanged: a conditional write found the object changed (or, with
	// IfAbsent, present) since it was read.
	ErrChanged = errors.New("object changed since it was read")
	// ErrDenied reports a request the server refused (403): wrong or
	// missing credentials, or a policy that does not allow it.
	ErrDenied = errors.New("access denied: check the credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or ~/.aws/credentials) and what the bucket's policy allows")
	// ErrOptions: an option is out of range.
	ErrOptions = errors.New("invalid s3 store options")
	// ErrNoCredentials: the credentials a request needs could not be
	// had where the AWS CLI looks for them (none there, or an SSO
	// session or role that did not give them).
	ErrNoCredentials = errors.New("no S3 credentials could be had: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE (an SSO profile may need `aws sso login`), or write ~/.aws/credentials")
)

// URL is a bucket and a prefix of object names in it.
type URL struct {
	Bucket string
	Prefix string // no leading or trailing slash; "" is the whole bucket
}

// IsURL reports whether s names a store (starts with s3://).
func IsURL(s string) bool { return strings.HasPrefix(s, Scheme) }

// ParseURL parses s3://bucket[/prefix]. The bucket is named as S3 names
// buckets (3 to 63 characters of lower-case letters, digits, dots and
// hyphens); the prefix may be empty.
func ParseURL(s string) (URL, error) {
	rest, ok := strings.CutPrefix(s, Scheme)
	if !ok {
		return URL{}, fmt.Errorf("%w: %q", ErrURL, s)
	}
	bucket, prefix, _ := strings.Cut(rest, "/")
	if len(bucket) < 3 || len(bucket) > 63 {
		return URL{}, fmt.Errorf("%w: %q: a bucket name has 3 to 63 characters", ErrURL, s)
	}
	for _, c := range bucket {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return URL{}, fmt.Errorf("%w: %q: a bucket name has lower-case letters, digits, dots and hyphens", ErrURL, s)
		}
	}
	prefix = strings.Trim(prefix, "/")
	if strings.Contains(prefix, "//") {
		return URL{}, fmt.Errorf("%w: %q: an empty name between slashes", ErrURL, s)
	}
	return URL{Bucket: bucket, Prefix: prefix}, nil
}

func (u URL) String() string {
	if u.Prefix == "" {
		return Scheme + u.Bucket
	}
	return Scheme + u.Bucket + "/" + u.Prefix
}

// Options configure a Store. The zero value reads everything from the
// environment and the AWS files.
type Options struct {
	// Endpoint, if set, is the store's base URL (http://127.0.0.1:7070),
	// in place of AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or AWS's own.
	Endpoint string
	// PartSize is the size of a ranged GET of Open and of a part of a
	// multipart upload (0: DefaultPartSize; at least MinPartSize).
	PartSize int64
	// Ahead is how many parts Open and Write keep in flight for one
	// object (0: DefaultAhead): memory is at most Ahead × PartSize an
	// object.
	Ahead int
	// MaxAttempts bounds the tries of one request (0: the SDK's, 3).
	MaxAttempts int
	// HTTPClient, if set, carries the requests (tests inject faults).
	HTTPClient *http.Client
	// Idle is how long a connection may send nothing, awaiting an answer
	// or mid-body, before the request fails and is retried (0:
	// DefaultIdle); not with HTTPClient.
	Idle time.Duration
}

// Defaults and bounds of Options.
const (
	// DefaultPartSize: 8 MiB a ranged GET or uploaded part, large
	// enough that a request's latency (about a millisecond to S3 in
	// one region) costs under 1% of its transfer at 1.5 GB/s a
	// connection, small enough to start the first decode early.
	DefaultPartSize = 8 << 20
	// MinPartSize is S3's smallest part of a multipart upload (but the
	// last).
	MinPartSize = 5 << 20
	// DefaultIdle: a server silent for a minute is taken for gone (a
	// server that accepted and never answered held a pull forever).
	DefaultIdle = time.Minute
	// DefaultAhead: 2 parts in flight an object (a pull of 8 objects at
	// once holds at most 128 MiB in flight).
	DefaultAhead = 2
	// maxParts is S3's limit on the parts of one upload; a larger object
	// gets larger parts.
	maxParts = 10000
)

// Store is the objects under one URL's prefix.
type Store struct {
	c        *s3.Client
	url      URL
	partSize int64
	ahead    int
	buffers  sync.Pool // *[]byte of partSize: Open's parts
}

// New returns the store at u, its client configured from o, the
// environment and the AWS files. It makes no request.
func New(ctx context.Context, u URL, o Options) (*Store, error) {
	switch {
	case o.PartSize != 0 && o.PartSize < MinPartSize:
		return nil, fmt.Errorf("%w: part size %d is under S3's %d", ErrOptions, o.PartSize, MinPartSize)
	case o.Ahead < 0 || o.MaxAttempts < 0 || o.Idle < 0:
		return nil, fmt.Errorf("%w: ahead %d, attempts %d, idle %v", ErrOptions, o.Ahead, o.MaxAttempts, o.Idle)
	}
	var lo []func(*config.LoadOptions) error
	if o.MaxAttempts > 0 {
		lo = append(lo, config.WithRetryMaxAttempts(o.MaxAttempts))
	}
	cfg, err := config.LoadDefaultConfig(ctx, lo...)
	if err != nil {
		return nil, fmt.Errorf("%s: AWS configuration: %w", u, err)
	}
	if cfg.Credentials != nil {
		cfg.Credentials = credentials{cfg.Credentials}
	}
	c := s3.NewFromConfig(cfg, func(so *s3.Options) {
		if o.HTTPClient != nil {
			so.HTTPClient = o.HTTPClient
		} else {
			idle := o.Idle
			if idle == 0 {
				idle = DefaultIdle
			}
			// Not the SDK's WithReadTimeout: its deadline does not move
			// while a request's body is sent, so an upload longer than
			// idle failed.
			so.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
				tr.DialContext = netidle.Dial(tr.DialContext, idle)
			})
		}
		// Objects are checked by their digests; a server that sends no
		// checksum of its own is no news.
		so.DisableLogOutputChecksumValidationSkipped = true
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
		if so.BaseEndpoint != nil {
			// An S3-compatible server of its own: path-style names, and
			// a region for the signature where none is set.
			so.UsePathStyle = true
			if so.Region == "" {
				so.Region = "us-east-1"
			}
		}
		// Throttling is retried like any retryable error, without the
		// client-side rate limit that would fail requests under load.
		so.Retryer = retry.AddWithMaxBackoffDelay(retry.NewStandard(func(ro *retry.StandardOptions) {
			if o.MaxAttempts > 0 {
				ro.MaxAttempts = o.MaxAttempts
			}
			ro.RateLimiter = noRateLimit{}
		}), maxBackoff)
	})
	s := &Store{c: c, url: u, partSize: o.PartSize, ahead: o.Ahead}
	if s.partSize == 0 {
		s.partSize = DefaultPartSize
	}
	if s.ahead == 0 {
		s.ahead = DefaultAhead
	}
	s.buffers.New = func() any {
		b := make([]byte, s.partSize)
		return &b
	}
	return s, nil
}

// maxBackoff caps one wait between retries.
const maxBackoff = 5e9 // 5 s

type noRateLimit struct{}

func (noRateLimit) GetToken(context.Context, uint) (func() error, error) {
	return func() error { return nil }, nil
}
func (noRateLimit) AddTokens(uint) error { return nil }

// key is the object name of name under the prefix.
func (s *Store) key(name string) string {
	if s.url.Prefix == "" {
		return name
	}
	return path.Join(s.url.Prefix, name)
}

// where names an object in errors.
func (s *Store) where(name string) string { return s.url.String() + "/" + name }

// Stat returns the size and ETag of object name, or ErrNotFound.
func (s *Store) Stat(ctx context.Context, name string) (size int64, etag string, err error) {
	out, err := s.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.url.Bucket, Key: aws.String(s.key(name))})
	if err != nil {
		return 0, "", s.fail(name, err)
	}
	return aws.ToInt64(out.ContentLength), aws.ToString(out.ETag), nil
}

// Range returns n bytes of object name from off on (n < 0: to its end).
func (s *Store) Range(ctx context.Context, name string, off, n int64) (io.ReadCloser, error) {
	in := &s3.GetObjectInput{Bucket: &s.url.Bucket, Key: aws.String(s.key(name))}
	switch {
	case n == 0:
		return io.NopCloser(bytes.NewReader(nil)), nil
	case n > 0:
		in.Range = aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	case off > 0:
		in.Range = aws.String(fmt.Sprintf("bytes=%d-", off))
	}
	out, err := s.c.GetObject(ctx, in)
	if err != nil {
		return nil, s.fail(name, err)
	}
	// A server that ignored the range would send other bytes.
	if in.Range != nil && (out.ContentRange == nil || !strings.HasPrefix(*out.ContentRange, fmt.Sprintf("bytes %d-", off))) {
		out.Body.Close()
		return nil, fmt.Errorf("%s: asked for %s, got Content-Range %q", s.where(name), *in.Range, aws.ToString(out.ContentRange))
	}
	return out.Body, nil
}

// ReadAll reads object name whole, refusing one of more than max bytes,
// and returns its ETag for a conditional write. An object rewritten while
// it is read can arrive torn from some servers (the new object's checksum
// over the old bytes); the SDK's checksum check catches that, and the
// object is read again, up to tornTries times, a little later each time
// (writers that keep rewriting it, as pushes of several tags at once do,
// tore four reads in a row on a loaded machine when they came at once).
func (s *Store) ReadAll(ctx context.Context, name string, max int64) ([]byte, string, error) {
	for try := 1; ; try++ {
		b, etag, err := s.readAll(ctx, name, max)
		if err == nil || try == tornTries || !strings.Contains(err.Error(), "checksum did not match") {
			return b, etag, err
		}
		select {
		case <-ctx.Done():
			return nil, "", ctx.Err()
		case <-time.After(time.Duration(try) * tornPause):
		}
	}
}

// tornTries bounds ReadAll's reads of an object that arrives torn, and
// tornPause is the wait after the first (twice that after the second...).
const (
	tornTries = 8
	tornPause = 5 * time.Millisecond
)

func (s *Store) readAll(ctx context.Context, name string, max int64) ([]byte, string, error) {
	out, err := s.c.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.url.Bucket, Key: aws.String(s.key(name))})
	if err != nil {
		return nil, "", s.fail(name, err)
	}
	defer out.Body.Close()
	if n := aws.ToInt64(out.ContentLength); n > max {
		return nil, "", fmt.Errorf("%s: %d bytes, more than %d", s.where(name), n, max)
	}
	b, err := io.ReadAll(io.LimitReader(out.Body, max+1))
	switch {
	case err != nil:
		return nil, "", fmt.Errorf("%s: %w", s.where(name), err)
	case int64(len(b)) > max:
		return nil, "", fmt.Errorf("%s: more than %d bytes", s.where(name), max)
	}
	return b, aws.ToString(out.ETag), nil
}

// Cond makes a write conditional.
type Cond struct {
	// IfMatch: write only over the object with this ETag.
	IfMatch string
	// IfAbsent: write only where no object has the name.
	IfAbsent bool
}

// Put writes b as object name, under cond; ErrChanged if cond fails.
func (s *Store) Put(ctx context.Context, name string, b []byte, cond Cond) error {
	in := &s3.PutObjectInput{Bucket: &s.url.Bucket, Key: aws.String(s.key(name)), Body: bytes.NewReader(b),
		ContentLength: aws.Int64(int64(len(b)))}
	if cond.IfMatch != "" {
		in.IfMatch = aws.String(cond.IfMatch)
	}
	if cond.IfAbsent {
		in.IfNoneMatch = aws.String("*")
	}
	_, err := s.c.PutObject(ctx, in)
	return s.fail(name, err)
}

// Delete removes object name (no error if it is absent).
func (s *Store) Delete(ctx context.Context, name string) error {
	_, err := s.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.url.Bucket, Key: aws.String(s.key(name))})
	return s.fail(name, err)
}

// credentials is the configured provider whose failure is
// ErrNoCredentials (the SDK's error says where it looked last, the
// instance metadata service).
type credentials struct{ aws.CredentialsProvider }

func (c credentials) Retrieve(ctx context.Context) (aws.Credentials, error) {
	cr, err := c.CredentialsProvider.Retrieve(ctx)
	var ne net.Error
	if err == nil || ctx.Err() != nil || errors.As(err, &ne) && !strings.Contains(err.Error(), "IMDS") {
		// A network failure reaching a credentials service (STS, SSO) is
		// the network's; the instance metadata service that none answers
		// is where the search ends when nothing else gave any.
		return cr, err
	}
	return cr, fmt.Errorf("%w (%w)", ErrNoCredentials, err)
}

// fail names the object in err and maps S3's answers to the sentinels.
func (s *Store) fail(name string, err error) error {
	if err == nil {
		return nil
	}
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		switch re.HTTPStatusCode() {
		case http.StatusNotFound:
			var ae smithy.APIError
			if !errors.As(err, &ae) || ae.ErrorCode() != "NoSuchBucket" {
				return fmt.Errorf("%s: %w", s.where(name), ErrNotFound)
			}
		case http.StatusPreconditionFailed, http.StatusConflict:
			return fmt.Errorf("%s: %w", s.where(name), ErrChanged)
		case http.StatusForbidden:
			return fmt.Errorf("%s: %w: %w", s.where(name), ErrDenied, err)
		}
	}
	return fmt.Errorf("%s: %w", s.where(name), err)
}
