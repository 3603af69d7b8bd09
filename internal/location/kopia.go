package location

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/kopia/kopia/repo/blob"
	"github.com/kopia/kopia/repo/blob/filesystem"
	"github.com/kopia/kopia/repo/blob/readonly"
	"github.com/kopia/kopia/repo/blob/s3"
	"github.com/kopia/kopia/repo/blob/sharded"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/storage"
)

// kopiaDirName is the directory, beside backups/ and restores/ under a location's prefix, that
// holds the volume-data repositories, one per source namespace.
const kopiaDirName = "kopia"

// defaultS3Endpoint is where kopia's S3 client goes when a location names no endpoint: AWS,
// as for the location's own object store (the region comes from config.region).
const defaultS3Endpoint = "s3.amazonaws.com"

// KopiaStorage opens the kopia blob storage of namespace's volume-data repository in the
// location bsl: <prefix>/kopia/<namespace>/ on the location's own storage, with its own
// credentials (read through r, on every call, like Open). readOnly reports a ReadOnly
// location, whose storage refuses every write. It is called by the manager only: node agents
// reach the storage through the blob proxy, so credentials never leave the manager.
//
// Every read of the storage is bounded by MaxBlobSize: a larger blob is refused, naming it and
// its size, before it is read. A location whose objects nest with an older one's is refused,
// as by Open. The caller closes the storage.
func KopiaStorage(ctx context.Context, r client.Reader, bsl *cairnv1.BackupStorageLocation, namespace string) (st blob.Storage, readOnly bool, err error) {
	readOnly = bsl.Spec.AccessMode == cairnv1.AccessModeReadOnly
	var prefix string
	if bsl.Spec.ObjectStorage != nil {
		prefix = bsl.Spec.ObjectStorage.Prefix
	}
	dir, err := kopiaDir(prefix, namespace)
	if err != nil {
		return nil, false, err
	}
	if err := refuseNested(ctx, r, bsl); err != nil {
		return nil, false, err
	}

	switch bsl.Spec.Provider {
	case cairnv1.StorageProviderFilesystem:
		root, err := filesystemPath(bsl)
		if err != nil {
			return nil, false, err
		}
		if bsl.Spec.Format == cairnv1.LocationFormatVelero {
			st, err = veleroFilesystem(root, dir)
		} else {
			st, err = kopiaFilesystem(ctx, root, dir, readOnly)
		}
		if err != nil {
			return nil, false, fmt.Errorf("storage location %s: %w", bsl.Name, err)
		}
	case cairnv1.StorageProviderS3:
		cfg, err := s3Config(ctx, r, bsl)
		if err != nil {
			return nil, false, err
		}
		opts, err := kopiaS3Options(cfg, bsl.Spec.Credential != nil, dir)
		if err != nil {
			return nil, false, err
		}
		st, err = s3.New(ctx, opts, false)
		if err != nil {
			return nil, false, fmt.Errorf("storage location %s: opening bucket %s: %w", bsl.Name, cfg.Bucket, err)
		}
	case cairnv1.StorageProviderAzure, cairnv1.StorageProviderGCS:
		if st, err = kopiaCloud(ctx, r, bsl, dir, readOnly); err != nil {
			return nil, false, err
		}
	default:
		return nil, false, fmt.Errorf("%w: unknown provider %q (want filesystem, s3, azure or gcs)", ErrConfig, bsl.Spec.Provider)
	}
	if readOnly {
		st = readonly.NewWrapper(st)
	}
	return capReads(st, MaxBlobSize), readOnly, nil
}

// kopiaDir is the slash-separated directory of namespace's repository relative to the
// location's root: <prefix>/kopia/<namespace>. The prefix is checked again here (the API
// refuses such prefixes too) because this path decides what a node agent's requests can
// reach: no segment may climb out of it.
func kopiaDir(prefix, namespace string) (string, error) {
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return "", fmt.Errorf("namespace %q: %s", namespace, strings.Join(errs, "; "))
	}
	prefix = strings.Trim(prefix, "/")
	if prefix == "" {
		return path.Join(kopiaDirName, namespace), nil
	}
	for seg := range strings.SplitSeq(prefix, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return "", fmt.Errorf("%w: objectStorage.prefix %q has an empty, '.' or '..' segment", ErrConfig, prefix)
		}
	}
	return path.Join(prefix, kopiaDirName, namespace), nil
}

// kopiaFilesystem opens kopia's filesystem storage at root/dir. The location's directory must
// exist already: a volume that is not mounted must fail, not be replaced by directories made
// in the container's own filesystem. A ReadOnly location's repository must exist (it is never
// created there).
func kopiaFilesystem(ctx context.Context, root, dir string, readOnly bool) (blob.Storage, error) {
	if fi, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("the location's directory cannot be used: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("the location's path %s is not a directory", root)
	}
	if err := refuseSymlinks(root, dir); err != nil {
		return nil, err
	}
	full := filepath.Join(root, filepath.FromSlash(dir))
	if readOnly {
		// Kopia's sharded layout writes its .shards file on first use when it is missing: on
		// a ReadOnly location that would be a write, so a repository without one is refused.
		if _, err := os.Stat(filepath.Join(full, sharded.ParametersFile)); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("it holds no volume data repository at %s, and it is ReadOnly", full)
		} else if err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(full, 0o700); err != nil {
		return nil, fmt.Errorf("making the repository's directory: %w", err)
	}
	// isCreate only chooses the shard layout of a new repository (kopia's current one); an
	// existing repository keeps the layout recorded in its .shards file.
	st, err := filesystem.New(ctx, &filesystem.Options{Path: full}, !readOnly)
	if err != nil {
		return nil, fmt.Errorf("opening the repository's directory: %w", err)
	}
	return st, nil
}

// refuseSymlinks refuses a symbolic link among the directories of dir under root. Kopia's
// filesystem storage follows links (the location's own object store does not, see
// storage.Filesystem): someone who can write to the location's directory must not be able to
// point a repository at another place of the manager's filesystem.
func refuseSymlinks(root, dir string) error {
	p := root
	for seg := range strings.SplitSeq(dir, "/") {
		p = filepath.Join(p, seg)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%s is a symbolic link: a repository's directories must be real directories", p)
		}
	}
	return nil
}

// kopiaS3Options maps a location's S3 configuration to kopia's S3 storage options, with the
// repository at prefix dir.
//
// Credentials: kopia's S3 client chains the static keys with the environment's AWS_* variables
// and the instance's (or IRSA) role, falling back to the next when the keys are empty. A
// location with a credential Secret must therefore bring both keys (never silently use the
// manager pod's own identity instead). A location with no credential on purpose gets that
// chain: the manager pod's AWS identity if it has one, else anonymous requests, where the
// location's own object store is always anonymous.
//
// forcePathStyle has no counterpart: kopia's client (minio-go) picks path-style requests
// for every endpoint that is not a known cloud's virtual-host domain.
func kopiaS3Options(cfg storage.S3Config, hasCredential bool, dir string) (*s3.Options, error) {
	opts := &s3.Options{
		BucketName:     cfg.Bucket,
		Prefix:         dir + "/", // kopia joins Prefix and the blob ID with no separator
		Endpoint:       defaultS3Endpoint,
		DoNotVerifyTLS: cfg.InsecureSkipTLSVerify,
		Region:         cfg.Region,
	}
	if cfg.Endpoint != "" {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("%w: config.endpoint %q must be an http:// or https:// URL", ErrConfig, cfg.Endpoint)
		}
		if strings.Trim(u.Path, "/") != "" || u.RawQuery != "" {
			return nil, fmt.Errorf("%w: config.endpoint %q has a path: volume data needs an endpoint that is only a scheme, host and port", ErrConfig, cfg.Endpoint)
		}
		opts.Endpoint = u.Host
		opts.DoNotUseTLS = u.Scheme == "http"
	}
	if hasCredential {
		c := cfg.Credentials
		if c.AccessKeyID == "" || c.SecretAccessKey == "" {
			return nil, fmt.Errorf("%w: the credential Secret has an empty access key or secret key", ErrConfig)
		}
		opts.AccessKeyID, opts.SecretAccessKey, opts.SessionToken = c.AccessKeyID, c.SecretAccessKey, c.SessionToken
	}
	return opts, nil
}
