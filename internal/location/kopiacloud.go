package location

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/kopia/kopia/repo/blob"
	"github.com/kopia/kopia/repo/blob/azure"
	"github.com/kopia/kopia/repo/blob/gcs"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/storage"
)

// kopiaCloud opens kopia's own Azure or GCS storage for the repository at dir of an azure or
// gcs location, with the location's credentials. Kopia's constructors list the container or
// bucket once, so a missing one or refused credentials fail here.
func kopiaCloud(ctx context.Context, r client.Reader, bsl *cairnv1.BackupStorageLocation, dir string, readOnly bool) (blob.Storage, error) {
	if bsl.Spec.Provider == cairnv1.StorageProviderAzure {
		cfg, err := azureConfig(ctx, r, bsl)
		if err != nil {
			return nil, err
		}
		opts, err := kopiaAzureOptions(cfg, bsl.Spec.Credential != nil, dir)
		if err != nil {
			return nil, err
		}
		st, err := azure.New(ctx, opts, false)
		if err != nil {
			return nil, fmt.Errorf("storage location %s: opening container %s: %w", bsl.Name, cfg.Container, err)
		}
		return st, nil
	}
	cfg, err := gcsConfig(ctx, r, bsl)
	if err != nil {
		return nil, err
	}
	if cfg.Endpoint != "" {
		// Kopia's GCS storage has no endpoint option (only STORAGE_EMULATOR_HOST, which the
		// location's own store honours too).
		return nil, fmt.Errorf("%w: volume data on a gcs location with config.endpoint is not supported: kopia's GCS storage reaches only Google's endpoint (or $STORAGE_EMULATOR_HOST)", ErrConfig)
	}
	opts := &gcs.Options{BucketName: cfg.Bucket, Prefix: dir + "/", ServiceAccountCredentialJSON: cfg.Credentials.JSON, ReadOnly: readOnly}
	st, err := gcs.New(ctx, opts, false)
	if err != nil {
		return nil, fmt.Errorf("storage location %s: opening bucket %s: %w", bsl.Name, cfg.Bucket, err)
	}
	return st, nil
}

// kopiaAzureOptions maps an azure location's configuration to kopia's Azure storage options,
// with the repository at prefix dir.
//
// Kopia addresses the account by host name, <account>.<storage domain>, so config.endpoint
// must be of that form (as every Azure cloud's is: https://<account>.blob.core.windows.net,
// .chinacloudapi.cn, .usgovcloudapi.net); an emulator's path-style endpoint
// (http://host:port/<account>) cannot carry volume data.
//
// Credentials: the Secret's shared key or SAS token. Without a Secret, kopia has no default
// chain, only workload identity, read here from what AKS's webhook puts in the manager's
// environment (AZURE_TENANT_ID, AZURE_CLIENT_ID, AZURE_FEDERATED_TOKEN_FILE).
func kopiaAzureOptions(cfg storage.AzureConfig, hasCredential bool, dir string) (*azure.Options, error) {
	opts := &azure.Options{Container: cfg.Container, StorageAccount: cfg.Account, Prefix: dir + "/"}
	if cfg.Endpoint != "" {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%w: config.endpoint %q must be an http:// or https:// URL", ErrConfig, cfg.Endpoint)
		}
		domain, ok := strings.CutPrefix(u.Host, cfg.Account+".")
		if !ok || domain == "" || strings.Trim(u.Path, "/") != "" || u.RawQuery != "" {
			return nil, fmt.Errorf("%w: volume data on an azure location needs config.endpoint of the form https://%s.<storage domain> (kopia's Azure storage names the account in the host), not %q", ErrConfig, cfg.Account, cfg.Endpoint)
		}
		opts.StorageDomain, opts.DoNotUseTLS = domain, u.Scheme == "http"
	}
	switch c := cfg.Credentials; {
	case hasCredential && c.SharedKey != "":
		opts.StorageKey = c.SharedKey
	case hasCredential && c.SASToken != "":
		opts.SASToken = strings.TrimPrefix(c.SASToken, "?")
	case hasCredential:
		return nil, fmt.Errorf("%w: the credential Secret has neither a shared key nor a SAS token", ErrConfig)
	default:
		opts.TenantID, opts.ClientID = os.Getenv("AZURE_TENANT_ID"), os.Getenv("AZURE_CLIENT_ID")
		opts.AzureFederatedTokenFile = os.Getenv("AZURE_FEDERATED_TOKEN_FILE")
		if opts.TenantID == "" || opts.ClientID == "" || opts.AzureFederatedTokenFile == "" {
			return nil, fmt.Errorf("%w: volume data on an azure location without a credential Secret needs workload identity: AZURE_TENANT_ID, AZURE_CLIENT_ID and AZURE_FEDERATED_TOKEN_FILE in the manager's environment", ErrConfig)
		}
	}
	return opts, nil
}
