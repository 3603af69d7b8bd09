package deletion

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

func TestNextDeletionAttempt(t *testing.T) {
	now := time.Date(2026, 11, 26, 22, 0, 0, 0, time.UTC)
	tests := []struct {
		name                   string
		backoff, retainedUntil time.Time
		want                   time.Time
	}{
		{name: "any failure: the backoff", backoff: now.Add(10 * time.Second), want: now.Add(10 * time.Second)},
		{name: "locked for a month: just after the date, not the backoff's minute",
			backoff: now.Add(time.Minute), retainedUntil: now.Add(720 * time.Hour), want: now.Add(720*time.Hour + retainedRetryMargin)},
		{name: "locked for a second: just after the date, sooner than the backoff",
			backoff: now.Add(time.Minute), retainedUntil: now.Add(time.Second), want: now.Add(time.Second + retainedRetryMargin)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nextDeletionAttempt(tt.backoff, tt.retainedUntil); !got.Equal(tt.want) {
				t.Fatalf("nextDeletionAttempt = %s, want %s", got, tt.want)
			}
		})
	}
}

// TestDeletionOfALockedBackup: a backup whose objects Object Lock keeps (versitygw, which
// enforces it) is not touched by its deletion: DeletionFailed saying until when, the next
// attempt at that date, not after the backoff; at the date it is deleted, every version.
func TestDeletionOfALockedBackup(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	server := testenv.StartVersionedS3Server(t)
	server.CreateLockedBucket("locked")
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "cairn-system"},
		Data: map[string][]byte{"cloud": []byte(server.CredentialsFile())}}
	bsl := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "locked", Namespace: "cairn-system"},
		Spec: cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderS3, ObjectStorage: &cairnv1.ObjectStorage{Bucket: "locked"},
			Config:     map[string]string{"endpoint": server.Endpoint(), "forcePathStyle": "true"},
			Credential: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "cloud"},
			ObjectLock: &cairnv1.LocationObjectLock{Mode: cairnv1.ObjectLockModeCompliance, MinRetention: metav1.Duration{Duration: time.Second}}}}
	clk := clocktesting.NewFakeClock(time.Now())
	deleted := metav1.NewTime(clk.Now())
	b := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "cairn-system", UID: "uid-b",
		DeletionTimestamp: &deleted, Finalizers: []string{cairnv1.BackupDataFinalizer}},
		Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseCompleted, StorageLocation: "locked", StartTimestamp: &deleted}}
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(secret, bsl, b).WithStatusSubresource(&cairnv1.Backup{}).Build()

	// The backup's objects, committed and locked for three seconds (as the finalizer does).
	store, err := location.Open(ctx, c, bsl)
	if err != nil {
		t.Fatal(err)
	}
	keys := store.Layout.Backup("cairn-system", "b")
	for _, key := range []string{keys.Archive, keys.Logs} {
		if err := store.Put(ctx, key, strings.NewReader("data of "+key)); err != nil {
			t.Fatal(err)
		}
	}
	if err := storage.WriteMetadata(ctx, store, keys, storage.BackupMetadata{Namespace: "cairn-system", Name: "b", UID: "uid-b", Phase: "Completed"}); err != nil {
		t.Fatal(err)
	}
	until := store.Lock.RetainUntil(time.Now().Add(2*time.Second), time.Time{})
	if err := store.Lock.Retain(ctx, []string{keys.Archive, keys.Logs, keys.Metadata}, until); err != nil {
		t.Fatal(err)
	}

	r := startTestDeletionReconciler(ctx, c, clk, events.NewFakeRecorder(100), nil)
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "cairn-system", Name: "b"}}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	<-r.ended
	res, err := r.Reconcile(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var got cairnv1.Backup
	if err := c.Get(ctx, req.NamespacedName, &got); err != nil {
		t.Fatal(err)
	}
	wantNext := until.Add(retainedRetryMargin)
	if got.Status.Phase != cairnv1.BackupPhaseDeletionFailed ||
		!strings.Contains(got.Status.LastDeletionError, "locked (Object Lock, COMPLIANCE mode) until "+until.Format(time.RFC3339)) ||
		!strings.Contains(got.Status.LastDeletionError, "the deletion is retried then") {
		t.Fatalf("phase %s, error %q; want DeletionFailed saying until %s", got.Status.Phase, got.Status.LastDeletionError, until)
	}
	if !got.Status.NextDeletionAttempt.Time.Equal(wantNext) || res.RequeueAfter != wantNext.Sub(clk.Now()) {
		t.Fatalf("next attempt %s, requeue after %s; want at %s", got.Status.NextDeletionAttempt, res.RequeueAfter, wantNext)
	}
	objects, err := store.List(ctx, keys.Dir)
	if err != nil || len(objects) != 3 {
		t.Fatalf("the locked backup's objects were touched: %v, %v", objects, err)
	}

	// At the date (the service's clock too), the retry deletes every version of every object.
	time.Sleep(time.Until(until.Add(200 * time.Millisecond)))
	clk.SetTime(wantNext)
	reconcileDeletion(ctx, t, r, req)
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, req.NamespacedName, &got); !apierrors.IsNotFound(err) {
		t.Fatalf("the backup is still there after its date: phase %s, %q (%v)", got.Status.Phase, got.Status.LastDeletionError, err)
	}
	if err := store.Lock.Retained(ctx, []string{keys.Archive, keys.Logs, keys.Metadata}, time.Now()); err != nil {
		t.Fatal(err)
	}
	versions, err := server.Client().ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: aws.String("locked")})
	if err != nil || len(versions.Versions)+len(versions.DeleteMarkers) != 0 {
		t.Fatalf("versions left: %d, %d (%v)", len(versions.Versions), len(versions.DeleteMarkers), err)
	}
}
