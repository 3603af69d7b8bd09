package storage

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	gcs "cloud.google.com/go/storage"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
)

// GCSConfig is what the gcs provider needs; it is built from a BackupStorageLocation and its
// credential Secret.
type GCSConfig struct {
	Bucket string
	// Endpoint is the service's URL (scheme, host and port; an emulator's, such as
	// fake-gcs-server's); empty means Google's.
	Endpoint string
	// Credentials is a service account's JSON key; empty means Google's default credentials
	// (GKE workload identity, the environment, the metadata server).
	Credentials GCSCredentials
	// PartSize is the chunk size of resumable uploads; 0 means the default (8 MiB).
	PartSize int64
}

// GCSCredentials is a service account's JSON key. String never prints it.
type GCSCredentials struct{ JSON []byte }

func (c GCSCredentials) String() string { return "GCSCredentials{redacted}" }

// GoString keeps %#v from printing the key too.
func (c GCSCredentials) GoString() string { return c.String() }

// serviceAccountKey is the part of a service account's JSON key that signs URLs.
type serviceAccountKey struct {
	Type        string `json:"type"`
	ClientEmail string `json:"client_email"`
	PrivateKey  string `json:"private_key"`
}

// GCS is the gcs provider: objects in one Google Cloud Storage bucket. Put streams through a
// resumable upload, one chunk (PartSize bytes) in memory at a time; the object appears only
// when the last chunk is sent, so a failed or cancelled upload leaves no object behind.
type GCS struct {
	client   *gcs.Client
	clock    *serverClock
	bucket   *gcs.BucketHandle
	name     string
	endpoint string
	partSize int
	// signer is the service account that signs download URLs; nil without a JSON key.
	signer *serviceAccountKey
}

// gcsResponseHeaderTimeout is how long a request waits for the service's answer once sent.
const gcsResponseHeaderTimeout = 2 * time.Minute

// gcsTokenTimeout bounds each request for an access token.
const gcsTokenTimeout = time.Minute

// NewGCS returns a store for cfg. It makes no request to the bucket (a JSON key's token is
// fetched with the first one).
func NewGCS(cfg GCSConfig) (*GCS, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("objectStorage.bucket is required for a gcs location")
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	// A server that takes a request and never answers must not hold the caller forever.
	transport.ResponseHeaderTimeout = gcsResponseHeaderTimeout
	s := &GCS{name: cfg.Bucket, endpoint: "https://storage.googleapis.com", partSize: int(cfg.PartSize)}
	if s.partSize == 0 {
		s.partSize = defaultPartSize
	}
	// The client authenticates through its HTTP client, so it must not look for credentials
	// itself (WithoutAuthentication): it would ask the metadata server.
	opts := []option.ClientOption{option.WithoutAuthentication()}
	if cfg.Endpoint != "" {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || strings.Trim(u.Path, "/") != "" || u.RawQuery != "" {
			return nil, fmt.Errorf("config.endpoint %q must be an http:// or https:// URL of only a scheme, host and port", cfg.Endpoint)
		}
		s.endpoint = u.Scheme + "://" + u.Host
		opts = append(opts, option.WithEndpoint(s.endpoint+"/storage/v1/"))
	}
	source, err := gcsTokenSource(cfg.Credentials, transport)
	if err != nil {
		return nil, err
	}
	if len(cfg.Credentials.JSON) > 0 {
		var key serviceAccountKey
		_ = json.Unmarshal(cfg.Credentials.JSON, &key) // parsed already by gcsTokenSource
		s.signer = &key
	}
	s.clock = newServerClock(transport)
	hc := &http.Client{Transport: &oauth2.Transport{Source: source, Base: s.clock}}
	s.client, err = gcs.NewClient(context.Background(), append(opts, option.WithHTTPClient(hc))...)
	if err != nil {
		return nil, fmt.Errorf("making the GCS client: %w", err)
	}
	s.bucket = s.client.Bucket(cfg.Bucket)
	return s, nil
}

// gcsTokenSource is the source of the access tokens of creds: its service account's, else
// Google's default credentials'. Tokens are fetched through transport, each request bounded.
func gcsTokenSource(creds GCSCredentials, transport http.RoundTripper) (oauth2.TokenSource, error) {
	// The token source keeps this context for every later fetch: it carries only the client.
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, &http.Client{Transport: transport, Timeout: gcsTokenTimeout})
	if len(creds.JSON) == 0 {
		found, err := google.FindDefaultCredentials(ctx, gcs.ScopeFullControl)
		if err != nil {
			return nil, fmt.Errorf("no credential Secret, and Google's default credentials are not there: %w", err)
		}
		return found.TokenSource, nil
	}
	var key serviceAccountKey
	if err := json.Unmarshal(creds.JSON, &key); err != nil {
		return nil, errors.New("the credential is not a JSON service account key")
	}
	if key.Type != "service_account" || key.ClientEmail == "" || key.PrivateKey == "" {
		return nil, errors.New(`the credential is not a service account key (a JSON object with "type": "service_account", client_email and private_key)`)
	}
	found, err := google.CredentialsFromJSONWithType(ctx, creds.JSON, google.ServiceAccount, gcs.ScopeFullControl)
	if err != nil || !privateKeyParses(key.PrivateKey) {
		return nil, errors.New("the service account key cannot be used: its private key does not parse")
	}
	return found.TokenSource, nil
}

// Put implements ObjectStore.
func (s *GCS) Put(ctx context.Context, key string, r io.Reader) error {
	if err := checkKey(key); err != nil {
		return err
	}
	// Cancelling the writer's context is how an upload is abandoned: nothing is committed.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := s.bucket.Object(key).NewWriter(wctx)
	w.ChunkSize = s.partSize
	w.ContentType = "application/octet-stream"
	if _, err := io.Copy(w, r); err != nil {
		cancel()
		_ = w.Close()
		return fmt.Errorf("uploading %s to bucket %s: %w", key, s.name, s.cause(ctx, err))
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("uploading %s to bucket %s: %w", key, s.name, s.cause(ctx, err))
	}
	return nil
}

// cause is err, or the cause of ctx's end when ctx ended (the SDK's error only quotes it).
func (s *GCS) cause(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// Get implements ObjectStore. The object is read as stored (never decompressed on the way).
func (s *GCS) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	rc, err := s.bucket.Object(key).ReadCompressed(true).NewReader(ctx)
	if errors.Is(err, gcs.ErrObjectNotExist) {
		return nil, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("downloading %s from bucket %s: %w", key, s.name, err)
	}
	return rc, nil
}

// List implements ObjectStore.
func (s *GCS) List(ctx context.Context, prefix string) ([]string, error) {
	return listAll(ctx, s, prefix)
}

// ListFunc implements Lister: one page (up to 1,000 objects) at a time, sorted by name as the
// service lists them.
func (s *GCS) ListFunc(ctx context.Context, prefix string, fn func(key string) error) error {
	q := &gcs.Query{Prefix: prefix}
	if err := q.SetAttrSelection([]string{"Name"}); err != nil {
		return err
	}
	it := s.bucket.Objects(ctx, q)
	for {
		attrs, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("listing %q in bucket %s: %w", prefix, s.name, err)
		}
		if err := fn(attrs.Name); err != nil {
			return err
		}
	}
}

// Delete implements ObjectStore.
func (s *GCS) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	err := s.bucket.Object(key).Delete(ctx)
	if gcsDeleteRefused(err) {
		return fmt.Errorf("deleting %s from bucket %s: it is still retained (object retention, the bucket's retention policy or a hold): %w", key, s.name, err)
	}
	if err != nil && !errors.Is(err, gcs.ErrObjectNotExist) {
		return fmt.Errorf("deleting %s from bucket %s: %w", key, s.name, err)
	}
	return nil
}

// Exists implements ObjectStore.
func (s *GCS) Exists(ctx context.Context, key string) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	_, err := s.bucket.Object(key).Attrs(ctx)
	if errors.Is(err, gcs.ErrObjectNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("checking %s in bucket %s: %w", key, s.name, err)
	}
	return true, nil
}

// Validate checks that the bucket exists, that the credentials may list it under prefix, and
// that the server's clock agrees with this one's, with one request that is not retried. Its
// error says what a person should fix (bucket missing, key refused, permission missing,
// endpoint unreachable, clocks apart) and never quotes the key.
func (s *GCS) Validate(ctx context.Context, prefix string) error {
	it := s.bucket.Retryer(gcs.WithPolicy(gcs.RetryNever)).Objects(ctx, &gcs.Query{Prefix: prefix})
	it.PageInfo().MaxSize = 1
	_, err := it.Next()
	skew := s.clock.skewProblem("gcs", s.endpoint)
	var apiErr *googleapi.Error
	switch {
	case err == nil || errors.Is(err, iterator.Done):
		return skew
	case skew != nil && errors.As(err, &apiErr) && apiErr.Code == http.StatusUnauthorized:
		return fmt.Errorf("the credentials were refused by %s (HTTP 401), and %w", s.endpoint, skew)
	}
	if problem := s.problem(err); problem != nil {
		return problem
	}
	if errors.As(err, &apiErr) {
		return fmt.Errorf("checking bucket %q at %s: HTTP %d %s", s.name, s.endpoint, apiErr.Code, apiErr.Message)
	}
	return fmt.Errorf("checking bucket %q at %s: %w", s.name, s.endpoint, err)
}

// problem names what a person should fix when a request to the bucket failed with err: the
// bucket missing, the key refused, a permission missing, the endpoint unreachable; nil for
// any other error.
func (s *GCS) problem(err error) error {
	var apiErr *googleapi.Error
	var tokenErr *oauth2.RetrieveError
	switch {
	case errors.Is(err, gcs.ErrBucketNotExist):
		return fmt.Errorf("bucket %q does not exist at %s", s.name, s.endpoint)
	case errors.As(err, &tokenErr):
		return fmt.Errorf("the service account key in the location's credential secret was refused (%s): is it deleted or disabled?", tokenReason(tokenErr))
	case errors.As(err, &apiErr) && apiErr.Code == http.StatusUnauthorized:
		return fmt.Errorf("the credentials were refused by %s (HTTP 401 %s): check the service account key in the location's credential secret, or the workload identity", s.endpoint, http.StatusText(apiErr.Code))
	case errors.As(err, &apiErr) && apiErr.Code == http.StatusForbidden:
		return fmt.Errorf("access denied to bucket %q at %s (HTTP 403 %s): the credentials are accepted but lack a permission: they need storage.objects.list, get, create and delete on it (and storage.buckets.get and storage.objects.update with spec.objectLock)",
			s.name, s.endpoint, http.StatusText(apiErr.Code))
	case isUnreachable(err):
		return fmt.Errorf("cannot reach the gcs endpoint %s: %s", s.endpoint, unreachableReason(err))
	}
	return nil
}

// privateKeyParses reports whether key is a PEM RSA private key (PKCS #8 or #1), as a service
// account key's is: the token source parses it only when it first signs.
func privateKeyParses(key string) bool {
	block, _ := pem.Decode([]byte(key))
	if block == nil {
		return false
	}
	if _, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		return true
	}
	_, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	return err == nil
}

// tokenReason is the error code the token endpoint answered (invalid_grant for a deleted or
// disabled key), never the rest of its body.
func tokenReason(err *oauth2.RetrieveError) string {
	if err.ErrorCode != "" {
		return err.ErrorCode
	}
	var body struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(err.Body, &body) == nil && body.Error != "" && len(body.Error) < 64 {
		return body.Error
	}
	if err.Response != nil {
		return err.Response.Status
	}
	return "no token"
}

// presignGet implements presigner with a V4 signed URL, signed locally with the service
// account's private key. Without a JSON key (Google's default credentials) there is none to
// sign with: ErrCannotPresign, and the manager's download server serves the object instead.
// A non-empty endpoint replaces the service's address in the URL; the signature covers it.
func (s *GCS) presignGet(_ context.Context, key string, expires time.Duration, endpoint string) (string, error) {
	if s.signer == nil {
		return "", fmt.Errorf("%w: a gcs location signs download URLs only with a service account key", ErrCannotPresign)
	}
	base := s.endpoint
	if endpoint != "" {
		base = endpoint
	}
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("config.publicURL %q is not a URL", endpoint)
	}
	signed, err := s.bucket.SignedURL(key, &gcs.SignedURLOptions{
		GoogleAccessID: s.signer.ClientEmail,
		PrivateKey:     []byte(s.signer.PrivateKey),
		Method:         http.MethodGet,
		// The SDK signs the whole seconds left until Expires: half a second more keeps them.
		Expires:  time.Now().Add(expires + time.Second/2),
		Scheme:   gcs.SigningSchemeV4,
		Style:    gcs.PathStyle(),
		Hostname: u.Host,
		Insecure: u.Scheme == "http",
	})
	if err != nil {
		return "", fmt.Errorf("signing a download URL of %s in bucket %s: %w", key, s.name, err)
	}
	return signed, nil
}
