package restore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
)

var (
	volumeSnapshotsGVR        = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}
	volumeSnapshotContentsGVR = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents"}
	pvcsGVR                   = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}
)

// CSIRestoreAction restores a claim whose backup holds a CSI VolumeSnapshot of it from that
// snapshot: it creates a pre-provisioned VolumeSnapshotContent (deletionPolicy Retain, the
// backed-up snapshot handle, so that nothing the restore makes can delete the snapshot) and a
// VolumeSnapshot bound to it in the claim's target namespace, and points the claim's
// dataSource at that VolumeSnapshot. The claim's binding is an async operation: Progress
// completes it when the claim is Bound, and itemOperationTimeout fails it; Cancel deletes the
// VolumeSnapshot and VolumeSnapshotContent it made (the claim stays, as every restored object
// does). restorePVs: false leaves the claim to be provisioned empty.
type CSIRestoreAction struct {
	Dynamic dynamic.Interface
}

// Name identifies the action.
func (CSIRestoreAction) Name() string { return "cairn.dev/csi-restore" }

// AppliesTo is persistentvolumeclaims.
func (CSIRestoreAction) AppliesTo() []schema.GroupResource { return []schema.GroupResource{pvcsGR} }

// SnapshotNames are the names of the VolumeSnapshot (in the claim's target namespace) and of
// the VolumeSnapshotContent a restore makes for one claim: derived from the restore and the
// claim, so that a retried item finds what it made, and within Kubernetes' name limits.
func SnapshotNames(rs *cairnv1.Restore, namespace, claim string) (vs, vsc string) {
	sum := sha256.Sum256([]byte(rs.Namespace + "/" + rs.Name + "/" + string(rs.UID) + "/" + namespace + "/" + claim))
	hash := hex.EncodeToString(sum[:])[:10]
	vs = claim
	if len(vs) > 200 {
		vs = vs[:200]
	}
	vs = strings.TrimRight(vs, "-.") + "-restore-" + hash
	return vs, "cairn-restore-" + hash
}

// Execute makes the snapshot objects and points the claim at them, when the backup holds a
// snapshot of it that is ready (its content has a snapshot handle).
func (a CSIRestoreAction) Execute(ctx context.Context, in ActionInput) (ActionOutput, error) {
	out := ActionOutput{Item: in.Item}
	if !in.Options.RestorePVs || in.Facts.SnapshotOf == nil || in.Facts.Restore == nil || in.Original == nil || in.Item == nil {
		return out, nil
	}
	vs, vsc := in.Facts.SnapshotOf(in.Original.GetNamespace(), in.Original.GetName())
	if vs == nil || vsc == nil {
		return out, nil
	}
	handle, _, _ := unstructured.NestedString(vsc.Object, "status", "snapshotHandle")
	driver, _, _ := unstructured.NestedString(vsc.Object, "spec", "driver")
	if handle == "" || driver == "" {
		return out, fmt.Errorf("the backup's VolumeSnapshotContent %s of this claim has no snapshot handle or driver", vsc.GetName())
	}
	// The handle comes from the archive: the VolumeSnapshotContent below is cluster-scoped and
	// made with the operator's rights, so the restore must be allowed that handle.
	if in.Facts.SnapshotAllowed != nil {
		if err := in.Facts.SnapshotAllowed(ctx, handle); err != nil {
			return out, err
		}
	}
	namespace, claim := in.Item.GetNamespace(), in.Item.GetName()
	vsName, vscName := SnapshotNames(in.Facts.Restore, namespace, claim)
	labels := map[string]any{
		cairnv1.BackupNameLabel:  backup.LabelValue(in.Options.BackupName),
		cairnv1.RestoreNameLabel: backup.LabelValue(in.Options.RestoreName),
	}
	contentSpec := map[string]any{
		"deletionPolicy":    "Retain",
		"driver":            driver,
		"source":            map[string]any{"snapshotHandle": handle},
		"volumeSnapshotRef": map[string]any{"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot", "namespace": namespace, "name": vsName},
	}
	if class, _, _ := unstructured.NestedString(vsc.Object, "spec", "volumeSnapshotClassName"); class != "" {
		contentSpec["volumeSnapshotClassName"] = class
	}
	content := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
		"metadata": map[string]any{"name": vscName, "labels": labels},
		"spec":     contentSpec,
	}}
	snapshot := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
		"metadata": map[string]any{"name": vsName, "namespace": namespace, "labels": labels},
		"spec":     map[string]any{"source": map[string]any{"volumeSnapshotContentName": vscName}},
	}}
	if _, err := a.Dynamic.Resource(volumeSnapshotContentsGVR).Create(ctx, content, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return out, fmt.Errorf("creating VolumeSnapshotContent %s for the snapshot %s: %w", vscName, handle, err)
	}
	if _, err := a.Dynamic.Resource(volumeSnapshotsGVR).Namespace(namespace).Create(ctx, snapshot, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return out, fmt.Errorf("creating VolumeSnapshot %s/%s: %w", namespace, vsName, err)
	}
	item := in.Item.DeepCopy()
	source := map[string]any{"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": vsName}
	if err := unstructured.SetNestedMap(item.Object, source, "spec", "dataSource"); err != nil {
		return out, fmt.Errorf("setting the claim's dataSource: %w", err)
	}
	_ = unstructured.SetNestedMap(item.Object, map[string]any{"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": vsName}, "spec", "dataSourceRef")
	// The claim gets a new volume, made from the snapshot.
	unstructured.RemoveNestedField(item.Object, "spec", "volumeName")
	out.Item = item
	out.OperationID = namespace + "/" + claim
	return out, nil
}

// Progress completes when the claim is Bound, and fails when it is Lost or gone.
func (a CSIRestoreAction) Progress(ctx context.Context, operationID string, _ *cairnv1.Restore) (backup.OperationProgress, error) {
	namespace, claim, ok := strings.Cut(operationID, "/")
	if !ok {
		return backup.OperationProgress{}, fmt.Errorf("malformed operation ID %q", operationID)
	}
	pvc, err := a.Dynamic.Resource(pvcsGVR).Namespace(namespace).Get(ctx, claim, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return backup.OperationProgress{Err: fmt.Sprintf("claim %s was deleted before it was bound", operationID)}, nil
	}
	if err != nil {
		return backup.OperationProgress{}, err
	}
	p := backup.OperationProgress{Description: "claim " + operationID + " restored from a CSI snapshot"}
	switch phase, _, _ := unstructured.NestedString(pvc.Object, "status", "phase"); phase {
	case "Bound":
		p.Completed = true
	case "Lost":
		p.Err = fmt.Sprintf("claim %s lost its volume", operationID)
	}
	return p, nil
}

// Cancel deletes the VolumeSnapshot and VolumeSnapshotContent the action made for the claim
// (Retain: the snapshot itself stays in the storage system).
func (a CSIRestoreAction) Cancel(ctx context.Context, operationID string, rs *cairnv1.Restore) error {
	namespace, claim, ok := strings.Cut(operationID, "/")
	if !ok {
		return fmt.Errorf("malformed operation ID %q", operationID)
	}
	vsName, vscName := SnapshotNames(rs, namespace, claim)
	if err := a.Dynamic.Resource(volumeSnapshotsGVR).Namespace(namespace).Delete(ctx, vsName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting VolumeSnapshot %s/%s: %w", namespace, vsName, err)
	}
	if err := a.Dynamic.Resource(volumeSnapshotContentsGVR).Delete(ctx, vscName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting VolumeSnapshotContent %s: %w", vscName, err)
	}
	return nil
}
