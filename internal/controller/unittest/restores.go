// Package unittest holds the fixtures that the fake-client tests of several reconciler
// packages share (the queue's, the restore reconciler's, the restore finalizer's, the sync's):
// objects as a test starts them, a fake client that takes them, what a test reads back, the
// events recorded. It imports no reconciler package, so that any of them may use it.
package unittest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// Epoch is when the restore fixtures are created, or minutes after it.
var Epoch = time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)

// Restore is restore namespace/name of backup b, created minutes after Epoch, in phase.
func Restore(namespace, name string, minutes int, phase cairnv1.RestorePhase) *cairnv1.Restore {
	return &cairnv1.Restore{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: types.UID("uid-" + namespace + "-" + name), Generation: 1,
			CreationTimestamp: metav1.NewTime(Epoch.Add(time.Duration(minutes) * time.Minute))},
		Spec:   cairnv1.RestoreSpec{BackupName: "b"},
		Status: cairnv1.RestoreStatus{Phase: phase},
	}
}

// QueuedRestore is a Queued restore team-a/name at position.
func QueuedRestore(name string, minutes int, position int32) *cairnv1.Restore {
	rs := Restore("team-a", name, minutes, cairnv1.RestorePhaseQueued)
	rs.Status.QueuePosition = position
	rs.Finalizers = []string{cairnv1.RestoreDataFinalizer}
	return rs
}

// DefaultLocation is the default location, a filesystem one at dir, Available.
func DefaultLocation(dir string) *cairnv1.BackupStorageLocation {
	return &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "cairn-system"},
		Spec:   cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Default: true, Config: map[string]string{cairnv1.ConfigKeyPath: dir}},
		Status: cairnv1.BackupStorageLocationStatus{Phase: cairnv1.StorageLocationPhaseAvailable}}
}

// CompletedBackup is a Completed backup namespace/name on location default.
func CompletedBackup(namespace, name string) *cairnv1.Backup {
	return &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, CreationTimestamp: metav1.NewTime(Epoch)},
		Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseCompleted, StorageLocation: "default"}}
}

// WriteCounter counts the writes a fake client was asked to make.
type WriteCounter struct{ N atomic.Int32 }

// Funcs counts each write, then makes it as next would.
func (w *WriteCounter) Funcs(next interceptor.Funcs) interceptor.Funcs {
	update, patch, subPatch := next.Update, next.Patch, next.SubResourcePatch
	next.Update = func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
		w.N.Add(1)
		if update != nil {
			return update(ctx, c, obj, opts...)
		}
		return c.Update(ctx, obj, opts...)
	}
	next.Patch = func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
		w.N.Add(1)
		if patch != nil {
			return patch(ctx, c, obj, p, opts...)
		}
		return c.Patch(ctx, obj, p, opts...)
	}
	next.SubResourcePatch = func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
		w.N.Add(1)
		if subPatch != nil {
			return subPatch(ctx, c, sub, obj, p, opts...)
		}
		return c.SubResource(sub).Patch(ctx, obj, p, opts...)
	}
	return next
}

// NewClient is a fake client holding objects, with the status subresource of Cairn's kinds and
// the core types (the queue lists the cluster's namespaces).
func NewClient(t *testing.T, funcs interceptor.Funcs, objects ...client.Object) client.WithWatch {
	t.Helper()
	return fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(objects...).
		WithStatusSubresource(&cairnv1.Restore{}, &cairnv1.Backup{}, &cairnv1.BackupStorageLocation{}, &cairnv1.PodVolumeBackup{}).
		WithInterceptorFuncs(funcs).Build()
}

// GetRestore reads restore namespace/name from c.
func GetRestore(t *testing.T, c client.Reader, namespace, name string) *cairnv1.Restore {
	t.Helper()
	var rs cairnv1.Restore
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: namespace, Name: name}, &rs); err != nil {
		t.Fatalf("getting restore %s/%s: %v", namespace, name, err)
	}
	return &rs
}

// APIUnavailable is the error of an API server that is away for a moment.
func APIUnavailable() error {
	return apierrors.NewServiceUnavailable("the API server is restarting")
}
