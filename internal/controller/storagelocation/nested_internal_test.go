package storagelocation

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller/stores"
	"github.com/cairn-backup/cairn/internal/testenv"
)

func TestNestedLocationIsRefused(t *testing.T) {
	now := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	location := func(name string, created time.Time, prefix string) *cairnv1.BackupStorageLocation {
		return &cairnv1.BackupStorageLocation{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "cairn-system", UID: types.UID(name), CreationTimestamp: metav1.NewTime(created)},
			Spec: cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Config: map[string]string{cairnv1.ConfigKeyPath: dir},
				ObjectStorage: &cairnv1.ObjectStorage{Prefix: prefix}},
		}
	}
	first := location("first", now.Add(-time.Hour), "cluster")
	inside := location("inside", now, "cluster/team")
	apart := location("apart", now, "other")
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(first, inside, apart).
		WithStatusSubresource(&cairnv1.BackupStorageLocation{}).Build()
	r := &Reconciler{Client: c, Namespace: "cairn-system", Clock: clocktesting.NewFakeClock(now),
		Recorder: events.NewFakeRecorder(100), Stores: stores.Stores{Client: c, Namespace: "cairn-system"}}
	for _, name := range []string{"first", "inside", "apart"} {
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "cairn-system", Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]cairnv1.StorageLocationPhase{
		"first": cairnv1.StorageLocationPhaseAvailable, "inside": cairnv1.StorageLocationPhaseUnavailable, "apart": cairnv1.StorageLocationPhaseAvailable,
	} {
		var got cairnv1.BackupStorageLocation
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: "cairn-system", Name: name}, &got); err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase != want {
			t.Errorf("%s: phase %s (%s), want %s", name, got.Status.Phase, got.Status.Message, want)
		}
		if name == "inside" && !strings.Contains(got.Status.Message, "storage location first") {
			t.Errorf("%s: message %q does not name the location it nests with", name, got.Status.Message)
		}
	}
}
