package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// Immutability (DESIGN.md section 18, docs/storage.md): a location on an S3 bucket with Object
// Lock enabled locks every object of a backup when the backup is committed, so that nothing —
// Cairn, an attacker holding the bucket's credentials — can delete it or any of its versions
// before its retain-until date. Objects are written unlocked while the backup runs (a failed
// or cancelled backup's partial data must still be removable) and locked, each with an
// S3 PutObjectRetention, just before and just after the commit marker is written. Object
// Lock keeps versions: a later PUT under a locked key adds a version and leaves the locked
// one as it was, so Cairn never writes a key of a committed backup again (docs/format.md).

// LockMode is an S3 Object Lock retention mode.
type LockMode string

const (
	// LockGovernance: a user with s3:BypassGovernanceRetention may still delete a locked
	// version or shorten its retention.
	LockGovernance LockMode = "GOVERNANCE"
	// LockCompliance: nobody may, before the retain-until date.
	LockCompliance LockMode = "COMPLIANCE"
)

// RetainUntil is the retain-until date of the objects of a backup committed at committed that
// expires at expiration (zero: never): its expiration, or minRetention after its commit when
// that is later, rounded up to the second (S3 keeps seconds). A backup that never expires is
// thus locked for minRetention; one whose ttl is shorter than minRetention outlives its
// expiration in the bucket until then (its deletion says so, and is retried then).
func RetainUntil(committed, expiration time.Time, minRetention time.Duration) time.Time {
	until := committed.Add(minRetention)
	if expiration.After(until) {
		until = expiration
	}
	if rounded := until.Truncate(time.Second); !rounded.Equal(until) {
		until = rounded.Add(time.Second)
	}
	return until.UTC()
}

// RetainedError is the error of deleting objects that Object Lock, an Azure immutability
// policy or GCS object retention still retains.
type RetainedError struct {
	// Key is an object retained longest; Until is its retain-until date.
	Key   string
	Until time.Time
	Mode  LockMode
	// Policy names what retains it, in the provider's words ("Azure immutability policy,
	// Locked"); empty means S3 Object Lock in Mode.
	Policy string
}

func (e *RetainedError) Error() string {
	policy := e.Policy
	if policy == "" {
		policy = fmt.Sprintf("Object Lock, %s mode", e.Mode)
	}
	return fmt.Sprintf("the backup's objects are locked (%s) until %s (%s): they cannot be deleted before",
		policy, e.Until.UTC().Format(time.RFC3339), e.Key)
}

// RetainedUntil is the date until which err says objects are retained, and whether it says so.
func RetainedUntil(err error) (time.Time, bool) {
	var retained *RetainedError
	if errors.As(err, &retained) {
		return retained.Until, true
	}
	return time.Time{}, false
}

// lockBackend is how one provider locks objects: S3 Object Lock, Azure version-level
// immutability policies, GCS object retention.
type lockBackend interface {
	// validate checks that the bucket or container can lock objects; its error says what is
	// missing.
	validate(ctx context.Context) error
	// retain locks the current version of key until until in mode, unless it is locked as
	// long already.
	retain(ctx context.Context, key string, mode LockMode, until time.Time) error
	// retained is the latest retain-until date after now of any version of key, as a
	// RetainedError; nil when none is retained after now.
	retained(ctx context.Context, key string, now time.Time) (*RetainedError, error)
}

// ObjectLock locks the objects of committed backups: on S3 with Object Lock, on Azure with
// version-level immutability policies, on GCS with object retention (docs/storage.md).
type ObjectLock struct {
	backend      lockBackend
	Mode         LockMode
	MinRetention time.Duration
}

// ObjectLock returns the object lock of s's bucket with mode and minRetention. The bucket
// keeps versions (Object Lock needs it): s should be made with S3Config.Versioned, so that a
// deletion removes every version of a key.
func (s *S3) ObjectLock(mode LockMode, minRetention time.Duration) *ObjectLock {
	return &ObjectLock{backend: s3Lock{s}, Mode: mode, MinRetention: minRetention}
}

// RetainUntil is the retain-until date of a backup committed at committed that expires at
// expiration (zero: never), with the lock's minRetention.
func (l *ObjectLock) RetainUntil(committed, expiration time.Time) time.Time {
	return RetainUntil(committed, expiration, l.MinRetention)
}

// Validate checks that the bucket or container can lock objects; its error says what to do.
func (l *ObjectLock) Validate(ctx context.Context) error { return l.backend.validate(ctx) }

// Retain locks the current version of each key until until, in the lock's mode. A version
// already retained as long or longer (a retried commit, a bucket's default retention) is left
// as it is: a retention is never shortened.
func (l *ObjectLock) Retain(ctx context.Context, keys []string, until time.Time) error {
	for _, key := range keys {
		if err := checkKey(key); err != nil {
			return err
		}
		if err := l.backend.retain(ctx, key, l.Mode, until); err != nil {
			return err
		}
	}
	return nil
}

// Retained returns a RetainedError naming the key retained longest when one of keys (any of
// its versions) is retained after now; nil when none is.
func (l *ObjectLock) Retained(ctx context.Context, keys []string, now time.Time) error {
	var longest *RetainedError
	for _, key := range keys {
		if err := checkKey(key); err != nil {
			return err
		}
		r, err := l.backend.retained(ctx, key, now)
		if err != nil {
			return err
		}
		if r != nil && (longest == nil || r.Until.After(longest.Until)) {
			longest = r
		}
	}
	if longest == nil {
		return nil
	}
	return longest
}

// s3Lock is S3 Object Lock.
type s3Lock struct{ s3 *S3 }

// validate checks that the bucket has Object Lock enabled.
func (l s3Lock) validate(ctx context.Context) error {
	s := l.s3
	once := func(o *s3.Options) { o.RetryMaxAttempts = 1 }
	out, err := s.client.GetObjectLockConfiguration(ctx, &s3.GetObjectLockConfigurationInput{Bucket: &s.bucket}, once)
	switch {
	case err != nil && errorCode(err) == "ObjectLockConfigurationNotFoundError":
		return fmt.Errorf("bucket %q at %s does not have Object Lock enabled, which spec.objectLock needs: create a bucket with Object Lock enabled (it can only be enabled when a bucket is created) and point the location at it", s.bucket, s.endpoint)
	case err != nil && isAccessDenied(err):
		return fmt.Errorf("access denied reading the Object Lock configuration of bucket %q at %s (%s): the credentials need s3:GetBucketObjectLockConfiguration", s.bucket, s.endpoint, errorCode(err))
	case err != nil && isUnreachable(err):
		return fmt.Errorf("cannot reach the s3 endpoint %s: %s", s.endpoint, unreachableReason(err))
	case err != nil:
		return fmt.Errorf("reading the Object Lock configuration of bucket %q at %s: %s", s.bucket, s.endpoint, errorCode(err))
	case out.ObjectLockConfiguration == nil || out.ObjectLockConfiguration.ObjectLockEnabled != types.ObjectLockEnabledEnabled:
		return fmt.Errorf("bucket %q at %s does not have Object Lock enabled, which spec.objectLock needs", s.bucket, s.endpoint)
	}
	return nil
}

// retain puts an Object Lock retention on the current version of key.
func (l s3Lock) retain(ctx context.Context, key string, mode LockMode, until time.Time) error {
	s := l.s3
	head, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		return fmt.Errorf("reading the retention of %s in bucket %s: %w", key, s.bucket, err)
	}
	if current := head.ObjectLockRetainUntilDate; current != nil && !current.Before(until) {
		return nil
	}
	_, err = s.client.PutObjectRetention(ctx, &s3.PutObjectRetentionInput{
		Bucket: &s.bucket, Key: &key, VersionId: head.VersionId,
		Retention: &types.ObjectLockRetention{Mode: types.ObjectLockRetentionMode(mode), RetainUntilDate: aws.Time(until)},
	})
	if err != nil {
		return fmt.Errorf("locking %s in bucket %s until %s: %w", key, s.bucket, until.Format(time.RFC3339), err)
	}
	return nil
}

// retained reads the retention of every version of key.
func (l s3Lock) retained(ctx context.Context, key string, now time.Time) (*RetainedError, error) {
	var longest *RetainedError
	err := l.s3.eachVersion(ctx, key, func(v objectVersion) error {
		if v.deleteMarker {
			return nil
		}
		out, err := l.s3.client.GetObjectRetention(ctx, &s3.GetObjectRetentionInput{Bucket: &l.s3.bucket, Key: &key, VersionId: &v.id})
		switch {
		case err != nil && (errorCode(err) == "NoSuchObjectLockConfiguration" || isNotFound(err)):
			return nil // never locked
		case err != nil:
			return fmt.Errorf("reading the retention of %s in bucket %s: %w", key, l.s3.bucket, err)
		case out.Retention == nil || out.Retention.RetainUntilDate == nil || !out.Retention.RetainUntilDate.After(now):
			return nil
		}
		if until := *out.Retention.RetainUntilDate; longest == nil || until.After(longest.Until) {
			longest = &RetainedError{Key: key, Until: until.UTC(), Mode: LockMode(out.Retention.Mode)}
		}
		return nil
	})
	return longest, err
}

// objectVersion is one version of a key, or one of its delete markers.
type objectVersion struct {
	id           string
	deleteMarker bool
}

// eachVersion calls fn with every version and delete marker of exactly key.
func (s *S3) eachVersion(ctx context.Context, key string, fn func(objectVersion) error) error {
	p := s3.NewListObjectVersionsPaginator(s.client, &s3.ListObjectVersionsInput{Bucket: &s.bucket, Prefix: &key})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("listing the versions of %s in bucket %s: %w", key, s.bucket, err)
		}
		for _, v := range page.Versions {
			if aws.ToString(v.Key) == key {
				if err := fn(objectVersion{id: aws.ToString(v.VersionId)}); err != nil {
					return err
				}
			}
		}
		for _, m := range page.DeleteMarkers {
			if aws.ToString(m.Key) == key {
				if err := fn(objectVersion{id: aws.ToString(m.VersionId), deleteMarker: true}); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// deleteVersions removes every version and delete marker of key (a versioned bucket's
// DeleteObject without a version only hides the data under a delete marker). A version Object
// Lock retains is refused by the service: the error says so.
func (s *S3) deleteVersions(ctx context.Context, key string) error {
	return s.eachVersion(ctx, key, func(v objectVersion) error {
		_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key, VersionId: aws.String(v.id)})
		switch {
		case err == nil || isNotFound(err):
			return nil
		case isAccessDenied(err):
			return fmt.Errorf("deleting version %s of %s from bucket %s: %s (is it still locked by Object Lock?)", v.id, key, s.bucket, errorCode(err))
		}
		return fmt.Errorf("deleting version %s of %s from bucket %s: %w", v.id, key, s.bucket, err)
	})
}
