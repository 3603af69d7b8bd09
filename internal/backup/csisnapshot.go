package backup

import (
	"context"
	"fmt"
	"strings"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// Labels a CSI snapshot carries back to its backup.
const (
	BackupNameLabel = "cairn.dev/backup-name"
	BackupUIDLabel  = "cairn.dev/backup-uid"
	// DefaultSnapshotClassAnnotation marks the default VolumeSnapshotClass of a driver.
	DefaultSnapshotClassAnnotation = "snapshot.storage.kubernetes.io/is-default-class"
)

var (
	volumeSnapshotsGVR       = snapshotv1.SchemeGroupVersion.WithResource("volumesnapshots")
	volumeSnapshotClassesGVR = snapshotv1.SchemeGroupVersion.WithResource("volumesnapshotclasses")
	storageClassesGVR        = storagev1.SchemeGroupVersion.WithResource("storageclasses")
	volumeSnapshotsGR        = volumeSnapshotsGVR.GroupResource()
	volumeSnapshotContentsGR = snapshotv1.SchemeGroupVersion.WithResource("volumesnapshotcontents").GroupResource()
)

// CSISnapshotAction snapshots the volume of each PVC whose StorageClass's provisioner has a
// default VolumeSnapshotClass, unless the backup says snapshotVolumes: false. The snapshot is an
// async operation: Progress follows the VolumeSnapshot's readyToUse and error, Cancel deletes
// it, and once it is ready the VolumeSnapshot and its VolumeSnapshotContent join the backup.
type CSISnapshotAction struct {
	Dynamic dynamic.Interface
}

func (CSISnapshotAction) Name() string { return "cairn.dev/csi-snapshot" }

func (CSISnapshotAction) AppliesTo() []schema.GroupResource { return []schema.GroupResource{pvcsGR} }

// Execute creates a VolumeSnapshot of the PVC when a snapshot class applies.
func (a CSISnapshotAction) Execute(ctx context.Context, item *unstructured.Unstructured, b *cairnv1.Backup) (ExecuteResult, error) {
	res := ExecuteResult{Item: item}
	if b.Spec.SnapshotVolumes != nil && !*b.Spec.SnapshotVolumes {
		return res, nil
	}
	var pvc corev1.PersistentVolumeClaim
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(item.Object, &pvc); err != nil {
		return res, err
	}
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName == "" || pvc.Spec.VolumeName == "" {
		return res, nil // not bound, or no class to find a driver by
	}
	class, err := a.snapshotClassFor(ctx, *pvc.Spec.StorageClassName)
	if err != nil || class == "" {
		return res, err
	}
	vs := &snapshotv1.VolumeSnapshot{
		TypeMeta: metav1.TypeMeta{APIVersion: snapshotv1.SchemeGroupVersion.String(), Kind: "VolumeSnapshot"},
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: pvc.Name + "-",
			Namespace:    pvc.Namespace,
			Labels:       map[string]string{BackupNameLabel: LabelValue(b.Name), BackupUIDLabel: string(b.UID)},
		},
		Spec: snapshotv1.VolumeSnapshotSpec{
			Source:                  snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: &pvc.Name},
			VolumeSnapshotClassName: &class,
		},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(vs)
	if err != nil {
		return res, err
	}
	created, err := a.Dynamic.Resource(volumeSnapshotsGVR).Namespace(pvc.Namespace).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
	if err != nil {
		return res, fmt.Errorf("creating a VolumeSnapshot of PVC %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	res.OperationIDs = []string{pvc.Namespace + "/" + created.GetName()}
	res.PostOperationItems = []ItemID{{GroupResource: volumeSnapshotsGR, Namespace: pvc.Namespace, Name: created.GetName()}}
	return res, nil
}

// snapshotClassFor returns the default VolumeSnapshotClass of the StorageClass's provisioner, or "".
func (a CSISnapshotAction) snapshotClassFor(ctx context.Context, storageClass string) (string, error) {
	sc, err := a.Dynamic.Resource(storageClassesGVR).Get(ctx, storageClass, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	provisioner, _, _ := unstructured.NestedString(sc.Object, "provisioner")
	classes, err := a.Dynamic.Resource(volumeSnapshotClassesGVR).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil // the snapshot CRDs are not installed
	}
	if err != nil {
		return "", err
	}
	for _, c := range classes.Items {
		driver, _, _ := unstructured.NestedString(c.Object, "driver")
		if driver == provisioner && c.GetAnnotations()[DefaultSnapshotClassAnnotation] == "true" {
			return c.GetName(), nil
		}
	}
	return "", nil
}

// Progress follows the VolumeSnapshot: ready, failed, or still being taken.
func (a CSISnapshotAction) Progress(ctx context.Context, operationID string, _ *cairnv1.Backup) (OperationProgress, error) {
	ns, name, ok := strings.Cut(operationID, "/")
	if !ok {
		return OperationProgress{}, fmt.Errorf("malformed operation ID %q", operationID)
	}
	obj, err := a.Dynamic.Resource(volumeSnapshotsGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return OperationProgress{Err: fmt.Sprintf("VolumeSnapshot %s was deleted", operationID)}, nil
	}
	if err != nil {
		return OperationProgress{}, err
	}
	var vs snapshotv1.VolumeSnapshot
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &vs); err != nil {
		return OperationProgress{}, err
	}
	p := OperationProgress{Description: "VolumeSnapshot " + operationID, Started: vs.CreationTimestamp.Time}
	if vs.Status == nil {
		return p, nil
	}
	if vs.Status.Error != nil && vs.Status.Error.Message != nil {
		p.Err = *vs.Status.Error.Message
		return p, nil
	}
	if vs.Status.ReadyToUse != nil && *vs.Status.ReadyToUse {
		p.Completed = true
		if c := vs.Status.BoundVolumeSnapshotContentName; c != nil {
			p.PostOperationItems = []ItemID{{GroupResource: volumeSnapshotContentsGR, Name: *c}}
		}
	}
	return p, nil
}

// Cancel deletes the VolumeSnapshot.
func (a CSISnapshotAction) Cancel(ctx context.Context, operationID string, _ *cairnv1.Backup) error {
	ns, name, _ := strings.Cut(operationID, "/")
	err := a.Dynamic.Resource(volumeSnapshotsGVR).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// DeleteSnapshots deletes every VolumeSnapshot a backup created (labelled with its UID), in any
// namespace, and returns how many it deleted. Deleting a VolumeSnapshot lets the snapshotter
// remove its content as the content's deletion policy says. Without the snapshot CRDs there is
// nothing to delete.
func DeleteSnapshots(ctx context.Context, dyn dynamic.Interface, uid types.UID) (int, error) {
	list, err := dyn.Resource(volumeSnapshotsGVR).List(ctx, metav1.ListOptions{LabelSelector: BackupUIDLabel + "=" + string(uid)})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("listing the backup's VolumeSnapshots: %w", err)
	}
	deleted := 0
	for _, vs := range list.Items {
		err := dyn.Resource(volumeSnapshotsGVR).Namespace(vs.GetNamespace()).Delete(ctx, vs.GetName(), metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return deleted, fmt.Errorf("deleting VolumeSnapshot %s/%s: %w", vs.GetNamespace(), vs.GetName(), err)
		}
		deleted++
	}
	return deleted, nil
}
