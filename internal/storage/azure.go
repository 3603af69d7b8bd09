package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"
)

// AzureConfig is what the azure provider needs; it is built from a BackupStorageLocation and
// its credential Secret.
type AzureConfig struct {
	// Account is the storage account. Container is the blob container in it.
	Account   string
	Container string
	// Endpoint is the account's blob service URL; empty means
	// https://<account>.blob.core.windows.net (an emulator or a sovereign cloud names its own,
	// such as http://127.0.0.1:10000/devstoreaccount1 for Azurite).
	Endpoint    string
	Credentials AzureCredentials
	// PartSize is the block size of uploads; 0 means the default (8 MiB).
	PartSize int64
	// Versioned says the account keeps blob versions (as version-level immutability needs):
	// Delete removes every version of a blob, not only its current one.
	Versioned bool
}

// AzureCredentials are a storage account's shared key or a SAS token; with neither, the
// Azure SDK's default credential chain (workload identity, managed identity, the environment)
// is used. String never prints the secret parts.
type AzureCredentials struct {
	SharedKey string
	SASToken  string
}

func (c AzureCredentials) String() string { return "AzureCredentials{redacted}" }

// GoString keeps %#v from printing the secrets too.
func (c AzureCredentials) GoString() string { return c.String() }

// Azure is the azure provider: objects as block blobs of one container of an Azure storage
// account. Put streams the blob in blocks (PartSize × 4 bytes of memory at most) and commits
// the block list last, so a failed or cancelled upload never shows a blob: the blocks it staged
// stay uncommitted, invisible, and Azure discards them within a week.
type Azure struct {
	client    *container.Client
	clock     *serverClock
	sharedKey *blob.SharedKeyCredential
	container string
	endpoint  string
	partSize  int64
	// versioned: Delete removes every version (AzureConfig.Versioned).
	versioned bool
}

// azureResponseHeaderTimeout is how long a request waits for the service's answer once sent.
const azureResponseHeaderTimeout = 2 * time.Minute

// NewAzure returns a store for cfg. It makes no request.
func NewAzure(cfg AzureConfig) (*Azure, error) {
	if cfg.Container == "" {
		return nil, errors.New("objectStorage.bucket (the container) is required for an azure location")
	}
	if cfg.Account == "" {
		return nil, errors.New("config.storageAccount is required for an azure location")
	}
	endpoint := strings.TrimRight(cfg.Endpoint, "/")
	if endpoint == "" {
		endpoint = "https://" + cfg.Account + ".blob.core.windows.net"
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || u.RawQuery != "" {
		return nil, fmt.Errorf("config.endpoint %q must be an http:// or https:// URL without a query", cfg.Endpoint)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	// A server that takes a request and never answers must not hold the caller forever.
	transport.ResponseHeaderTimeout = azureResponseHeaderTimeout
	clock := newServerClock(transport)
	opts := &container.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: &http.Client{Transport: clock},
		Retry:     policy.RetryOptions{MaxRetries: 3},
		// Plain http is only ever an emulator's endpoint, named by the location.
		InsecureAllowCredentialWithHTTP: u.Scheme == "http",
	}}
	containerURL := endpoint + "/" + url.PathEscape(cfg.Container)
	s := &Azure{container: cfg.Container, endpoint: endpoint, partSize: cfg.PartSize, clock: clock, versioned: cfg.Versioned}
	if s.partSize == 0 {
		s.partSize = defaultPartSize
	}
	switch c := cfg.Credentials; {
	case c.SharedKey != "":
		s.sharedKey, err = blob.NewSharedKeyCredential(cfg.Account, c.SharedKey)
		if err != nil {
			return nil, errors.New("the storage account key is not valid base64")
		}
		s.client, err = container.NewClientWithSharedKeyCredential(containerURL, s.sharedKey, opts)
	case c.SASToken != "":
		s.client, err = container.NewClientWithNoCredential(containerURL+"?"+strings.TrimPrefix(c.SASToken, "?"), opts)
	default:
		cred, credErr := azidentity.NewDefaultAzureCredential(nil)
		if credErr != nil {
			return nil, fmt.Errorf("no credential Secret, and the Azure default credential chain has none: %w", credErr)
		}
		s.client, err = container.NewClient(containerURL, cred, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("making the Azure client: %w", err)
	}
	return s, nil
}

// Put implements ObjectStore.
func (s *Azure) Put(ctx context.Context, key string, r io.Reader) error {
	if err := checkKey(key); err != nil {
		return err
	}
	_, err := s.client.NewBlockBlobClient(key).UploadStream(ctx, r, &blockblob.UploadStreamOptions{BlockSize: s.partSize, Concurrency: 4})
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("uploading %s to container %s: %w", key, s.container, context.Cause(ctx))
		}
		return fmt.Errorf("uploading %s to container %s: %w", key, s.container, azureError{err})
	}
	return nil
}

// Get implements ObjectStore.
func (s *Azure) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	resp, err := s.client.NewBlobClient(key).DownloadStream(ctx, nil)
	if azureNotFound(err) {
		return nil, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("downloading %s from container %s: %w", key, s.container, azureError{err})
	}
	return resp.Body, nil
}

// List implements ObjectStore.
func (s *Azure) List(ctx context.Context, prefix string) ([]string, error) {
	return listAll(ctx, s, prefix)
}

// ListFunc implements Lister: one page (up to 5,000 blobs) at a time, sorted by name as the
// service lists them.
func (s *Azure) ListFunc(ctx context.Context, prefix string, fn func(key string) error) error {
	opts := &container.ListBlobsFlatOptions{}
	if prefix != "" {
		opts.Prefix = &prefix
	}
	p := s.client.NewListBlobsFlatPager(opts)
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("listing %q in container %s: %w", prefix, s.container, azureError{err})
		}
		for _, item := range page.Segment.BlobItems {
			if item.Name != nil {
				if err := fn(*item.Name); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Delete implements ObjectStore: the blob and its snapshots, and its versions when the account
// keeps them (AzureConfig.Versioned).
func (s *Azure) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	include := blob.DeleteSnapshotsOptionTypeInclude
	_, err := s.client.NewBlobClient(key).Delete(ctx, &blob.DeleteOptions{DeleteSnapshots: &include})
	if err != nil && !azureNotFound(err) {
		if bloberror.HasCode(err, bloberror.BlobImmutableDueToPolicy) {
			return fmt.Errorf("deleting %s from container %s: %s", key, s.container, azureDeleteFailure(err))
		}
		return fmt.Errorf("deleting %s from container %s: %w", key, s.container, azureError{err})
	}
	if s.versioned {
		return s.deleteVersions(ctx, key)
	}
	return nil
}

// Exists implements ObjectStore.
func (s *Azure) Exists(ctx context.Context, key string) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	_, err := s.client.NewBlobClient(key).GetProperties(ctx, nil)
	if azureNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("checking %s in container %s: %w", key, s.container, azureError{err})
	}
	return true, nil
}

// Validate checks that the container exists, that the credentials may list it under prefix,
// and that the server's clock agrees with this one's, with one request that is not retried.
// Its error says what a person should fix and never contains the credentials.
func (s *Azure) Validate(ctx context.Context, prefix string) error {
	one := int32(1)
	opts := &container.ListBlobsFlatOptions{MaxResults: &one}
	if prefix != "" {
		opts.Prefix = &prefix
	}
	_, err := s.client.NewListBlobsFlatPager(opts).NextPage(policy.WithRetryOptions(ctx, policy.RetryOptions{MaxRetries: -1}))
	skew := s.clock.skewProblem("azure", s.endpoint)
	switch {
	case err == nil:
		return skew
	case skew != nil && bloberror.HasCode(err, bloberror.AuthenticationFailed, bloberror.AuthorizationFailure):
		return fmt.Errorf("access denied to container %q at %s (%s), and %w", s.container, s.endpoint, azureReason(err), skew)
	}
	if problem := azureProblem(err, s.container, s.endpoint); problem != nil {
		return problem
	}
	return fmt.Errorf("checking container %q at %s: %s", s.container, s.endpoint, azureReason(err))
}

// azureProblem names what a person should fix when a request to a container failed with err:
// the container missing, the credentials refused, a permission missing, the endpoint
// unreachable; nil for any other error.
func azureProblem(err error, containerName, endpoint string) error {
	switch {
	case bloberror.HasCode(err, bloberror.ContainerNotFound):
		return fmt.Errorf("container %q does not exist at %s", containerName, endpoint)
	case bloberror.HasCode(err, bloberror.AuthenticationFailed, bloberror.AuthorizationFailure):
		return fmt.Errorf("access denied to container %q at %s (%s): the credentials in the location's credential secret were refused: check the storage account key or SAS token (and its expiry)",
			containerName, endpoint, azureReason(err))
	case bloberror.HasCode(err, bloberror.AuthorizationPermissionMismatch, bloberror.InsufficientAccountPermissions,
		bloberror.AuthorizationResourceTypeMismatch, bloberror.AuthorizationServiceMismatch):
		return fmt.Errorf("access denied to container %q at %s (%s): the credentials are accepted but may not list the container: a SAS token needs the list permission (sp=l) on it, an identity a role such as Storage Blob Data Contributor",
			containerName, endpoint, azureReason(err))
	case azureStatus(err) == http.StatusForbidden || azureStatus(err) == http.StatusUnauthorized:
		return fmt.Errorf("access denied to container %q at %s (%s): check the credentials in the location's credential secret and that they may list the container", containerName, endpoint, azureReason(err))
	case isUnreachable(err):
		return fmt.Errorf("cannot reach the azure endpoint %s: %s", endpoint, unreachableReason(err))
	}
	return nil
}

// azureError is an error of the Azure SDK that prints only its azureReason (the SDK's own
// message quotes the request's URL, which may carry a SAS token) and unwraps to it, so that a
// cancellation is still one.
type azureError struct{ err error }

func (e azureError) Error() string { return azureReason(e.err) }
func (e azureError) Unwrap() error { return e.err }

// presignGet implements presigner with a service SAS for reading one blob, signed locally with
// the account's shared key. A store without the shared key (a SAS token, the default
// credential chain) cannot sign one: ErrCannotPresign, and the manager's download server
// serves the object instead. A non-empty endpoint replaces the service URL in the URL (a
// SAS signs the account, container and blob, not the host).
func (s *Azure) presignGet(_ context.Context, key string, expires time.Duration, endpoint string) (string, error) {
	if s.sharedKey == nil {
		return "", fmt.Errorf("%w: an azure location signs download URLs only with a storage account key", ErrCannotPresign)
	}
	q, err := sas.BlobSignatureValues{
		Protocol:      sas.ProtocolHTTPSandHTTP,
		StartTime:     time.Now().Add(-5 * time.Minute).UTC(), // the service's clock may be behind
		ExpiryTime:    time.Now().Add(expires).UTC(),
		Permissions:   (&sas.BlobPermissions{Read: true}).String(),
		ContainerName: s.container,
		BlobName:      key,
	}.SignWithSharedKey(s.sharedKey)
	if err != nil {
		return "", fmt.Errorf("signing a download URL of %s in container %s: %w", key, s.container, err)
	}
	base := s.endpoint
	if endpoint != "" {
		base = strings.TrimRight(endpoint, "/")
	}
	return base + "/" + url.PathEscape(s.container) + "/" + escapeKey(key) + "?" + q.Encode(), nil
}

// escapeKey escapes each segment of a key for a URL path.
func escapeKey(key string) string {
	segs := strings.Split(key, "/")
	for i, seg := range segs {
		segs[i] = url.PathEscape(seg)
	}
	return strings.Join(segs, "/")
}

func azureStatus(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

func azureNotFound(err error) bool {
	return err != nil && (bloberror.HasCode(err, bloberror.BlobNotFound) || azureStatus(err) == http.StatusNotFound && !bloberror.HasCode(err, bloberror.ContainerNotFound))
}

// azureReason is the service's error code (or HTTP status, or the network error) of err,
// without the request URL that the SDK's message quotes, which may carry a SAS token.
func azureReason(err error) string {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		if re.ErrorCode != "" {
			return re.ErrorCode
		}
		return fmt.Sprintf("HTTP %d %s", re.StatusCode, http.StatusText(re.StatusCode))
	}
	if isUnreachable(err) {
		return unreachableReason(err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err.Error()
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// ParseAzureCredentials reads an azure location's credential Secret value: lines of
// NAME=value (as Velero's Azure plugin keeps them), of which AZURE_STORAGE_ACCOUNT_ACCESS_KEY
// (the storage account's shared key) or AZURE_STORAGE_SAS_TOKEN is used; other names (such as
// AZURE_CLOUD_NAME) are ignored. Its errors never quote the value, which is secret.
func ParseAzureCredentials(data []byte) (AzureCredentials, error) {
	var creds AzureCredentials
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			return creds, fmt.Errorf("line %d: expected NAME=value", i+1)
		}
		value = strings.Trim(strings.TrimSpace(value), `"'`)
		switch strings.TrimSpace(name) {
		case "AZURE_STORAGE_ACCOUNT_ACCESS_KEY", "AZURE_STORAGE_KEY":
			creds.SharedKey = value
		case "AZURE_STORAGE_SAS_TOKEN":
			creds.SASToken = value
		}
	}
	switch {
	case creds.SharedKey == "" && creds.SASToken == "":
		return creds, errors.New("it has neither AZURE_STORAGE_ACCOUNT_ACCESS_KEY nor AZURE_STORAGE_SAS_TOKEN")
	case creds.SharedKey != "" && creds.SASToken != "":
		return creds, errors.New("it has both AZURE_STORAGE_ACCOUNT_ACCESS_KEY and AZURE_STORAGE_SAS_TOKEN: keep one")
	}
	return creds, nil
}
