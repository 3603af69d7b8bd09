package location

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/lru"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/storage"
)

// validator is a provider's store that can check itself under a prefix and lock objects.
type validator interface {
	storage.ObjectStore
	lockingStore
}

// openCloud opens the store of an azure or gcs location, with its client kept from one call to
// the next (as s3's are: see s3ClientCache).
func openCloud(ctx context.Context, r client.Reader, bsl *cairnv1.BackupStorageLocation) (validator, error) {
	var s validator
	var err error
	switch bsl.Spec.Provider {
	case cairnv1.StorageProviderAzure:
		cfg, cfgErr := azureConfig(ctx, r, bsl)
		if cfgErr != nil {
			return nil, cfgErr
		}
		s, err = azureClients.get(cfg, func() (validator, error) { return storage.NewAzure(cfg) })
	default:
		cfg, cfgErr := gcsConfig(ctx, r, bsl)
		if cfgErr != nil {
			return nil, cfgErr
		}
		key := gcsClientKey{bucket: cfg.Bucket, endpoint: cfg.Endpoint, key: string(cfg.Credentials.JSON)}
		s, err = gcsClients.get(key, func() (validator, error) { return storage.NewGCS(cfg) })
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return s, nil
}

// azureConfig is an azure location's configuration and the credentials of its Secret.
func azureConfig(ctx context.Context, r client.Reader, bsl *cairnv1.BackupStorageLocation) (storage.AzureConfig, error) {
	cfg := storage.AzureConfig{
		Account:  bsl.Spec.Config[cairnv1.ConfigKeyStorageAccount],
		Endpoint: bsl.Spec.Config[cairnv1.ConfigKeyEndpoint],
		// Version-level immutability keeps blob versions: a deletion removes them all.
		Versioned: bsl.Spec.ObjectLock != nil,
	}
	if bsl.Spec.ObjectStorage != nil {
		cfg.Container = bsl.Spec.ObjectStorage.Bucket
	}
	if cfg.Container == "" {
		return cfg, fmt.Errorf("%w: an azure location needs objectStorage.bucket (its blob container)", ErrConfig)
	}
	if cfg.Account == "" {
		return cfg, fmt.Errorf("%w: an azure location needs config.%s", ErrConfig, cairnv1.ConfigKeyStorageAccount)
	}
	if ref := bsl.Spec.Credential; ref != nil {
		data, err := readSecretValue(ctx, r, bsl.Namespace, ref)
		if err != nil {
			return cfg, err
		}
		if cfg.Credentials, err = storage.ParseAzureCredentials(data); err != nil {
			return cfg, fmt.Errorf("%w: credential secret %s/%s key %q: %w", ErrConfig, bsl.Namespace, ref.Name, ref.Key, err)
		}
	}
	return cfg, nil
}

// gcsConfig is a gcs location's configuration and the service account key of its Secret.
func gcsConfig(ctx context.Context, r client.Reader, bsl *cairnv1.BackupStorageLocation) (storage.GCSConfig, error) {
	cfg := storage.GCSConfig{Endpoint: bsl.Spec.Config[cairnv1.ConfigKeyEndpoint]}
	if bsl.Spec.ObjectStorage != nil {
		cfg.Bucket = bsl.Spec.ObjectStorage.Bucket
	}
	if cfg.Bucket == "" {
		return cfg, fmt.Errorf("%w: a gcs location needs objectStorage.bucket", ErrConfig)
	}
	if ref := bsl.Spec.Credential; ref != nil {
		data, err := readSecretValue(ctx, r, bsl.Namespace, ref)
		if err != nil {
			return cfg, err
		}
		cfg.Credentials = storage.GCSCredentials{JSON: data}
	}
	return cfg, nil
}

// readSecretValue is the value of the key of a location's credential Secret.
func readSecretValue(ctx context.Context, r client.Reader, namespace string, ref *corev1.SecretKeySelector) ([]byte, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: cannot read the credential secret %s/%s", ErrConfig, namespace, ref.Name)
	}
	var secret corev1.Secret
	err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, &secret)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: credential secret %s/%s does not exist", ErrConfig, namespace, ref.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading credential secret %s/%s: %w", namespace, ref.Name, err)
	}
	data, ok := secret.Data[ref.Key]
	if !ok {
		return nil, fmt.Errorf("%w: credential secret %s/%s has no key %q", ErrConfig, namespace, ref.Name, ref.Key)
	}
	return data, nil
}

// cloudClientCacheSize bounds the clients kept per provider, as s3ClientCacheSize does.
const cloudClientCacheSize = 64

// gcsClientKey is everything a GCS client is made from (the key as a string: a slice is not
// comparable).
type gcsClientKey struct{ bucket, endpoint, key string }

// cloudClients keeps one store per configuration, the least recently used dropped beyond
// cloudClientCacheSize: a location keeps its client, connections and access token from one
// storage call to the next, and an edited location or a rotated Secret gets a new one.
type cloudClients[K comparable] struct {
	mu      sync.Mutex
	clients *lru.Cache
}

var (
	azureClients = &cloudClients[storage.AzureConfig]{clients: lru.New(cloudClientCacheSize)}
	gcsClients   = &cloudClients[gcsClientKey]{clients: lru.New(cloudClientCacheSize)}
)

// get returns the store for key, made by newStore on first use.
func (c *cloudClients[K]) get(key K, newStore func() (validator, error)) (validator, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.clients.Get(key); ok {
		return s.(validator), nil
	}
	s, err := newStore()
	if err != nil {
		return nil, err
	}
	c.clients.Add(key, s)
	return s, nil
}
