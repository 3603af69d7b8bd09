package podvolume

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/volumes"
)

// BackupAction copies the data of a backed-up pod's volumes (volumes.Select): for each, it
// creates a PodVolumeBackup in the operator's namespace, which the node agent of the pod's
// node carries out, and follows it as one async operation of the backup. Progress reads the
// PodVolumeBackup's status; Cancel sets its spec.cancel, which the node agent honours within
// seconds. Team backups' volumes are copied too, their PodVolumeBackups living where the team
// cannot touch them.
type BackupAction struct {
	// Client creates and reads PodVolumeBackups, with the manager's rights: the pod itself was
	// read with the requester's.
	Client client.Client
	// Reader reads claims, with the manager's rights, uncached: the manager may get and list
	// claims, not watch them, and need not hold every claim of the cluster. Nil means Client.
	Reader client.Reader
	// Namespace is the operator's namespace.
	Namespace string
	// Repositories prepares each repository (its password, its initialisation) before a node
	// agent copies into it.
	Repositories interface {
		Prepare(ctx context.Context, ref cairnv1.RepositoryReference) error
	}
}

var podsGR = schema.GroupResource{Resource: "pods"}

func (BackupAction) Name() string { return ActionName }

func (BackupAction) AppliesTo() []schema.GroupResource { return []schema.GroupResource{podsGR} }

// Execute starts a copy of each of the pod's selected volumes, and names each volume it does
// not copy, with why, in the backup's log. A pod that is not running is a warning: its volumes
// cannot be read, and waiting for it could last forever.
func (a BackupAction) Execute(ctx context.Context, item *unstructured.Unstructured, b *cairnv1.Backup) (backup.ExecuteResult, error) {
	res := backup.ExecuteResult{Item: item}
	var pod corev1.Pod
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(item.Object, &pod); err != nil {
		return res, err
	}
	defaultAll := b.Spec.DefaultVolumesToFsBackup != nil && *b.Spec.DefaultVolumesToFsBackup
	toCopy, skipped := volumes.Select(&pod, defaultAll)
	_, notRunning := volumes.Runnable(&pod)
	for _, s := range skipped {
		if s.Reason == notRunning {
			res.Warnings = append(res.Warnings, fmt.Sprintf("volume %s is not copied: %s", s.Volume, s.Reason))
			continue
		}
		res.Notes = append(res.Notes, fmt.Sprintf("volume %s is not copied: %s", s.Volume, s.Reason))
	}
	if len(toCopy) == 0 {
		return res, nil
	}
	if b.Status.StorageLocation == "" {
		return res, fmt.Errorf("the backup has no storage location to copy volume data into")
	}
	repository := cairnv1.RepositoryReference{StorageLocation: b.Status.StorageLocation, Namespace: pod.Namespace}
	if err := a.Repositories.Prepare(ctx, repository); err != nil {
		return res, fmt.Errorf("the pod's volumes cannot be copied: %w", err)
	}
	ref := cairnv1.PodReference{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
	for _, v := range toCopy {
		name, created, err := a.create(ctx, b, ref, pod.Spec.NodeName, v, repository)
		if err != nil {
			return res, err
		}
		if !created {
			res.Notes = append(res.Notes, fmt.Sprintf("volume %s is not copied again: claim %s is copied from another pod (PodVolumeBackup %s)", v.Name, v.ClaimName, name))
			continue
		}
		res.OperationIDs = append(res.OperationIDs, name)
	}
	return res, nil
}

// create creates the PodVolumeBackup of one volume; created is false when the backup already
// has it (the same claim, mounted by another pod), whose name is returned.
func (a BackupAction) create(ctx context.Context, b *cairnv1.Backup, pod cairnv1.PodReference, node string, v volumes.Volume, repository cairnv1.RepositoryReference) (string, bool, error) {
	var claimUID types.UID
	if v.Kind == volumes.PersistentVolumeClaim {
		reader := a.Reader
		if reader == nil {
			reader = a.Client
		}
		var pvc corev1.PersistentVolumeClaim
		if err := reader.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: v.ClaimName}, &pvc); err != nil {
			return "", false, fmt.Errorf("reading claim %s of volume %s: %w", v.ClaimName, v.Name, err)
		}
		claimUID = pvc.UID
	}
	pvb := &cairnv1.PodVolumeBackup{
		ObjectMeta: metav1.ObjectMeta{
			Name:      Name(b.Name, b.UID, pod, v.Name, claimUID),
			Namespace: a.Namespace,
			Labels: map[string]string{
				cairnv1.PodVolumeBackupNameLabel: backup.LabelValue(b.Name),
				cairnv1.PodVolumeBackupUIDLabel:  string(b.UID),
				cairnv1.PodVolumeNodeLabel:       backup.LabelValue(node),
				cairnv1.PodVolumeRepositoryLabel: backup.LabelValue(repository.Key()),
			},
			Annotations: map[string]string{BackupAnnotation: b.Namespace + "/" + b.Name},
		},
		Spec: cairnv1.PodVolumeBackupSpec{
			Node: node, Pod: pod, Volume: v.Name,
			PersistentVolumeClaim: v.ClaimName, PersistentVolumeClaimUID: claimUID,
			Repository: repository, Tags: Tags(pod, v.Name, claimUID),
		},
	}
	err := a.Client.Create(ctx, pvb)
	if apierrors.IsAlreadyExists(err) {
		return pvb.Name, false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("creating the PodVolumeBackup of volume %s: %w", v.Name, err)
	}
	return pvb.Name, true, nil
}

// Progress follows the PodVolumeBackup: bytes read of the volume while it runs, its snapshot
// once Completed, its message once Failed or Cancelled.
func (a BackupAction) Progress(ctx context.Context, operationID string, _ *cairnv1.Backup) (backup.OperationProgress, error) {
	var pvb cairnv1.PodVolumeBackup
	err := a.Client.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: operationID}, &pvb)
	if apierrors.IsNotFound(err) {
		return backup.OperationProgress{Err: fmt.Sprintf("PodVolumeBackup %s was deleted", operationID)}, nil
	}
	if err != nil {
		return backup.OperationProgress{}, err
	}
	return progressOf(&pvb)
}

// progressOf is what a PodVolumeBackup says of its copy, as an operation's progress.
func progressOf(pvb *cairnv1.PodVolumeBackup) (backup.OperationProgress, error) {
	p := backup.OperationProgress{
		NCompleted: pvb.Status.BytesDone, NTotal: pvb.Status.BytesTotal, Units: backup.UnitsBytes,
		Description: fmt.Sprintf("volume %s of pod %s/%s", pvb.Spec.Volume, pvb.Spec.Pod.Namespace, pvb.Spec.Pod.Name),
		Started:     pvb.CreationTimestamp.Time,
	}
	if t := pvb.Status.StartTimestamp; t != nil {
		p.Started = t.Time
	}
	switch pvb.Status.Phase {
	case cairnv1.PodVolumePhaseCompleted:
		result, err := json.Marshal(SnapshotOf(pvb))
		if err != nil {
			return p, err
		}
		p.Completed, p.Result, p.NCompleted = true, result, max(pvb.Status.BytesDone, pvb.Status.BytesTotal)
	case cairnv1.PodVolumePhaseFailed, cairnv1.PodVolumePhaseCancelled:
		p.Err = fmt.Sprintf("copying %s: %s", p.Description, messageOr(pvb.Status.Message, string(pvb.Status.Phase)))
	}
	return p, nil
}

func messageOr(message, otherwise string) string {
	if message != "" {
		return message
	}
	return otherwise
}

// Cancel asks the node agent to stop the copy (spec.cancel). The operation ends failed at once;
// the PodVolumeBackup ends Cancelled when the agent has stopped.
func (a BackupAction) Cancel(ctx context.Context, operationID string, _ *cairnv1.Backup) error {
	return CancelCopy(ctx, a.Client, a.Namespace, operationID)
}

// CancelCopy sets spec.cancel on a PodVolumeBackup that has not ended; a missing one is not an
// error.
func CancelCopy(ctx context.Context, c client.Client, namespace, name string) error {
	var pvb cairnv1.PodVolumeBackup
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &pvb); err != nil {
		return client.IgnoreNotFound(err)
	}
	if pvb.Spec.Cancel || pvb.Status.Phase.IsTerminal() {
		return nil
	}
	patch := client.MergeFrom(pvb.DeepCopy())
	pvb.Spec.Cancel = true
	return client.IgnoreNotFound(c.Patch(ctx, &pvb, patch))
}
