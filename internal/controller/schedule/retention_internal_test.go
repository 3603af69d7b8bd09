package schedule

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// A retention that cannot delete (the API server refuses or does not answer) never costs the
// schedule its run, and the error brings the schedule back to try again.
func TestRetentionFailureDoesNotCostARun(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := created.Add(3*24*time.Hour + 2*time.Minute)
	s := &cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Namespace: "cairn-system", Name: "d", CreationTimestamp: metav1.NewTime(created)},
		Spec:   cairnv1.ScheduleSpec{Schedule: "0 0 * * *", Retention: &cairnv1.RetentionPolicy{KeepLast: 1}},
		Status: cairnv1.ScheduleStatus{Phase: cairnv1.SchedulePhaseEnabled, LastBackup: &metav1.Time{Time: created.Add(2 * 24 * time.Hour)}}}
	location := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Namespace: "cairn-system", Name: "default"},
		Spec: cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Default: true}}
	var objs []client.Object
	objs = append(objs, s, location)
	for day := 1; day <= 2; day++ {
		start := metav1.NewTime(created.Add(time.Duration(day)*24*time.Hour + time.Minute))
		objs = append(objs, &cairnv1.Backup{
			ObjectMeta: metav1.ObjectMeta{Namespace: "cairn-system", Name: "d-" + start.Truncate(time.Hour).UTC().Format("20060102150405"),
				Labels: map[string]string{cairnv1.ScheduleNameLabel: "d"}},
			Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseCompleted, StartTimestamp: &start, StorageLocation: "default"}})
	}
	deletes := 0
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(objs...).WithStatusSubresource(&cairnv1.Schedule{}).
		WithInterceptorFuncs(interceptor.Funcs{Delete: func(context.Context, client.WithWatch, client.Object, ...client.DeleteOption) error {
			deletes++
			return errors.New("the server was unable to return a response in the time allotted")
		}}).Build()
	r := &Reconciler{Client: c, Namespace: "cairn-system", Clock: clocktesting.NewFakeClock(now), Recorder: events.NewFakeRecorder(10)}

	_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(s)})
	if err == nil || deletes != 1 {
		t.Fatalf("Reconcile: %v after %d deletes; want the delete's error after 1", err, deletes)
	}
	var run cairnv1.Backup
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "cairn-system", Name: "d-20260104000000"}, &run); err != nil {
		t.Fatalf("the due run was not made: %v", err)
	}
	var got cairnv1.Schedule
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(s), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.LastBackup == nil || !got.Status.LastBackup.Time.Equal(now) {
		t.Errorf("status.lastBackup = %v, want %v", got.Status.LastBackup, now)
	}
}
