package storage

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// S3Config is what the s3 provider needs; it is built from a BackupStorageLocation and its
// credential Secret.
type S3Config struct {
	Bucket                string
	Region                string
	Endpoint              string
	ForcePathStyle        bool
	InsecureSkipTLSVerify bool
	Credentials           S3Credentials
	// PartSize is the multipart upload part size; 0 means the default (8 MiB).
	PartSize int64
	// Versioned says the bucket keeps versions (as Object Lock makes it): Delete removes every
	// version of a key, not only the current one.
	Versioned bool
}

// S3Credentials are static AWS credentials. String never prints the secret parts.
type S3Credentials struct {
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
}

func (c S3Credentials) String() string { return "S3Credentials{redacted}" }

// GoString keeps %#v from printing the secrets too.
func (c S3Credentials) GoString() string { return c.String() }

const defaultPartSize = 8 << 20

// S3 is the s3 provider: objects in one bucket of any S3-compatible service. Put streams
// through a multipart upload, so an archive of any size needs no temp file and at most
// PartSize × upload concurrency bytes of memory; a failed upload is aborted and leaves no
// object behind.
type S3 struct {
	client   *s3.Client
	uploader *transfermanager.Client
	bucket   string
	endpoint string
	// versioned: Delete removes every version (S3Config.Versioned).
	versioned bool
	// aborts counts the aborts of failed uploads still being sent.
	aborts sync.WaitGroup
}

// s3ResponseHeaderTimeout is how long a request waits for the server's answer once it is sent.
const s3ResponseHeaderTimeout = 2 * time.Minute

// NewS3 returns a store for cfg.
func NewS3(cfg S3Config) (*S3, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("objectStorage.bucket is required for an s3 location")
	}
	region := cfg.Region
	if region == "" {
		region = "us-east-1"
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	// A server that takes a request and never answers must not hold the caller forever.
	transport.ResponseHeaderTimeout = s3ResponseHeaderTimeout
	if cfg.InsecureSkipTLSVerify {
		transport.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the user asked for it with config.insecureSkipTLSVerify
	}
	opts := s3.Options{
		Region:                     region,
		UsePathStyle:               cfg.ForcePathStyle,
		HTTPClient:                 &http.Client{Transport: transport},
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
		RetryMaxAttempts:           3,
	}
	if cfg.Endpoint != "" {
		opts.BaseEndpoint = aws.String(cfg.Endpoint)
	}
	if cfg.Credentials.AccessKeyID != "" {
		opts.Credentials = credentials.NewStaticCredentialsProvider(
			cfg.Credentials.AccessKeyID, cfg.Credentials.SecretAccessKey, cfg.Credentials.SessionToken)
	} else {
		opts.Credentials = aws.AnonymousCredentials{}
	}
	client := s3.New(opts)
	partSize := cfg.PartSize
	if partSize == 0 {
		partSize = defaultPartSize
	}
	uploader := transfermanager.New(client, func(o *transfermanager.Options) {
		o.PartSizeBytes = partSize
		o.MultipartUploadThreshold = partSize
		o.Concurrency = 4
	})
	endpoint := cfg.Endpoint
	if endpoint == "" {
		endpoint = "the AWS S3 endpoint of region " + region
	}
	return &S3{client: client, uploader: uploader, bucket: cfg.Bucket, endpoint: endpoint, versioned: cfg.Versioned}, nil
}

// Put implements ObjectStore.
func (s *S3) Put(ctx context.Context, key string, r io.Reader) error {
	if err := checkKey(key); err != nil {
		return err
	}
	_, err := s.uploader.UploadObject(ctx, &transfermanager.UploadObjectInput{Bucket: &s.bucket, Key: &key, Body: r})
	if err != nil {
		var failed interface{ UploadID() string }
		if errors.As(err, &failed) && failed.UploadID() != "" {
			s.abortLater(key, failed.UploadID())
		}
		if ctx.Err() != nil {
			// The transfer manager's error only quotes the cancellation; say it as one.
			return fmt.Errorf("uploading %s to bucket %s: %w", key, s.bucket, context.Cause(ctx))
		}
		return fmt.Errorf("uploading %s to bucket %s: %w", key, s.bucket, err)
	}
	return nil
}

// s3AbortTimeout bounds the abort of a failed multipart upload, sent after the upload's own
// context may have ended.
const s3AbortTimeout = time.Minute

// abortLater aborts one multipart upload in the background, with a fresh context: the
// transfer manager aborts a failed upload with the upload's own context, which does nothing
// when that context was cancelled (a cancelled backup, a stalled upload). An upload already
// aborted answers NoSuchUpload, which is what was wanted; should the server be down, the
// cleanup of the backup (AbortIncompleteUploads) removes the upload later.
func (s *S3) abortLater(key, uploadID string) {
	s.aborts.Add(1)
	go func() {
		defer s.aborts.Done()
		ctx, cancel := context.WithTimeout(context.Background(), s3AbortTimeout)
		defer cancel()
		_, _ = s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: &key, UploadId: &uploadID})
	}()
}

// WaitForAborts waits until the background aborts of failed uploads have been sent (for tests).
func (s *S3) WaitForAborts() { s.aborts.Wait() }

// Get implements ObjectStore.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	if isNotFound(err) {
		return nil, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("downloading %s from bucket %s: %w", key, s.bucket, err)
	}
	return out.Body, nil
}

// List implements ObjectStore.
func (s *S3) List(ctx context.Context, prefix string) ([]string, error) {
	return listAll(ctx, s, prefix)
}

// ListFunc implements Lister: one ListObjectsV2 page (up to 1,000 keys) at a time, in the
// order the service lists them (sorted, for S3).
func (s *S3) ListFunc(ctx context.Context, prefix string, fn func(key string) error) error {
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &prefix})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("listing %q in bucket %s: %w", prefix, s.bucket, err)
		}
		for _, obj := range page.Contents {
			if err := fn(aws.ToString(obj.Key)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Delete implements ObjectStore.
func (s *S3) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if s.versioned {
		return s.deleteVersions(ctx, key)
	}
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("deleting %s from bucket %s: %w", key, s.bucket, err)
	}
	return nil
}

// Exists implements ObjectStore.
func (s *S3) Exists(ctx context.Context, key string) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	_, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &key})
	if isNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("checking %s in bucket %s: %w", key, s.bucket, err)
	}
	return true, nil
}

// Validate checks that the bucket exists and that the credentials may list it under prefix.
// Its error says what a person should fix (bucket missing, access denied, endpoint
// unreachable) and never contains the credentials. It lists rather than HEADs the bucket: a
// HEAD error has no body, so "no such bucket" and "no such user" look alike.
func (s *S3) Validate(ctx context.Context, prefix string) error {
	once := func(o *s3.Options) { o.RetryMaxAttempts = 1 }
	_, err := s.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &prefix, MaxKeys: aws.Int32(1)}, once)
	switch {
	case err == nil:
		return nil
	case errorCode(err) == "NoSuchBucket":
		return fmt.Errorf("bucket %q does not exist at %s", s.bucket, s.endpoint)
	case isAccessDenied(err):
		return fmt.Errorf("access denied to bucket %q at %s (%s): check the credentials in the location's credential secret", s.bucket, s.endpoint, errorCode(err))
	case isUnreachable(err):
		return fmt.Errorf("cannot reach the s3 endpoint %s: %s", s.endpoint, unreachableReason(err))
	}
	return fmt.Errorf("checking bucket %q at %s: %s", s.bucket, s.endpoint, errorCode(err))
}

func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	if status := httpStatus(err); status != 0 {
		return fmt.Sprintf("HTTP %d %s", status, http.StatusText(status))
	}
	return err.Error()
}

func isNotFound(err error) bool {
	if err == nil {
		return false
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NoSuchKey", "NoSuchBucket", "NotFound":
			return true
		}
	}
	return httpStatus(err) == http.StatusNotFound
}

func isAccessDenied(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken", "Forbidden",
			"XAdminUserNotFound": // versitygw's answer to an unknown access key
			return true
		}
	}
	status := httpStatus(err)
	return status == http.StatusForbidden || status == http.StatusUnauthorized
}

func isUnreachable(err error) bool {
	var opErr *net.OpError
	var dnsErr *net.DNSError
	return errors.As(err, &opErr) || errors.As(err, &dnsErr)
}

// unreachableReason is the network error without the addresses that the message already names,
// such as "connect: connection refused".
func unreachableReason(err error) string {
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Err != nil {
		return opErr.Err.Error()
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return "no such host " + dnsErr.Name
	}
	return err.Error()
}

// ParseSharedCredentials reads an AWS shared-credentials file (as kept in a Velero credential
// Secret) and returns the keys of profile ("default" when empty). Its errors never quote the
// file, which holds secrets.
func ParseSharedCredentials(data []byte, profile string) (S3Credentials, error) {
	if profile == "" {
		profile = "default"
	}
	var creds S3Credentials
	section := ""
	found := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") || strings.HasPrefix(text, ";") {
			continue
		}
		if strings.HasPrefix(text, "[") {
			if !strings.HasSuffix(text, "]") {
				return creds, fmt.Errorf("line %d: a section header must end with ]", line)
			}
			section = strings.TrimSpace(strings.TrimPrefix(strings.TrimSuffix(strings.TrimPrefix(text, "["), "]"), "profile "))
			if section == profile {
				found = true
			}
			continue
		}
		key, value, ok := strings.Cut(text, "=")
		if !ok {
			return creds, fmt.Errorf("line %d: expected key = value", line)
		}
		if section != profile {
			continue
		}
		switch strings.ToLower(strings.TrimSpace(key)) {
		case "aws_access_key_id":
			creds.AccessKeyID = strings.TrimSpace(value)
		case "aws_secret_access_key":
			creds.SecretAccessKey = strings.TrimSpace(value)
		case "aws_session_token":
			creds.SessionToken = strings.TrimSpace(value)
		}
	}
	if err := sc.Err(); err != nil {
		return creds, fmt.Errorf("reading the credentials file: %w", err)
	}
	switch {
	case !found:
		return creds, fmt.Errorf("the credentials file has no [%s] profile", profile)
	case creds.AccessKeyID == "":
		return creds, fmt.Errorf("profile [%s] has no aws_access_key_id", profile)
	case creds.SecretAccessKey == "":
		return creds, fmt.Errorf("profile [%s] has no aws_secret_access_key", profile)
	}
	return creds, nil
}
