package s3store

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// Write writes size bytes of r as object name: in one PUT up to the part
// size, above it as a multipart upload of Ahead parts at a time, aborted
// if a part fails. The object appears whole or not at all. sent, if not
// nil, is told the bytes of each request that succeeded.
func (s *Store) Write(ctx context.Context, name string, r io.ReaderAt, size int64, sent func(int64)) error {
	if sent == nil {
		sent = func(int64) {}
	}
	key := aws.String(s.key(name))
	if size <= s.partSize {
		_, err := s.c.PutObject(ctx, &s3.PutObjectInput{Bucket: &s.url.Bucket, Key: key,
			Body: io.NewSectionReader(r, 0, size), ContentLength: aws.Int64(size)})
		if err != nil {
			return s.fail(name, err)
		}
		sent(size)
		return nil
	}
	part := max(s.partSize, (size+maxParts-1)/maxParts)
	up, err := s.c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &s.url.Bucket, Key: key})
	if err != nil {
		return s.fail(name, err)
	}
	n := int((size + part - 1) / part)
	parts := make([]types.CompletedPart, n)
	err = s.uploadParts(ctx, name, up.UploadId, r, size, part, parts, sent)
	if err == nil {
		_, err = s.c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &s.url.Bucket, Key: key,
			UploadId: up.UploadId, MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
		err = s.fail(name, err)
	}
	if err != nil {
		// An upload left open keeps its parts stored (and billed); abort
		// it even when ctx is done.
		_, aerr := s.c.AbortMultipartUpload(context.WithoutCancel(ctx), &s3.AbortMultipartUploadInput{Bucket: &s.url.Bucket,
			Key: key, UploadId: up.UploadId})
		if aerr != nil {
			err = errors.Join(err, fmt.Errorf("aborting the upload: %w", s.fail(name, aerr)))
		}
	}
	return err
}

// uploadParts uploads the parts of one multipart upload, Ahead at a time,
// filling parts in.
func (s *Store) uploadParts(ctx context.Context, name string, id *string, r io.ReaderAt, size, part int64,
	parts []types.CompletedPart, sent func(int64)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, s.ahead)
	var w waitAll
	for i := range parts {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		w.Go(func() error {
			defer func() { <-sem }()
			off := int64(i) * part
			n := min(part, size-off)
			num := aws.Int32(int32(i + 1))
			out, err := s.c.UploadPart(ctx, &s3.UploadPartInput{Bucket: &s.url.Bucket, Key: aws.String(s.key(name)),
				UploadId: id, PartNumber: num, Body: io.NewSectionReader(r, off, n), ContentLength: aws.Int64(n)})
			if err != nil {
				cancel()
				return fmt.Errorf("part %d: %w", i+1, s.fail(name, err))
			}
			parts[i] = types.CompletedPart{ETag: out.ETag, PartNumber: num}
			sent(n)
			return nil
		})
	}
	err := w.Wait()
	if err == nil {
		err = ctx.Err()
	}
	return err
}
