package testenv

import (
	"context"
	"path/filepath"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// StartVersionedS3Server starts a server that keeps object versions, as S3 Object Lock needs
// (versitygw's posix backend with --versioning-dir), for the test, and stops it when the test
// ends.
func StartVersionedS3Server(t TB) *S3Server {
	t.Helper()
	s := &S3Server{t: t}
	root := t.TempDir()
	s.versionDir = filepath.Join(root, "versions")
	return startS3Server(t, s, root)
}

// Client is an S3 client of the server with its root credentials, for a test to look at or
// tamper with the buckets as someone holding the credentials would.
func (s *S3Server) Client() *s3.Client {
	return s3.New(s3.Options{
		Region: "us-east-1", UsePathStyle: true, BaseEndpoint: aws.String(s.Endpoint()),
		Credentials:                credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

// CreateLockedBucket makes an empty bucket with Object Lock enabled (and so versioning), through
// the S3 API: the server must keep versions (StartVersionedS3Server).
func (s *S3Server) CreateLockedBucket(name string) {
	s.t.Helper()
	if _, err := s.Client().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(name), ObjectLockEnabledForBucket: aws.Bool(true)}); err != nil {
		s.t.Fatalf("creating bucket %s with Object Lock: %v", name, err)
	}
}
