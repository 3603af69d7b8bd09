package storage_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

func TestRetainUntil(t *testing.T) {
	committed := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name         string
		committed    time.Time
		expiration   time.Time
		minRetention time.Duration
		want         time.Time
	}{
		{name: "never expires: minRetention after the commit", committed: committed, minRetention: 720 * time.Hour,
			want: committed.Add(720 * time.Hour)},
		{name: "expires after minRetention: the expiration", committed: committed, expiration: committed.Add(1000 * time.Hour), minRetention: 720 * time.Hour,
			want: committed.Add(1000 * time.Hour)},
		{name: "expires before minRetention: minRetention wins", committed: committed, expiration: committed.Add(time.Hour), minRetention: 24 * time.Hour,
			want: committed.Add(24 * time.Hour)},
		{name: "already expired: minRetention after the commit", committed: committed, expiration: committed.Add(-time.Hour), minRetention: time.Second,
			want: committed.Add(time.Second)},
		{name: "a fraction of a second is rounded up, never down", committed: committed.Add(300 * time.Millisecond), minRetention: time.Second,
			want: committed.Add(2 * time.Second)},
		{name: "an expiration with a fraction is rounded up", committed: committed, expiration: committed.Add(time.Hour + time.Nanosecond), minRetention: time.Second,
			want: committed.Add(time.Hour + time.Second)},
		{name: "a commit in another zone is answered in UTC", committed: committed.In(time.FixedZone("X", 3600)), minRetention: time.Hour,
			want: committed.Add(time.Hour)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := storage.RetainUntil(tt.committed, tt.expiration, tt.minRetention)
			if !got.Equal(tt.want) || got.Location() != time.UTC {
				t.Fatalf("RetainUntil = %s, want %s (UTC)", got, tt.want)
			}
		})
	}
}

func TestRetainedUntil(t *testing.T) {
	until := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	retained := &storage.RetainedError{Key: "k", Until: until, Mode: storage.LockCompliance}
	tests := []struct {
		name   string
		err    error
		want   time.Time
		wantOK bool
	}{
		{name: "nil", err: nil},
		{name: "another error", err: errors.New("connection refused")},
		{name: "retained", err: retained, want: until, wantOK: true},
		{name: "retained, wrapped", err: errors.Join(errors.New("storage location s3"), retained), want: until, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := storage.RetainedUntil(tt.err)
			if ok != tt.wantOK || !got.Equal(tt.want) {
				t.Fatalf("RetainedUntil = %s, %v; want %s, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
	if msg := retained.Error(); !strings.Contains(msg, "until 2027-01-01T00:00:00Z") || !strings.Contains(msg, "COMPLIANCE") {
		t.Fatalf("the message does not say until when, in which mode: %s", msg)
	}
}

func newVersionedS3(t *testing.T, server *testenv.S3Server, bucket string) *storage.S3 {
	t.Helper()
	s, err := storage.NewS3(storage.S3Config{
		Bucket: bucket, Endpoint: server.Endpoint(), Region: "us-east-1", ForcePathStyle: true,
		Credentials: rootCreds(server), PartSize: 5 << 20, Versioned: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestObjectLockValidate(t *testing.T) {
	server := testenv.StartVersionedS3Server(t)
	server.CreateLockedBucket("locked")
	server.CreateBucket("plain")
	ctx := context.Background()
	if err := newVersionedS3(t, server, "locked").ObjectLock(storage.LockCompliance, time.Hour).Validate(ctx); err != nil {
		t.Fatalf("a bucket with Object Lock: %v", err)
	}
	err := newVersionedS3(t, server, "plain").ObjectLock(storage.LockCompliance, time.Hour).Validate(ctx)
	if err == nil || !strings.Contains(err.Error(), `bucket "plain" at `+server.Endpoint()+` does not have Object Lock enabled`) {
		t.Fatalf("a bucket without Object Lock: %v", err)
	}
}

// versitygw enforces Object Lock on a versioned bucket: a locked version cannot be deleted,
// in either mode, until its date (Governance only with the bypass header, which Cairn never
// sends); a PUT under its key adds a version and leaves it as it was.
func TestObjectLockEnforced(t *testing.T) {
	server := testenv.StartVersionedS3Server(t)
	server.CreateLockedBucket("locked")
	ctx := context.Background()
	raw := server.Client()
	for _, mode := range []storage.LockMode{storage.LockGovernance, storage.LockCompliance} {
		t.Run(string(mode), func(t *testing.T) {
			store := newVersionedS3(t, server, "locked")
			lock := store.ObjectLock(mode, time.Second)
			key := "backups/ns/b-" + strings.ToLower(string(mode)) + "/b.tar.gz"
			mustPut(t, store, key, "the archive")
			if err := lock.Retained(ctx, []string{key, "backups/ns/none"}, time.Now()); err != nil {
				t.Fatalf("an object not locked yet, and a missing one: %v", err)
			}
			until := time.Now().Add(3 * time.Second).Truncate(time.Second).Add(time.Second)
			if err := lock.Retain(ctx, []string{key}, until); err != nil {
				t.Fatal(err)
			}
			// Retaining again, shorter, leaves the date as it is.
			if err := lock.Retain(ctx, []string{key}, until.Add(-time.Second)); err != nil {
				t.Fatal(err)
			}
			err := lock.Retained(ctx, []string{key}, time.Now())
			gotUntil, ok := storage.RetainedUntil(err)
			if !ok || !gotUntil.Equal(until) {
				t.Fatalf("Retained = %v, want until %s", err, until)
			}
			if err := store.Delete(ctx, key); err == nil || !strings.Contains(err.Error(), "Object Lock") {
				t.Fatalf("deleting a locked object: %v", err)
			}
			// Someone with the bucket's credentials: delete the version, overwrite the key.
			versions, err := raw.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: aws.String("locked"), Prefix: &key})
			if err != nil || len(versions.Versions) != 1 {
				t.Fatalf("versions: %v, %v", versions, err)
			}
			locked := versions.Versions[0].VersionId
			if _, err := raw.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("locked"), Key: &key, VersionId: locked}); err == nil {
				t.Fatal("the locked version was deleted")
			}
			if _, err := raw.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("locked"), Key: &key, Body: strings.NewReader("ransom note")}); err != nil {
				t.Fatal(err)
			}
			out, err := raw.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("locked"), Key: &key, VersionId: locked})
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(out.Body)
			_ = out.Body.Close()
			if string(data) != "the archive" {
				t.Fatalf("the locked version holds %q", data)
			}

			time.Sleep(time.Until(until.Add(100 * time.Millisecond)))
			if err := lock.Retained(ctx, []string{key}, time.Now()); err != nil {
				t.Fatalf("after its date: %v", err)
			}
			if err := store.Delete(ctx, key); err != nil {
				t.Fatalf("deleting after its date: %v", err)
			}
			left, err := raw.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: aws.String("locked"), Prefix: &key})
			if err != nil || len(left.Versions)+len(left.DeleteMarkers) != 0 {
				t.Fatalf("versions left after the deletion: %v, %v", left, err)
			}
		})
	}
}
