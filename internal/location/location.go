// Package location turns BackupStorageLocation objects into object stores and makes the
// decisions about them: which one is the default, which one a backup names, and whether one
// can be used.
package location

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/velerofmt"
)

// ErrConfig marks an error in a location's own configuration (not a passing fault): a person
// has to change the location or its Secret.
var ErrConfig = errors.New("invalid storage location")

// ErrMissing marks (errors.Is) a location that does not exist, or no default one when none is
// named.
var ErrMissing = errors.New("no such storage location")

// missingError is an ErrMissing with its own message.
type missingError string

func (e missingError) Error() string        { return string(e) }
func (e missingError) Is(target error) bool { return target == ErrMissing }

// Store is a location's object store, with the location's layout.
type Store struct {
	storage.ObjectStore
	Layout storage.Layout
	// Lock locks the objects of committed backups (spec.objectLock); nil when the location
	// does not lock them.
	Lock *storage.ObjectLock
	// Velero says the location holds Velero's backups (spec.format: velero): read only, and
	// its archives have no recorded digest (storage.ArchiveDigest.Unverified).
	Velero bool
	// validate checks that the provider can be used; see Validate.
	validate func(ctx context.Context) error
}

// Validate checks that the location can be used now (bucket or directory there, credentials
// accepted, writable when ReadWrite). Its error says what a person should fix.
func (s *Store) Validate(ctx context.Context) error { return s.validate(ctx) }

// Open builds the object store of a location, reading its credential Secret (in the location's
// namespace) through r. A ReadOnly location's store refuses every write. The Secret is read
// on every call, so rotated credentials are used without a restart.
func Open(ctx context.Context, r client.Reader, bsl *cairnv1.BackupStorageLocation) (*Store, error) {
	// A location whose objects nest with an older one's is refused for every use, not only
	// marked Unavailable: deleting a backup through it could remove the other's objects.
	// (Without a reader — a lone location, whose Secret cannot be read either — there is
	// nothing to compare with.)
	if err := refuseNested(ctx, r, bsl); err != nil {
		return nil, err
	}
	// A Velero location is read only whatever its access mode says (the CRD refuses any other).
	velero := bsl.Spec.Format == cairnv1.LocationFormatVelero
	writable := bsl.Spec.AccessMode != cairnv1.AccessModeReadOnly && !velero
	var prefix string
	if bsl.Spec.ObjectStorage != nil {
		prefix = bsl.Spec.ObjectStorage.Prefix
	}
	layout := storage.Layout{Prefix: prefix}
	var store storage.ObjectStore
	var validate func(ctx context.Context) error
	var lock *storage.ObjectLock

	switch bsl.Spec.Provider {
	case cairnv1.StorageProviderFilesystem:
		path, err := filesystemPath(bsl)
		if err != nil {
			return nil, err
		}
		fs, err := storage.NewFilesystem(path)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		store, validate = fs, func(ctx context.Context) error { return fs.Validate(ctx, writable) }
	case cairnv1.StorageProviderS3:
		var err error
		if store, validate, lock, err = openS3(ctx, r, bsl, layout.BackupsDir()); err != nil {
			return nil, err
		}
	case cairnv1.StorageProviderAzure, cairnv1.StorageProviderGCS:
		cloud, err := openCloud(ctx, r, bsl)
		if err != nil {
			return nil, err
		}
		store = cloud
		validate, lock = withLock(cloud, layout.BackupsDir(), bsl.Spec.ObjectLock)
	default:
		return nil, fmt.Errorf("%w: unknown provider %q (want filesystem, s3, azure or gcs)", ErrConfig, bsl.Spec.Provider)
	}
	if bsl.Spec.ObjectLock != nil && lock == nil {
		return nil, fmt.Errorf("%w: spec.objectLock needs an s3, azure or gcs location", ErrConfig)
	}
	if enc := bsl.Spec.Encryption; enc != nil {
		keys, err := readKeys(ctx, r, bsl.Namespace, enc)
		if err != nil {
			return nil, err
		}
		if store, err = storage.Encrypted(store, keys, prefix); err != nil {
			return nil, fmt.Errorf("%w: encryption keys in Secret %s/%s: %w", ErrConfig, bsl.Namespace, enc.KeySecretRef.Name, err)
		}
	}
	if velero {
		if bsl.Spec.Encryption != nil {
			return nil, fmt.Errorf("%w: a location with format velero cannot have encryption", ErrConfig)
		}
		// Velero's backups, shown in Cairn's layout (prefix: Velero's BSL prefix) in the
		// operator's namespace, where the location is.
		store = velerofmt.NewStore(store, layout, bsl.Namespace)
	}
	if !writable && !velero { // the Velero store refuses every write itself, saying why
		store = storage.ReadOnly(store)
	}
	return &Store{ObjectStore: store, Layout: layout, Lock: lock, validate: validate, Velero: velero}, nil
}

// openS3 opens an s3 location's store, validated by listing it under prefix, and its object
// lock when spec.objectLock asks for one (validated too).
func openS3(ctx context.Context, r client.Reader, bsl *cairnv1.BackupStorageLocation, prefix string) (storage.ObjectStore, func(context.Context) error, *storage.ObjectLock, error) {
	cfg, err := s3Config(ctx, r, bsl)
	if err != nil {
		return nil, nil, nil, err
	}
	cfg.Versioned = bsl.Spec.ObjectLock != nil
	s3, err := s3Clients.get(cfg)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	ol := bsl.Spec.ObjectLock
	validate, lock := withLock(s3, prefix, ol)
	return s3, validate, lock, nil
}

// lockingStore is a provider's store that can lock objects (s3, azure, gcs).
type lockingStore interface {
	Validate(ctx context.Context, prefix string) error
	ObjectLock(mode storage.LockMode, minRetention time.Duration) *storage.ObjectLock
}

// withLock is the validation of s under prefix and, when ol asks for one, its object lock,
// whose capability the validation checks too (Unavailable saying what is missing).
func withLock(s lockingStore, prefix string, ol *cairnv1.LocationObjectLock) (func(context.Context) error, *storage.ObjectLock) {
	if ol == nil {
		return func(ctx context.Context) error { return s.Validate(ctx, prefix) }, nil
	}
	lock := s.ObjectLock(lockMode(ol.Mode), ol.MinRetention.Duration)
	return func(ctx context.Context) error {
		if err := s.Validate(ctx, prefix); err != nil {
			return err
		}
		return lock.Validate(ctx)
	}, lock
}

// lockMode is the lock mode of a location's objectLock.mode (S3's retention mode; Azure's and
// GCS's Unlocked and Locked).
func lockMode(m cairnv1.ObjectLockMode) storage.LockMode {
	if m == cairnv1.ObjectLockModeGovernance {
		return storage.LockGovernance
	}
	return storage.LockCompliance // the stricter one, should the API server ever let another through
}

// readKeys reads an encrypted location's keys from its Secret: every data key is a key name.
// The Secret is read on every Open, so a key added for a rotation is used at once.
func readKeys(ctx context.Context, r client.Reader, namespace string, enc *cairnv1.LocationEncryption) (storage.Keyring, error) {
	if r == nil {
		return storage.Keyring{}, fmt.Errorf("%w: cannot read the encryption key Secret %s/%s", ErrConfig, namespace, enc.KeySecretRef.Name)
	}
	var secret corev1.Secret
	err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: enc.KeySecretRef.Name}, &secret)
	if apierrors.IsNotFound(err) {
		return storage.Keyring{}, fmt.Errorf("%w: encryption key Secret %s/%s does not exist", ErrConfig, namespace, enc.KeySecretRef.Name)
	}
	if err != nil {
		return storage.Keyring{}, fmt.Errorf("reading encryption key Secret %s/%s: %w", namespace, enc.KeySecretRef.Name, err)
	}
	return storage.Keyring{Keys: secret.Data, WriteKey: enc.WriteKey}, nil
}

// refuseNested returns NestedError when bsl's objects nest with an older location's. Without
// a reader (a lone location, whose Secret cannot be read either) there is nothing to compare
// with.
func refuseNested(ctx context.Context, r client.Reader, bsl *cairnv1.BackupStorageLocation) error {
	if r == nil {
		return nil
	}
	var all cairnv1.BackupStorageLocationList
	if err := r.List(ctx, &all, client.InNamespace(bsl.Namespace)); err != nil {
		return fmt.Errorf("listing the storage locations: %w", err)
	}
	if others := Nested(all.Items, bsl); len(others) > 0 {
		return NestedError(others)
	}
	return nil
}

// filesystemPath is a filesystem location's config.path, which must be absolute.
func filesystemPath(bsl *cairnv1.BackupStorageLocation) (string, error) {
	path := bsl.Spec.Config[cairnv1.ConfigKeyPath]
	if path == "" {
		return "", fmt.Errorf("%w: a filesystem location needs config.path", ErrConfig)
	}
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("%w: config.path %q must be an absolute path", ErrConfig, path)
	}
	return path, nil
}

func s3Config(ctx context.Context, r client.Reader, bsl *cairnv1.BackupStorageLocation) (storage.S3Config, error) {
	cfg := storage.S3Config{
		Region:   bsl.Spec.Config[cairnv1.ConfigKeyRegion],
		Endpoint: bsl.Spec.Config[cairnv1.ConfigKeyEndpoint],
	}
	if bsl.Spec.ObjectStorage != nil {
		cfg.Bucket = bsl.Spec.ObjectStorage.Bucket
	}
	if cfg.Bucket == "" {
		return cfg, fmt.Errorf("%w: an s3 location needs objectStorage.bucket", ErrConfig)
	}
	for key, dst := range map[string]*bool{
		cairnv1.ConfigKeyForcePathStyle:        &cfg.ForcePathStyle,
		cairnv1.ConfigKeyInsecureSkipTLSVerify: &cfg.InsecureSkipTLSVerify,
	} {
		if v, ok := bsl.Spec.Config[key]; ok {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return cfg, fmt.Errorf("%w: config.%s must be true or false, not %q", ErrConfig, key, v)
			}
			*dst = b
		}
	}
	if ref := bsl.Spec.Credential; ref != nil {
		creds, err := readCredentials(ctx, r, bsl.Namespace, ref, bsl.Spec.Config["profile"])
		if err != nil {
			return cfg, err
		}
		cfg.Credentials = creds
	}
	return cfg, nil
}

func readCredentials(ctx context.Context, r client.Reader, namespace string, ref *corev1.SecretKeySelector, profile string) (storage.S3Credentials, error) {
	data, err := readSecretValue(ctx, r, namespace, ref)
	if err != nil {
		return storage.S3Credentials{}, err
	}
	creds, err := storage.ParseSharedCredentials(data, profile)
	if err != nil {
		return storage.S3Credentials{}, fmt.Errorf("%w: credential secret %s/%s key %q: %w", ErrConfig, namespace, ref.Name, ref.Key, err)
	}
	return creds, nil
}

// Defaults returns the default location among locs, and the names of every location that says
// default: true when more than one does. The oldest one that says so stays the default (ties
// go to the name that sorts first); nil when none does.
func Defaults(locs []cairnv1.BackupStorageLocation) (def *cairnv1.BackupStorageLocation, conflicting []string) {
	var candidates []*cairnv1.BackupStorageLocation
	for i := range locs {
		if locs[i].Spec.Default && locs[i].DeletionTimestamp == nil {
			candidates = append(candidates, &locs[i])
		}
	}
	if len(candidates) == 0 {
		return nil, nil
	}
	sort.Slice(candidates, func(i, j int) bool {
		ti, tj := candidates[i].CreationTimestamp, candidates[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return candidates[i].Name < candidates[j].Name
	})
	if len(candidates) > 1 {
		for _, c := range candidates {
			conflicting = append(conflicting, c.Name)
		}
	}
	return candidates[0], conflicting
}

// Resolve returns the location a backup names: name, or the default when name is empty. Its
// error says what a person should do.
func Resolve(locs []cairnv1.BackupStorageLocation, namespace, name string) (*cairnv1.BackupStorageLocation, error) {
	if name == "" {
		def, _ := Defaults(locs)
		if def == nil {
			return nil, missingError(fmt.Sprintf("no default storage location in namespace %s: name one in spec.storageLocation or mark one with spec.default: true", namespace))
		}
		return def, nil
	}
	for i := range locs {
		if locs[i].Name == name {
			return &locs[i], nil
		}
	}
	return nil, missingError(fmt.Sprintf("storage location %q does not exist in namespace %s", name, namespace))
}
