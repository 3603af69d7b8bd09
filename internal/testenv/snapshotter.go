package testenv

import (
	"context"
	"strings"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestDriver is the CSI driver name the simulated snapshotter answers for.
const TestDriver = "test.csi.cairn.dev"

// SimulateSnapshotter plays a CSI snapshotter until ctx ends: for each new VolumeSnapshot of a
// PVC it waits delay, then creates a VolumeSnapshotContent with the snapshot's handle in its
// status (as the CSI sidecar does) and sets readyToUse; a snapshot of a PVC whose name contains
// "fail" gets an error instead, one of a "slow" PVC never gets ready, and one of a "wait" PVC
// takes ten times delay. A pre-provisioned VolumeSnapshot (source.volumeSnapshotContentName,
// as a restore makes) is bound to its content once that exists, after delay.
func SimulateSnapshotter(ctx context.Context, c client.Client, delay time.Duration) {
	seen := map[string]time.Time{}
	for ctx.Err() == nil {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(snapshotv1.SchemeGroupVersion.WithKind("VolumeSnapshotList"))
		if err := c.List(ctx, list); err == nil {
			for _, u := range list.Items {
				var vs snapshotv1.VolumeSnapshot
				if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &vs) != nil || vs.Status != nil {
					continue
				}
				key := vs.Namespace + "/" + vs.Name
				if _, ok := seen[key]; !ok {
					seen[key] = time.Now()
				}
				if content := ptr.Deref(vs.Spec.Source.VolumeSnapshotContentName, ""); content != "" {
					if time.Since(seen[key]) >= delay && c.Get(ctx, client.ObjectKey{Name: content}, contentObject()) == nil {
						u.Object["status"] = map[string]any{"readyToUse": true, "boundVolumeSnapshotContentName": content}
						_ = c.Status().Update(ctx, &u)
					}
					continue
				}
				pvc := ptr.Deref(vs.Spec.Source.PersistentVolumeClaimName, "")
				wait := delay
				if strings.Contains(pvc, "wait") {
					wait = 10 * delay
				}
				if strings.Contains(pvc, "slow") || time.Since(seen[key]) < wait {
					continue
				}
				status := map[string]any{"readyToUse": true, "boundVolumeSnapshotContentName": "content-" + vs.Name}
				if strings.Contains(pvc, "fail") {
					status = map[string]any{"readyToUse": false, "error": map[string]any{"message": "the driver refused the snapshot"}}
				} else {
					content := &unstructured.Unstructured{Object: map[string]any{
						"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
						"metadata": map[string]any{"name": "content-" + vs.Name},
						"spec": map[string]any{
							"driver": TestDriver, "deletionPolicy": "Delete",
							"source":            map[string]any{"volumeHandle": "handle-" + pvc},
							"volumeSnapshotRef": map[string]any{"name": vs.Name, "namespace": vs.Namespace},
						},
					}}
					if c.Create(ctx, content) == nil {
						content.Object["status"] = map[string]any{"readyToUse": true, "snapshotHandle": "snapshot-" + vs.Namespace + "-" + vs.Name}
						_ = c.Status().Update(ctx, content)
					}
				}
				u.Object["status"] = status
				_ = c.Status().Update(ctx, &u)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// contentObject is an empty VolumeSnapshotContent to read one into.
func contentObject() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(snapshotv1.SchemeGroupVersion.WithKind("VolumeSnapshotContent"))
	return u
}
