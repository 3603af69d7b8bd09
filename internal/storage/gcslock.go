package storage

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	gcs "cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
)

// Immutability on GCS (docs/storage.md): object retention on each object of a committed
// backup, until the same date as S3's Object Lock retention. The bucket must have object
// retention enabled. Governance is an Unlocked retention (someone allowed to may still
// shorten or remove it), Compliance a Locked one (nobody may, before its date). A bucket's
// own retention policy, and holds, keep objects too: Retained reports them as well.

// ObjectLock returns the lock of s's bucket with mode and minRetention.
func (s *GCS) ObjectLock(mode LockMode, minRetention time.Duration) *ObjectLock {
	return &ObjectLock{backend: gcsLock{s}, Mode: mode, MinRetention: minRetention}
}

// gcsLock is GCS object retention.
type gcsLock struct{ s *GCS }

// GCS's object retention modes.
const (
	gcsRetentionUnlocked = "Unlocked"
	gcsRetentionLocked   = "Locked"
)

// gcsRetentionMode is the object retention mode of a lock mode.
func gcsRetentionMode(mode LockMode) string {
	if mode == LockGovernance {
		return gcsRetentionUnlocked
	}
	return gcsRetentionLocked
}

// gcsLockSupport decides whether a bucket with attrs can lock objects: it needs object
// retention enabled (a bucket retention policy alone gives every object the same period).
func gcsLockSupport(attrs *gcs.BucketAttrs, bucket, endpoint string) error {
	if attrs.ObjectRetentionMode == "Enabled" {
		return nil
	}
	msg := fmt.Sprintf("bucket %q at %s does not have object retention enabled, which spec.objectLock needs: "+
		"enable it on the bucket (--enable-per-object-retention) or point the location at a bucket that has it", bucket, endpoint)
	if rp := attrs.RetentionPolicy; rp != nil && rp.RetentionPeriod > 0 {
		msg += fmt.Sprintf(" (its bucket retention policy keeps every object %s, but a backup's objects are kept until its own date)", rp.RetentionPeriod)
	}
	return errors.New(msg)
}

// validate reads the bucket's attributes, once, not retried.
func (l gcsLock) validate(ctx context.Context) error {
	s := l.s
	attrs, err := s.bucket.Retryer(gcs.WithPolicy(gcs.RetryNever)).Attrs(ctx)
	if err != nil {
		if problem := s.problem(err); problem != nil {
			return problem
		}
		return fmt.Errorf("reading the retention settings of bucket %q at %s: %w", s.name, s.endpoint, err)
	}
	return gcsLockSupport(attrs, s.name, s.endpoint)
}

// retain sets the object retention of key.
func (l gcsLock) retain(ctx context.Context, key string, mode LockMode, until time.Time) error {
	s := l.s
	obj := s.bucket.Object(key)
	attrs, err := obj.Attrs(ctx)
	if err != nil {
		return fmt.Errorf("reading the retention of %s in bucket %s: %w", key, s.name, err)
	}
	if r := attrs.Retention; r != nil && !r.RetainUntil.Before(until) {
		return nil
	}
	_, err = obj.If(gcs.Conditions{MetagenerationMatch: attrs.Metageneration}).Update(ctx, gcs.ObjectAttrsToUpdate{
		Retention: &gcs.ObjectRetention{Mode: gcsRetentionMode(mode), RetainUntil: until.UTC()},
	})
	if err != nil {
		return fmt.Errorf("locking %s in bucket %s until %s: %w", key, s.name, until.UTC().Format(time.RFC3339), err)
	}
	return nil
}

// retained reads the retention of every version of key.
func (l gcsLock) retained(ctx context.Context, key string, now time.Time) (*RetainedError, error) {
	s := l.s
	it := s.bucket.Objects(ctx, &gcs.Query{Prefix: key, Versions: true})
	var longest *RetainedError
	for {
		attrs, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return longest, nil
		}
		if err != nil {
			return nil, fmt.Errorf("listing the versions of %s in bucket %s: %w", key, s.name, err)
		}
		if attrs.Name != key {
			continue
		}
		if attrs.EventBasedHold || attrs.TemporaryHold {
			return nil, fmt.Errorf("%s in bucket %s is under a hold (event-based or temporary), which keeps it until someone releases it: Cairn sets none", key, s.name)
		}
		if r := gcsRetention(key, attrs, now); r != nil && (longest == nil || r.Until.After(longest.Until)) {
			longest = r
		}
	}
}

// gcsRetention is the RetainedError of an object version with attrs, when its object
// retention or its bucket's retention policy keeps it after now.
func gcsRetention(key string, attrs *gcs.ObjectAttrs, now time.Time) *RetainedError {
	var r *RetainedError
	if ret := attrs.Retention; ret != nil && ret.RetainUntil.After(now) {
		mode := LockGovernance
		if ret.Mode == gcsRetentionLocked {
			mode = LockCompliance
		}
		r = &RetainedError{Key: key, Until: ret.RetainUntil.UTC(), Mode: mode, Policy: "GCS object retention, " + ret.Mode + " mode"}
	}
	if exp := attrs.RetentionExpirationTime; exp.After(now) && (r == nil || exp.After(r.Until)) {
		r = &RetainedError{Key: key, Until: exp.UTC(), Mode: LockCompliance, Policy: "the GCS bucket's retention policy"}
	}
	return r
}

// gcsDeleteRefused reports whether a deletion failed because retention or a hold keeps the
// object (GCS answers 403 and says so in the message).
func gcsDeleteRefused(err error) bool {
	var apiErr *googleapi.Error
	if !errors.As(err, &apiErr) || apiErr.Code != http.StatusForbidden {
		return false
	}
	msg := strings.ToLower(apiErr.Message)
	return strings.Contains(msg, "retention") || strings.Contains(msg, "hold")
}
