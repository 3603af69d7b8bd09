package finalizer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// The restore fixtures of the restore finalizer's tests: copies of the restore reconciler's
// (its restore_internal_test.go), whose tests these were until the finalizer had a package of
// its own.

// openGate lets a reconciler made by a test run at once.
type openGate struct{}

func (openGate) Wait(context.Context) error { return nil }

var restoreTestStart = time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)

// testRestore is restore namespace/name of backup b, created minutes after restoreTestStart, in phase.
func testRestore(namespace, name string, minutes int, phase cairnv1.RestorePhase) *cairnv1.Restore {
	return &cairnv1.Restore{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: types.UID("uid-" + namespace + "-" + name), Generation: 1,
			CreationTimestamp: metav1.NewTime(restoreTestStart.Add(time.Duration(minutes) * time.Minute))},
		Spec:   cairnv1.RestoreSpec{BackupName: "b"},
		Status: cairnv1.RestoreStatus{Phase: phase},
	}
}

// restoreTestLocation is the default location, a filesystem one at dir, Available.
func restoreTestLocation(dir string) *cairnv1.BackupStorageLocation {
	return &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "cairn-system"},
		Spec:   cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Default: true, Config: map[string]string{cairnv1.ConfigKeyPath: dir}},
		Status: cairnv1.BackupStorageLocationStatus{Phase: cairnv1.StorageLocationPhaseAvailable}}
}

// writeCounter counts the writes a fake client was asked to make.
type writeCounter struct{ n atomic.Int32 }

func (w *writeCounter) funcs(next interceptor.Funcs) interceptor.Funcs {
	update, patch, subPatch := next.Update, next.Patch, next.SubResourcePatch
	next.Update = func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
		w.n.Add(1)
		if update != nil {
			return update(ctx, c, obj, opts...)
		}
		return c.Update(ctx, obj, opts...)
	}
	next.Patch = func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
		w.n.Add(1)
		if patch != nil {
			return patch(ctx, c, obj, p, opts...)
		}
		return c.Patch(ctx, obj, p, opts...)
	}
	next.SubResourcePatch = func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
		w.n.Add(1)
		if subPatch != nil {
			return subPatch(ctx, c, sub, obj, p, opts...)
		}
		return c.SubResource(sub).Patch(ctx, obj, p, opts...)
	}
	return next
}

func newRestoreTestClient(t *testing.T, funcs interceptor.Funcs, objects ...client.Object) client.WithWatch {
	t.Helper()
	return fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(objects...).
		WithStatusSubresource(&cairnv1.Restore{}, &cairnv1.Backup{}, &cairnv1.BackupStorageLocation{}).
		WithInterceptorFuncs(funcs).Build()
}

func getRestore(t *testing.T, c client.Reader, namespace, name string) *cairnv1.Restore {
	t.Helper()
	var rs cairnv1.Restore
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: namespace, Name: name}, &rs); err != nil {
		t.Fatalf("getting restore %s/%s: %v", namespace, name, err)
	}
	return &rs
}

// restoreRequest is the request for restore team-a/r, the one restore of most tests here.
var restoreRequest = ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "r"}}
