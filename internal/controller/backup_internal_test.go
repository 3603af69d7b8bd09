package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/controller/stores"
)

// readyToStart is a backup the queue dequeued at entered, for location loc.
func readyToStart(namespace string, spec cairnv1.BackupSpec, loc string, entered time.Time) *cairnv1.Backup {
	t := metav1.NewTime(entered)
	return &cairnv1.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: namespace, UID: "uid-b", CreationTimestamp: t},
		Spec:       spec,
		Status:     cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseReadyToStart, StorageLocation: loc, PhaseTransitionTime: &t},
	}
}

func newBackupReconciler(t *testing.T, clk *clocktesting.FakeClock, funcs interceptor.Funcs, objects ...client.Object) (*BackupReconciler, client.Client) {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objects...).
		WithStatusSubresource(&cairnv1.Backup{}).WithInterceptorFuncs(funcs).Build()
	r := &BackupReconciler{Client: c, APIReader: c, Namespace: "cairn-system", Stores: stores.Stores{Client: c, Namespace: "cairn-system"},
		Clock: clk, Recorder: events.NewFakeRecorder(100), Gate: openGate{}, PhaseTimeout: time.Hour, logs: &lifecycle.LogUploads{}}
	return r, c
}

func TestStartWaitsForStorageThenGivesUp(t *testing.T) {
	start := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	// A location that was never validated (its status is empty): the backup waits for it.
	bsl := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "slow", Namespace: "cairn-system"},
		Spec: cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Config: map[string]string{cairnv1.ConfigKeyPath: t.TempDir()}}}
	b := readyToStart("cairn-system", cairnv1.BackupSpec{}, "slow", start)
	r, c := newBackupReconciler(t, clk, interceptor.Funcs{}, bsl, b)
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "cairn-system", Name: "b"}}

	res, err := r.Reconcile(context.Background(), req)
	if err != nil || res.RequeueAfter != lifecycle.StorageWaitRequeue {
		t.Fatalf("Reconcile = %+v, %v; want a requeue after %s", res, err, lifecycle.StorageWaitRequeue)
	}
	var got cairnv1.Backup
	if err := c.Get(context.Background(), req.NamespacedName, &got); err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(got.Status.Conditions, cairnv1.BackupConditionStorageReady)
	if got.Status.Phase != cairnv1.BackupPhaseReadyToStart || cond == nil || cond.Status != metav1.ConditionFalse ||
		!strings.Contains(cond.Message, "waiting for storage location slow") {
		t.Fatalf("phase %s, condition %+v: the backup must say why it holds its slot", got.Status.Phase, cond)
	}

	clk.Step(time.Hour + time.Second)
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), req.NamespacedName, &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != cairnv1.BackupPhaseFailed || !strings.Contains(got.Status.FailureReason, "could not start within 1h0m0s") {
		t.Errorf("after the phase timeout: phase %s, failureReason %q; want Failed (the slot freed)", got.Status.Phase, got.Status.FailureReason)
	}
}

func TestStartChecksTenancyAgain(t *testing.T) {
	start := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	bsl := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "cairn-system"},
		Spec:   cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Default: true, Config: map[string]string{cairnv1.ConfigKeyPath: t.TempDir()}},
		Status: cairnv1.BackupStorageLocationStatus{Phase: cairnv1.StorageLocationPhaseAvailable}}
	// A team's backup selecting another namespace that reached ReadyToStart without the queue's
	// check (written by hand, or queued by an older operator).
	b := readyToStart("team-a", cairnv1.BackupSpec{IncludedNamespaces: []string{"kube-system"}}, "default", start)
	r, c := newBackupReconciler(t, clk, interceptor.Funcs{}, bsl, b)
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "b"}}
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	var got cairnv1.Backup
	if err := c.Get(context.Background(), req.NamespacedName, &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != cairnv1.BackupPhaseFailedValidation || len(got.Status.ValidationErrors) != 1 ||
		!strings.Contains(got.Status.ValidationErrors[0], `may only back up its own namespace, not "kube-system"`) {
		t.Errorf("phase %s, validationErrors %q; want FailedValidation for the tenancy rule", got.Status.Phase, got.Status.ValidationErrors)
	}
}

func TestRunEndingSurvivesATransientAPIError(t *testing.T) {
	start := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	b := readyToStart("cairn-system", cairnv1.BackupSpec{}, "default", start)
	b.Status.Phase = cairnv1.BackupPhaseInProgress
	failures := 1
	r, c := newBackupReconciler(t, clk, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if failures > 0 {
				failures--
				return apierrors.NewServiceUnavailable("the API server is restarting")
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	}, b)
	var current cairnv1.Backup
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(b), &current); err != nil {
		t.Fatal(err)
	}
	// The run finished; its last write meets an API server that is briefly away.
	err := lifecycle.Backups.EndRun(context.Background(), r.Client, r.APIReader, r.Clock, &r.runs, &current, func(s *cairnv1.BackupStatus) { s.Phase = cairnv1.BackupPhaseFinalizing }, nil)
	if err == nil {
		t.Fatal("endRun succeeded through a failing API server")
	}
	// The retry finds it InProgress, and writes the run's ending, not "the operator restarted".
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "cairn-system", Name: "b"}}
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), req.NamespacedName, &current); err != nil {
		t.Fatal(err)
	}
	if current.Status.Phase != cairnv1.BackupPhaseFinalizing || current.Status.FailureReason != "" {
		t.Errorf("phase %s, failureReason %q; want Finalizing", current.Status.Phase, current.Status.FailureReason)
	}
	if current.Status.PhaseTransitionTime == nil || !current.Status.PhaseTransitionTime.Time.Equal(start) {
		t.Errorf("phaseTransitionTime = %v, want %v (set with the phase)", current.Status.PhaseTransitionTime, start)
	}
}

func TestStartTellsTenantsNothingOfTheLocation(t *testing.T) {
	start := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	secretDetails := "bucket backups at http://10.1.2.3:9000: access denied with the key of Secret cairn-system/s3-creds"
	for _, tt := range []struct {
		namespace string
		wantSays  string
		wantHides bool
	}{
		{namespace: "team-a", wantSays: "storage location s3 cannot be used now", wantHides: true},
		{namespace: "cairn-system", wantSays: secretDetails},
	} {
		t.Run(tt.namespace, func(t *testing.T) {
			bsl := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: "cairn-system"},
				Spec:   cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderS3, ObjectStorage: &cairnv1.ObjectStorage{Bucket: "backups"}},
				Status: cairnv1.BackupStorageLocationStatus{Phase: cairnv1.StorageLocationPhaseUnavailable, Message: secretDetails}}
			b := readyToStart(tt.namespace, cairnv1.BackupSpec{}, "s3", start)
			r, c := newBackupReconciler(t, clocktesting.NewFakeClock(start), interceptor.Funcs{}, bsl, b)
			req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: tt.namespace, Name: "b"}}
			if _, err := r.Reconcile(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			var got cairnv1.Backup
			if err := c.Get(context.Background(), req.NamespacedName, &got); err != nil {
				t.Fatal(err)
			}
			if got.Status.Phase != cairnv1.BackupPhaseFailedValidation || len(got.Status.ValidationErrors) != 1 {
				t.Fatalf("phase %s, validationErrors %q", got.Status.Phase, got.Status.ValidationErrors)
			}
			msg := got.Status.ValidationErrors[0]
			if !strings.Contains(msg, tt.wantSays) {
				t.Errorf("validationErrors = %q, want it to say %q", msg, tt.wantSays)
			}
			if hides := !strings.Contains(msg, "10.1.2.3") && !strings.Contains(msg, "s3-creds"); hides != tt.wantHides {
				t.Errorf("validationErrors = %q: hides the location's details = %v, want %v", msg, hides, tt.wantHides)
			}
		})
	}
}

func TestExpirationOf(t *testing.T) {
	start := metav1.NewTime(time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC))
	ttl := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	tests := []struct {
		name       string
		ttl        *metav1.Duration
		defaultTTL time.Duration
		want       *time.Time
	}{
		{name: "ttl set", ttl: ttl(3 * time.Second), defaultTTL: 720 * time.Hour, want: new(start.Add(3 * time.Second))},
		{name: "no ttl: the default", defaultTTL: 24 * time.Hour, want: new(start.Add(24 * time.Hour))},
		{name: "ttl 0s: never", ttl: ttl(0), defaultTTL: 720 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := expirationOf(&cairnv1.Backup{Spec: cairnv1.BackupSpec{TTL: tt.ttl}}, start, tt.defaultTTL)
			switch {
			case tt.want == nil && got != nil:
				t.Errorf("got %s, want no expiration", got)
			case tt.want != nil && (got == nil || !got.Time.Equal(*tt.want)):
				t.Errorf("got %v, want %s", got, tt.want)
			}
		})
	}
}
