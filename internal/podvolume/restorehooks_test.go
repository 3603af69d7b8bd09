package podvolume

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/restore"
)

type readableRepositories struct{}

func (readableRepositories) Readable(context.Context, cairnv1.RepositoryReference) error { return nil }

func podItem(t *testing.T, pod *corev1.Pod) *unstructured.Unstructured {
	t.Helper()
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pod)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: obj}
}

func initNames(t *testing.T, item *unstructured.Unstructured) []string {
	t.Helper()
	var pod corev1.Pod
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(item.Object, &pod); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range pod.Spec.InitContainers {
		names = append(names, c.Name)
	}
	return names
}

// A restored pod's init hooks go after the restore helper (they see the restored data) and
// before its own init containers; a pod without copied volumes gets them too.
func TestRestoreActionAddsInitHooksAfterTheHelper(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := cairnv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	a := RestoreAction{Client: c, Reader: c, Namespace: "cairn-system", HelperImage: "cairn/manager:1", Repositories: readableRepositories{}}
	rs := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "cairn-system", Name: "r", UID: "r-uid"}, Spec: cairnv1.RestoreSpec{
		Hooks: &cairnv1.RestoreHooks{Resources: []cairnv1.RestoreResourceHookSpec{{Name: "db", PostHooks: []cairnv1.RestoreResourceHook{
			{Init: &cairnv1.InitRestoreHook{InitContainers: []corev1.Container{{Name: "check-data", Image: "busybox"}}}},
		}}}}}}
	snapshot, _ := json.Marshal(Snapshot{Pod: cairnv1.PodReference{Namespace: "shop", Name: "db-0"}, Volume: "data",
		Repository: cairnv1.RepositoryReference{StorageLocation: "default", Namespace: "shop"}, SnapshotID: "k1"})
	ops := []backup.Operation{{Action: ActionName, OperationID: "x", Phase: backup.OperationCompleted, Result: snapshot}}
	facts := restore.Facts{Restore: rs, BackupLocation: "default", BackupOperations: func(context.Context) ([]backup.Operation, error) { return ops, nil }}
	pod := func(name string, annotations map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Annotations: annotations}, Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "own", Image: "i"}}, Containers: []corev1.Container{{Name: "app", Image: "i"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}}}
	}

	withData := podItem(t, pod("db-0", nil))
	out, err := a.Execute(context.Background(), restore.ActionInput{Item: withData, Original: withData.DeepCopy(), Facts: facts})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(initNames(t, out.Item), ","); got != RestoreHelperContainer+",check-data,own" {
		t.Fatalf("init containers %s: the helper, then the hooks, then the pod's own", got)
	}
	if out.OperationID != "shop/db-0" || len(out.Notes) != 1 || !strings.Contains(out.Notes[0], "check-data") {
		t.Fatalf("output %+v", out)
	}

	noData := podItem(t, pod("web-0", nil))
	out, err = a.Execute(context.Background(), restore.ActionInput{Item: noData, Original: noData.DeepCopy(), Facts: facts})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(initNames(t, out.Item), ","); got != "check-data,own" || out.OperationID != "" {
		t.Fatalf("init containers %s, operation %q: a pod without copied volumes gets its hooks first, and no volume restore", got, out.OperationID)
	}

	// An annotation hook that cannot be read is an error of the item; the pod is restored
	// without it (and without the spec's init hooks it replaces).
	bad := podItem(t, pod("web-1", map[string]string{"init.hook.restore.velero.io/command": "/x"}))
	out, err = a.Execute(context.Background(), restore.ActionInput{Item: bad, Original: bad.DeepCopy(), Facts: facts})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(initNames(t, out.Item), ","); got != "own" || len(out.Errors) != 1 || !strings.Contains(out.Errors[0], "an init hook needs an image") {
		t.Fatalf("init containers %s, errors %v", got, out.Errors)
	}

	// A hook container named like one of the pod's fails the item, naming it.
	clash := podItem(t, pod("web-2", map[string]string{"init.hook.restore.cairn.dev/container-image": "x", "init.hook.restore.cairn.dev/container-name": "app"}))
	if _, err := a.Execute(context.Background(), restore.ActionInput{Item: clash, Original: clash.DeepCopy(), Facts: facts}); err == nil || !strings.Contains(err.Error(), `init hook container "app"`) {
		t.Fatalf("error %v", err)
	}
}
