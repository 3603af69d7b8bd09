package podvolume

import (
	"context"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// restoredPod is a pod of team-a named app2, of uid, on node ("" unscheduled), controlled by
// the owner of ownerUID ("" none), its first init container the restore helper when helper.
func restoredPod(uid types.UID, node string, ownerUID types.UID, helper bool) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "app2", UID: uid}, Spec: corev1.PodSpec{NodeName: node}}
	if ownerUID != "" {
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "app-7d4f", UID: ownerUID, Controller: ptr.To(true)}}
	}
	if helper {
		pod.Spec.InitContainers = []corev1.Container{{Name: RestoreHelperContainer}}
	}
	return pod
}

func TestDecideBinding(t *testing.T) {
	rs := &cairnv1.ControllerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "app-7d4f", UID: "rs-1"}
	const replaced = "pod team-a/app2 was replaced after the restore created it"
	for _, tc := range []struct {
		name     string
		recorded podRecord
		live     *corev1.Pod
		want     binding
		refused  string
	}{
		{name: "the pod created, not scheduled yet: bound to it, no node",
			recorded: podRecord{UID: "p-1"}, live: restoredPod("p-1", "", "", true),
			want: binding{UID: "p-1"}},
		{name: "the pod created, scheduled: its node",
			recorded: podRecord{UID: "p-1"}, live: restoredPod("p-1", "node-a", "", true),
			want: binding{UID: "p-1", Node: "node-a"}},
		{name: "the pod created, adopted by its ReplicaSet since: the controller is recorded",
			recorded: podRecord{UID: "p-1"}, live: restoredPod("p-1", "", "rs-1", true),
			want: binding{UID: "p-1", Controller: rs}},
		{name: "the pod created, re-adopted by another owner: the controller recorded stays",
			recorded: podRecord{UID: "p-1", Controller: rs}, live: restoredPod("p-1", "node-a", "rs-2", true),
			want: binding{UID: "p-1", Controller: rs, Node: "node-a"}},
		{name: "a hand-made pod of the same name with a helper-named init container: refused",
			recorded: podRecord{UID: "p-1"}, live: restoredPod("p-evil", "node-a", "", true), refused: replaced},
		{name: "a hand-made pod, though the created one had a controller: refused",
			recorded: podRecord{UID: "p-1", Controller: rs}, live: restoredPod("p-evil", "node-a", "", true), refused: replaced},
		{name: "a pod of another controller, of the same name: refused",
			recorded: podRecord{UID: "p-1", Controller: rs}, live: restoredPod("p-2", "node-a", "rs-other", true), refused: replaced},
		{name: "a pod of a controller, the created pod had none: refused",
			recorded: podRecord{UID: "p-1"}, live: restoredPod("p-2", "node-a", "rs-1", true), refused: replaced},
		{name: "the controller's replacement, waiting for its data: moved to it",
			recorded: podRecord{UID: "p-1", Controller: rs}, live: restoredPod("p-2", "node-b", "rs-1", true),
			want: binding{UID: "p-2", Controller: rs, Node: "node-b"}},
		{name: "the controller's replacement without the helper: refused, it would not wait",
			recorded: podRecord{UID: "p-1", Controller: rs}, live: restoredPod("p-2", "node-b", "rs-1", false),
			refused: "pod team-a/app2 was replaced by its controller ReplicaSet app-7d4f with a pod that has no cairn-restore-wait init container"},
		{name: "the pod created, its helper gone: refused",
			recorded: podRecord{UID: "p-1"}, live: restoredPod("p-1", "node-a", "", false),
			refused: "pod team-a/app2 has no cairn-restore-wait init container"},
		{name: "the pod is gone",
			recorded: podRecord{UID: "p-1"}, refused: "pod team-a/app2 is gone before its volumes were restored"},
		{name: "no UID recorded (an older Cairn, or a pod that existed): refused, whatever the pod",
			recorded: podRecord{}, live: restoredPod("p-1", "node-a", "", true),
			refused: "the restore recorded no UID of a pod team-a/app2 it created"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decideBinding("team-a/app2", tc.recorded, tc.live)
			if tc.refused != "" {
				if !strings.Contains(got.Refused, tc.refused) || got.UID != "" || got.Node != "" {
					t.Fatalf("decideBinding = %+v, want refused %q", got, tc.refused)
				}
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("decideBinding = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// The restore records the UID its create of the pod answered on the pod's PodVolumeRestores,
// and Progress binds them to that pod's node only: a pod put in its place by hand fails the
// operation at once, naming the pod, and nothing is bound.
func TestCreatedThenProgress(t *testing.T) {
	ctx := context.Background()
	rs := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "cairn-system", Name: "r1", UID: "r-uid"}}
	setup := func(t *testing.T) (client.Client, RestoreAction) {
		c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).Build()
		a := RestoreAction{Client: c, Reader: c, Namespace: "cairn-system"}
		for _, v := range []string{"data", "wal"} {
			if err := a.create(ctx, rs, "team-a", "app2", nil, Snapshot{Volume: v, SnapshotID: "s-" + v}); err != nil {
				t.Fatal(err)
			}
		}
		return c, a
	}
	pvrs := func(t *testing.T, a RestoreAction) []cairnv1.PodVolumeRestore {
		t.Helper()
		list, _, _, err := a.podRestores(ctx, "team-a/app2", rs)
		if err != nil || len(list) != 2 {
			t.Fatalf("podRestores: %d, %v", len(list), err)
		}
		return list
	}
	created := func(pod *corev1.Pod) *unstructured.Unstructured {
		obj, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(pod)
		return &unstructured.Unstructured{Object: obj}
	}

	t.Run("bound to the pod created once it is scheduled", func(t *testing.T) {
		c, a := setup(t)
		pod := restoredPod("p-1", "", "", true)
		if err := a.Created(ctx, "team-a/app2", rs, created(pod)); err != nil {
			t.Fatal(err)
		}
		for _, p := range pvrs(t, a) {
			if p.Spec.Pod.UID != "p-1" || p.Spec.Node != "" {
				t.Fatalf("after Created: %+v", p.Spec)
			}
		}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		p, err := a.Progress(ctx, "team-a/app2", rs)
		if err != nil || p.Err != "" || !strings.Contains(p.Description, "waiting for the pod to be scheduled") {
			t.Fatalf("Progress = %+v, %v", p, err)
		}
		pod.Spec.NodeName = "node-a"
		if err := c.Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
		if p, err := a.Progress(ctx, "team-a/app2", rs); err != nil || p.Err != "" {
			t.Fatalf("Progress = %+v, %v", p, err)
		}
		for _, p := range pvrs(t, a) {
			if p.Spec.Pod.UID != "p-1" || p.Spec.Node != "node-a" || p.Labels[cairnv1.PodVolumeNodeLabel] != "node-a" {
				t.Fatalf("after binding: %+v %v", p.Spec, p.Labels)
			}
		}
	})

	t.Run("a pod made by hand in place of the one created: the operation fails, naming it, nothing is bound", func(t *testing.T) {
		c, a := setup(t)
		if err := a.Created(ctx, "team-a/app2", rs, created(restoredPod("p-1", "", "", true))); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, restoredPod("p-evil", "node-a", "", true)); err != nil {
			t.Fatal(err)
		}
		p, err := a.Progress(ctx, "team-a/app2", rs)
		if err != nil || !strings.Contains(p.Err, "pod team-a/app2 was replaced after the restore created it") {
			t.Fatalf("Progress = %+v, %v", p, err)
		}
		for _, p := range pvrs(t, a) {
			if p.Spec.Node != "" || p.Spec.Pod.UID != "p-1" {
				t.Fatalf("a replaced pod's volume was bound: %+v", p.Spec)
			}
		}
	})

	t.Run("never Created (an older Cairn's record): refused, not bound by name", func(t *testing.T) {
		c, a := setup(t)
		if err := c.Create(ctx, restoredPod("p-1", "node-a", "", true)); err != nil {
			t.Fatal(err)
		}
		p, err := a.Progress(ctx, "team-a/app2", rs)
		if err != nil || !strings.Contains(p.Err, "the restore recorded no UID of a pod team-a/app2 it created") {
			t.Fatalf("Progress = %+v, %v", p, err)
		}
		for _, p := range pvrs(t, a) {
			if p.Spec.Node != "" {
				t.Fatalf("bound by name: %+v", p.Spec)
			}
		}
	})

	t.Run("adopted by its ReplicaSet, then replaced by it: moved to the replacement", func(t *testing.T) {
		c, a := setup(t)
		pod := restoredPod("p-1", "", "", true)
		if err := a.Created(ctx, "team-a/app2", rs, created(pod)); err != nil {
			t.Fatal(err)
		}
		pod.OwnerReferences = restoredPod("", "", "rs-1", true).OwnerReferences
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		if p, err := a.Progress(ctx, "team-a/app2", rs); err != nil || p.Err != "" {
			t.Fatalf("Progress = %+v, %v", p, err)
		}
		if err := c.Delete(ctx, pod); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, restoredPod("p-2", "node-b", "rs-1", true)); err != nil {
			t.Fatal(err)
		}
		if p, err := a.Progress(ctx, "team-a/app2", rs); err != nil || p.Err != "" {
			t.Fatalf("Progress = %+v, %v", p, err)
		}
		for _, p := range pvrs(t, a) {
			if p.Spec.Pod.UID != "p-2" || p.Spec.Node != "node-b" || p.Spec.PodController == nil || p.Spec.PodController.UID != "rs-1" {
				t.Fatalf("after the replacement: %+v", p.Spec)
			}
		}
	})

	t.Run("a create that answered another pod is an error", func(t *testing.T) {
		_, a := setup(t)
		other := restoredPod("p-1", "", "", true)
		other.Name = "app3"
		if err := a.Created(ctx, "team-a/app2", rs, created(other)); err == nil {
			t.Fatal("Created accepted another pod")
		}
	})
}

// laggingCache is a cache that has not seen the PodVolumeRestores just made: it lists none.
type laggingCache struct{ client.Client }

func (laggingCache) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// Created runs right after Execute made the pod's PodVolumeRestores: it reads them uncached,
// so a cache that has not caught up does not leave the pod unbound (or its volumes "gone").
func TestCreatedReadsPastTheCache(t *testing.T) {
	ctx := context.Background()
	rs := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "cairn-system", Name: "r1", UID: "r-uid"}}
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).Build()
	a := RestoreAction{Client: laggingCache{c}, Reader: c, Namespace: "cairn-system"}
	if err := a.create(ctx, rs, "team-a", "app2", nil, Snapshot{Volume: "data", SnapshotID: "s-data"}); err != nil {
		t.Fatal(err)
	}
	obj, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(restoredPod("p-1", "", "", true))
	if err := a.Created(ctx, "team-a/app2", rs, &unstructured.Unstructured{Object: obj}); err != nil {
		t.Fatalf("Created with a lagging cache: %v", err)
	}
	var list cairnv1.PodVolumeRestoreList
	if err := c.List(ctx, &list); err != nil || len(list.Items) != 1 || list.Items[0].Spec.Pod.UID != "p-1" {
		t.Fatalf("after Created: %+v, %v", list.Items, err)
	}
}
