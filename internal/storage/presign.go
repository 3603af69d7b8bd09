package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// ErrCannotPresign is returned (wrapped) by PresignGet for a store whose provider hands out no
// presigned URLs (the filesystem provider: the manager's download server serves its files).
var ErrCannotPresign = errors.New("the store cannot presign URLs")

// presigner is a store that can give out a URL reading one object without credentials.
type presigner interface {
	presignGet(ctx context.Context, key string, expires time.Duration, endpoint string) (string, error)
}

// unwrapper is a store that wraps another (ReadOnly).
type unwrapper interface{ Unwrap() ObjectStore }

// PresignGet returns a URL that reads the object at key with a plain GET for expires, signed
// with the store's credentials. A non-empty endpoint (a location's config.publicURL) replaces
// the store's endpoint in the URL, for clients that reach the service by another address; the
// signature covers that address. Stores that cannot presign fail with ErrCannotPresign.
func PresignGet(ctx context.Context, s ObjectStore, key string, expires time.Duration, endpoint string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	for {
		if p, ok := s.(presigner); ok {
			return p.presignGet(ctx, key, expires, endpoint)
		}
		w, ok := s.(unwrapper)
		if !ok {
			return "", ErrCannotPresign
		}
		s = w.Unwrap()
	}
}

// presignGet implements presigner with the SDK's presign client: a SigV4 query-string
// signature over the bucket, the key and the expiry, made locally without a request.
func (s *S3) presignGet(ctx context.Context, key string, expires time.Duration, endpoint string) (string, error) {
	opts := []func(*s3.PresignOptions){s3.WithPresignExpires(expires)}
	if endpoint != "" {
		opts = append(opts, func(o *s3.PresignOptions) {
			o.ClientOptions = append(o.ClientOptions, func(c *s3.Options) { c.BaseEndpoint = aws.String(endpoint) })
		})
	}
	req, err := s3.NewPresignClient(s.client).PresignGetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key}, opts...)
	if err != nil {
		return "", fmt.Errorf("presigning %s in bucket %s: %w", key, s.bucket, err)
	}
	return req.URL, nil
}

// Unwrap returns the store a ReadOnly store wraps, for PresignGet: a presigned GET reads and
// never writes.
func (r readOnlyStore) Unwrap() ObjectStore { return r.ObjectStore }
