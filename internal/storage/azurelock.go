package storage

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// Immutability on Azure (docs/storage.md): a version-level immutability policy (WORM) on the
// current version of each blob of a committed backup, until the same date as S3's Object Lock
// retention. The container must have version-level immutability support, which needs blob
// versioning on the account: deleting a blob then keeps its version, which its policy keeps
// until its date, so a locked location's store deletes every version of a key
// (AzureConfig.Versioned). Governance is an Unlocked policy (someone allowed to may still
// shorten or delete it), Compliance a Locked one (nobody may, before its date).

// ObjectLock returns the lock of s's container with mode and minRetention. s should be made
// with AzureConfig.Versioned, so that a deletion removes every version of a blob.
func (s *Azure) ObjectLock(mode LockMode, minRetention time.Duration) *ObjectLock {
	return &ObjectLock{backend: azureLock{s}, Mode: mode, MinRetention: minRetention}
}

// azureLock is Azure's version-level immutability policies.
type azureLock struct{ s *Azure }

// azurePolicyMode is the immutability policy mode of a lock mode.
func azurePolicyMode(mode LockMode) blob.ImmutabilityPolicySetting {
	if mode == LockGovernance {
		return blob.ImmutabilityPolicySettingUnlocked
	}
	return blob.ImmutabilityPolicySettingLocked
}

// azureLockMode is the lock mode of a blob's immutability policy mode: Locked is Compliance,
// anything else (Unlocked, Mutable) Governance.
func azureLockMode(mode *blob.ImmutabilityPolicyMode) LockMode {
	if mode != nil && *mode == blob.ImmutabilityPolicyModeLocked {
		return LockCompliance
	}
	return LockGovernance
}

// azureLockSupport decides whether a container whose properties say vlw (version-level
// immutability support; nil when the service says nothing, as Azurite does) can lock blobs.
func azureLockSupport(vlw *bool, containerName, endpoint string) error {
	if vlw != nil && *vlw {
		return nil
	}
	return fmt.Errorf("container %q at %s does not have version-level immutability support, which spec.objectLock needs: "+
		"enable it on the container (az storage container-rm update --enable-vlw; the account needs blob versioning) or point the location at a container that has it",
		containerName, endpoint)
}

// validate reads the container's properties, once, not retried.
func (l azureLock) validate(ctx context.Context) error {
	s := l.s
	props, err := s.client.GetProperties(policy.WithRetryOptions(ctx, policy.RetryOptions{MaxRetries: -1}), nil)
	if err != nil {
		if problem := azureProblem(err, s.container, s.endpoint); problem != nil {
			return problem
		}
		return fmt.Errorf("reading the properties of container %q at %s: %s", s.container, s.endpoint, azureReason(err))
	}
	return azureLockSupport(props.IsImmutableStorageWithVersioningEnabled, s.container, s.endpoint)
}

// retain sets an immutability policy on the current version of key.
func (l azureLock) retain(ctx context.Context, key string, mode LockMode, until time.Time) error {
	s := l.s
	b := s.client.NewBlobClient(key)
	props, err := b.GetProperties(ctx, nil)
	if err != nil {
		return fmt.Errorf("reading the immutability policy of %s in container %s: %w", key, s.container, azureError{err})
	}
	if current := props.ImmutabilityPolicyExpiresOn; current != nil && !current.Before(until) {
		return nil
	}
	policyMode := azurePolicyMode(mode)
	_, err = b.SetImmutabilityPolicy(ctx, until.UTC(), &blob.SetImmutabilityPolicyOptions{Mode: &policyMode})
	if err != nil {
		return fmt.Errorf("locking %s in container %s until %s: %s", key, s.container, until.UTC().Format(time.RFC3339), azureLockFailure(err))
	}
	return nil
}

// azureLockFailure says why setting an immutability policy failed.
func azureLockFailure(err error) string {
	switch {
	case bloberror.HasCode(err, "APINotImplemented") || azureStatus(err) == http.StatusNotImplemented:
		return "the service does not implement immutability policies (" + azureReason(err) + "; Azurite does not)"
	case azureStatus(err) == http.StatusConflict || azureStatus(err) == http.StatusBadRequest:
		return azureReason(err) + ": does the container have version-level immutability support?"
	}
	return azureReason(err)
}

// retained reads the immutability policy of every version of key.
func (l azureLock) retained(ctx context.Context, key string, now time.Time) (*RetainedError, error) {
	var longest *RetainedError
	err := l.s.eachVersion(ctx, key, func(item *container.BlobItem) error {
		if r := azureRetention(key, item.Properties, now); r != nil && (longest == nil || r.Until.After(longest.Until)) {
			longest = r
		}
		return nil
	})
	return longest, err
}

// azureRetention is the RetainedError of a blob version whose properties are props, when its
// immutability policy keeps it after now.
func azureRetention(key string, props *container.BlobProperties, now time.Time) *RetainedError {
	if props == nil || props.ImmutabilityPolicyExpiresOn == nil || !props.ImmutabilityPolicyExpiresOn.After(now) {
		return nil
	}
	mode := azureLockMode(props.ImmutabilityPolicyMode)
	policy := "Azure immutability policy, " + string(blob.ImmutabilityPolicyModeUnlocked)
	if mode == LockCompliance {
		policy = "Azure immutability policy, " + string(blob.ImmutabilityPolicyModeLocked)
	}
	return &RetainedError{Key: key, Until: props.ImmutabilityPolicyExpiresOn.UTC(), Mode: mode, Policy: policy}
}

// eachVersion calls fn with every version of exactly key (the blob itself where the service
// keeps no versions, as Azurite does), with its immutability policy.
func (s *Azure) eachVersion(ctx context.Context, key string, fn func(*container.BlobItem) error) error {
	p := s.client.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{
		Prefix: &key, Include: container.ListBlobsInclude{Versions: true, ImmutabilityPolicy: true},
	})
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("listing the versions of %s in container %s: %w", key, s.container, azureError{err})
		}
		for _, item := range page.Segment.BlobItems {
			if item.Name != nil && *item.Name == key {
				if err := fn(item); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// deleteVersions removes every previous version of key (deleting the blob made its current
// version one). A version an immutability policy still keeps is refused: the error says so.
func (s *Azure) deleteVersions(ctx context.Context, key string) error {
	return s.eachVersion(ctx, key, func(item *container.BlobItem) error {
		if item.VersionID == nil {
			return nil // the blob itself, deleted already
		}
		v, err := s.client.NewBlobClient(key).WithVersionID(*item.VersionID)
		if err != nil {
			return fmt.Errorf("addressing version %s of %s: %w", *item.VersionID, key, err)
		}
		if _, err := v.Delete(ctx, nil); err != nil && !azureNotFound(err) {
			return fmt.Errorf("deleting version %s of %s from container %s: %s", *item.VersionID, key, s.container, azureDeleteFailure(err))
		}
		return nil
	})
}

// azureDeleteFailure says why deleting a blob or version failed: locked, or the service's reason.
func azureDeleteFailure(err error) string {
	if bloberror.HasCode(err, bloberror.BlobImmutableDueToPolicy) {
		return azureReason(err) + ": it is still locked by its immutability policy"
	}
	return azureReason(err)
}
