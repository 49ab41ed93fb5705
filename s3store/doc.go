// Package s3store reads and writes the objects under one prefix of an
// S3-compatible bucket (AWS S3, SeaweedFS, Versity's gateway, MinIO,
// Ceph's RGW, ...), for the caches splitzip keeps there.
//
// A Store reads a byte range of an object, streams a large object as
// parallel ranged GETs read ahead in order (Open), writes an object
// whole or, above the part size, as a multipart upload of parallel
// parts, and writes conditionally (If-Match, If-None-Match) so that two
// writers of one small object never lose each other's change silently.
// An object appears whole or not at all: S3 makes a PUT and a completed
// multipart upload visible at once, and an upload that fails is aborted.
//
// Credentials, the region and the endpoint come from where the AWS CLI
// finds them: the environment (AWS_ACCESS_KEY_ID, AWS_PROFILE,
// AWS_REGION, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, ...), the shared
// files ~/.aws/config and ~/.aws/credentials, SSO, web identity and the
// instance's role. A store reached at an endpoint of its own is
// addressed path-style (http://host/bucket/key), as S3-compatible
// servers expect, and gets region us-east-1 when none is set.
//
// Requests go through the AWS SDK's retryer: throttling (503 SlowDown,
// 429) and server errors are retried with exponential backoff and
// jitter. A body that breaks off during Open is asked for again from the
// byte it stopped at.
package s3store
