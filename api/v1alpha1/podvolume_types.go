package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// PodVolumePhase is where a copy of one pod volume's data is (DESIGN.md section 16). The node
// agent of spec.node owns every non-terminal phase.
//
// +kubebuilder:validation:Enum=New;InProgress;Completed;Failed;Cancelled
type PodVolumePhase string

const (
	// PodVolumePhaseNew is a copy not started yet ("" means the same).
	PodVolumePhaseNew PodVolumePhase = "New"
	// PodVolumePhaseInProgress is a copy the node agent is running.
	PodVolumePhaseInProgress PodVolumePhase = "InProgress"
	// PodVolumePhaseCompleted is terminal: the data was copied.
	PodVolumePhaseCompleted PodVolumePhase = "Completed"
	// PodVolumePhaseFailed is terminal: status.message says why.
	PodVolumePhaseFailed PodVolumePhase = "Failed"
	// PodVolumePhaseCancelled is terminal: spec.cancel stopped the copy; nothing was saved.
	PodVolumePhaseCancelled PodVolumePhase = "Cancelled"
)

// AllPodVolumePhases lists every phase, in the order of the owner table.
var AllPodVolumePhases = []PodVolumePhase{
	PodVolumePhaseNew, PodVolumePhaseInProgress,
	PodVolumePhaseCompleted, PodVolumePhaseFailed, PodVolumePhaseCancelled,
}

// IsTerminal reports whether the copy is over.
func (p PodVolumePhase) IsTerminal() bool {
	switch p {
	case PodVolumePhaseCompleted, PodVolumePhaseFailed, PodVolumePhaseCancelled:
		return true
	}
	return false
}

// Labels and annotations of PodVolumeBackups.
const (
	// PodVolumeBackupNameLabel and PodVolumeBackupUIDLabel carry a PodVolumeBackup back to its
	// backup (the value of the name label is shortened when the name is too long for one).
	PodVolumeBackupNameLabel = "cairn.dev/backup-name"
	PodVolumeBackupUIDLabel  = "cairn.dev/backup-uid"
	// PodVolumeNodeLabel is the node a PodVolumeBackup runs on, so each node agent watches
	// only its own.
	PodVolumeNodeLabel = "cairn.dev/node"
	// PodVolumeRestoreNameLabel and PodVolumeRestoreUIDLabel carry a PodVolumeRestore back
	// to its restore.
	PodVolumeRestoreNameLabel = "cairn.dev/restore-name"
	PodVolumeRestoreUIDLabel  = "cairn.dev/restore-uid"
	// PodVolumeRepositoryLabel names the repository ("<location>_<namespace>"), so maintenance
	// can tell whether a copy into it is running.
	PodVolumeRepositoryLabel = "cairn.dev/repository"
)

// PodReference names a pod and the incarnation of it.
type PodReference struct {
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="the pod's namespace is immutable"
	Namespace string `json:"namespace"`
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="the pod's name is immutable"
	Name string `json:"name"`
	// UID is the pod's: of the pod copied for a PodVolumeBackup; for a PodVolumeRestore, of
	// the pod the restore created, "" until it is created (PodVolumeRestoreSpec says when it
	// may change).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	UID types.UID `json:"uid"`
}

// ControllerReference names a pod's controller, as the pod's controller ownerReference does.
type ControllerReference struct {
	// APIVersion, Kind and Name say which controller it is, for people.
	// +kubebuilder:validation:MaxLength=317
	APIVersion string `json:"apiVersion"`
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// UID is the controller's UID: what a replacement pod's controller ownerReference must
	// name.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	UID types.UID `json:"uid"`
}

// RepositoryReference names a volume data repository: the one of a storage location (in the
// operator's namespace) for the volumes of one source namespace.
type RepositoryReference struct {
	// StorageLocation is the BackupStorageLocation holding the repository.
	// +kubebuilder:validation:MaxLength=253
	StorageLocation string `json:"storageLocation"`
	// Namespace is the namespace whose volumes the repository holds, under
	// <prefix>/kopia/<namespace>/.
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
}

// Key is "<location>_<namespace>": unique, since neither name may hold '_', and usable as a
// label value and a Secret key.
func (r RepositoryReference) Key() string { return r.StorageLocation + "_" + r.Namespace }

// PodVolumeBackupSpec says which volume to copy where. It is immutable except cancel.
//
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.cancel) || !oldSelf.cancel || (has(self.cancel) && self.cancel)",message="spec.cancel cannot be set back to false"
// +kubebuilder:validation:XValidation:rule="self.node == oldSelf.node && self.pod == oldSelf.pod && self.volume == oldSelf.volume && self.repository == oldSelf.repository && has(self.tags) == has(oldSelf.tags) && (!has(self.tags) || self.tags == oldSelf.tags) && has(self.persistentVolumeClaimUID) == has(oldSelf.persistentVolumeClaimUID) && (!has(self.persistentVolumeClaimUID) || self.persistentVolumeClaimUID == oldSelf.persistentVolumeClaimUID)",message="spec is immutable except cancel"
type PodVolumeBackupSpec struct {
	// Node is the node the pod runs on; its node agent does the copy.
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
	// Pod is the pod whose volume is copied.
	Pod PodReference `json:"pod"`
	// Volume is the name of the volume in the pod's spec.
	// +kubebuilder:validation:MaxLength=63
	Volume string `json:"volume"`
	// PersistentVolumeClaim is the claim behind the volume, "" for an emptyDir.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	PersistentVolumeClaim string `json:"persistentVolumeClaim,omitempty"`
	// PersistentVolumeClaimUID is that claim's UID: snapshots of the same claim are parents of
	// each other.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	PersistentVolumeClaimUID types.UID `json:"persistentVolumeClaimUID,omitempty"`
	// Repository is where the data goes.
	Repository RepositoryReference `json:"repository"`
	// Tags are recorded on the snapshot; the latest snapshot with the same tags is its parent.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	Tags map[string]string `json:"tags,omitempty"`
	// Cancel, set to true, stops the copy; nothing is saved.
	// +optional
	Cancel bool `json:"cancel,omitempty"`
}

// PodVolumeStatus is what the node agent observed and did, for a PodVolumeBackup or a
// PodVolumeRestore alike.
type PodVolumeStatus struct {
	// +optional
	Phase PodVolumePhase `json:"phase,omitempty"`
	// BytesDone is how many bytes of file content were read (a backup) or written (a restore)
	// so far.
	// +optional
	BytesDone int64 `json:"bytesDone,omitempty"`
	// BytesTotal is the size of the files in the volume, once known.
	// +optional
	BytesTotal int64 `json:"bytesTotal,omitempty"`
	// UploadedBytes is how many bytes a backup wrote to the repository: far less than
	// BytesDone when most of the volume is unchanged since its parent snapshot.
	// +optional
	UploadedBytes int64 `json:"uploadedBytes,omitempty"`
	// Files is how many files the snapshot holds (a backup) or were restored (a restore).
	// +optional
	Files int64 `json:"files,omitempty"`
	// Progress is "bytesDone/bytesTotal" in binary units, for kubectl's Progress column.
	// +optional
	Progress string `json:"progress,omitempty"`
	// SnapshotID is the repository snapshot holding the data, once a backup Completed.
	// +optional
	SnapshotID string `json:"snapshotID,omitempty"`
	// ParentSnapshotID is the earlier snapshot this one was based on, "" for a first copy.
	// +optional
	ParentSnapshotID string `json:"parentSnapshotID,omitempty"`
	// +optional
	StartTimestamp *metav1.Time `json:"startTimestamp,omitempty"`
	// +optional
	CompletionTimestamp *metav1.Time `json:"completionTimestamp,omitempty"`
	// Message says why the copy failed or was cancelled, or what it skipped.
	// +optional
	Message string `json:"message,omitempty"`
}

// PodVolumeBackup copies the data of one pod volume into a volume repository: one async
// operation of a backup, run by the node agent of the pod's node. It lives in the operator's
// namespace, whichever namespace the backup and the pod are in.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=pvb,categories=cairn
// +kubebuilder:printcolumn:name="Backup",type=string,JSONPath=`.metadata.labels.cairn\.dev/backup-name`
// +kubebuilder:printcolumn:name="Pod",type=string,JSONPath=`.spec.pod.name`
// +kubebuilder:printcolumn:name="Volume",type=string,JSONPath=`.spec.volume`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Progress",type=string,JSONPath=`.status.progress`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.node`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.spec.pod.namespace`,priority=1
// +kubebuilder:printcolumn:name="Snapshot",type=string,JSONPath=`.status.snapshotID`,priority=1
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1
type PodVolumeBackup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PodVolumeBackupSpec `json:"spec,omitempty"`
	Status PodVolumeStatus     `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// PodVolumeBackupList is a list of PodVolumeBackups.
type PodVolumeBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PodVolumeBackup `json:"items"`
}

// PodVolumeRestoreSpec says which snapshot to write into which volume of a restored pod. It
// is immutable except cancel, and the binding to the pod: the pod's UID, its controller and
// the node (DESIGN.md section 20).
//
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.cancel) || !oldSelf.cancel || (has(self.cancel) && self.cancel)",message="spec.cancel cannot be set back to false"
// +kubebuilder:validation:XValidation:rule="(size(oldSelf.pod.uid) == 0 || size(self.pod.uid) > 0) && (!has(oldSelf.node) || size(oldSelf.node) == 0 || self.pod.uid == oldSelf.pod.uid)",message="spec.pod.uid, once set, changes only before spec.node is set, and is never unset"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.podController) || has(self.podController)",message="spec.podController cannot be unset"
type PodVolumeRestoreSpec struct {
	// Node is the node the restored pod runs on; its node agent writes the data. "" until the
	// pod is scheduled: the restore sets it once, when the pod it created (spec.pod.uid) has
	// one.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="oldSelf == '' || self == oldSelf",message="spec.node cannot change once set"
	Node string `json:"node"`
	// Pod is the restored pod, whose volume receives the data. Its UID is the one the create
	// of the pod answered, recorded by the restore right after it ("" before): the node agent
	// writes only into the pod of that UID. Before spec.node is set, the restore may move it to
	// a pod of the same name made in its place by the controller of spec.podController.
	Pod PodReference `json:"pod"`
	// PodController is the controller of the pod the restore created: as the create answered
	// it, or the owner that adopted the pod since. A pod of the same name that this controller
	// made in place of that pod, whose first init container is the restore helper, is the one
	// written into; any other pod of the name never is. Once set it cannot change.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.podController cannot change once set"
	PodController *ControllerReference `json:"podController,omitempty"`
	// Volume is the name of the volume in the pod's spec.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.volume is immutable"
	Volume string `json:"volume"`
	// SourcePod is the pod as it was backed up (namespace and name, before any mapping).
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.sourcePod is immutable"
	SourcePod *PodReference `json:"sourcePod,omitempty"`
	// Repository holds the snapshot.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.repository is immutable"
	Repository RepositoryReference `json:"repository"`
	// SnapshotID is the snapshot the backup recorded for the volume.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.snapshotID is immutable"
	SnapshotID string `json:"snapshotID"`
	// SnapshotSource and SnapshotTags, when set, say what the snapshot must be of, as the
	// repository records it (authenticated by the repository's key), or the node agent writes
	// nothing: its source path begins with SnapshotSource, or it carries every tag of
	// SnapshotTags. For a snapshot Velero made of the pod as backed up:
	// snapshot-pod-volume/kopia/<namespace>/<pod>/ (Velero v1.17 and later), or the tags ns
	// and pod (v1.12 to v1.16); so that a changed record cannot restore another pod's data.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.snapshotSource is immutable"
	SnapshotSource string `json:"snapshotSource,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxProperties=8
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.snapshotTags is immutable"
	SnapshotTags map[string]string `json:"snapshotTags,omitempty"`
	// Cancel, set to true, stops the restore of the volume; the pod's restore helper then
	// fails, and the application does not start on partial data.
	// +optional
	Cancel bool `json:"cancel,omitempty"`
}

// PodVolumeRestore writes a volume snapshot back into a restored pod's volume: one async
// operation of a restore, run by the node agent of the pod's node. It lives in the operator's
// namespace, whichever namespace the restore and the pod are in.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=pvr,categories=cairn
// +kubebuilder:printcolumn:name="Restore",type=string,JSONPath=`.metadata.labels.cairn\.dev/restore-name`
// +kubebuilder:printcolumn:name="Pod",type=string,JSONPath=`.spec.pod.name`
// +kubebuilder:printcolumn:name="Volume",type=string,JSONPath=`.spec.volume`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Progress",type=string,JSONPath=`.status.progress`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.node`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.spec.pod.namespace`,priority=1
// +kubebuilder:printcolumn:name="Snapshot",type=string,JSONPath=`.spec.snapshotID`,priority=1
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1
type PodVolumeRestore struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PodVolumeRestoreSpec `json:"spec,omitempty"`
	Status PodVolumeStatus      `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// PodVolumeRestoreList is a list of PodVolumeRestores.
type PodVolumeRestoreList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PodVolumeRestore `json:"items"`
}

// PodVolumeObject is what the node agent needs of a PodVolumeBackup or a PodVolumeRestore: the
// two share their phases, their status, and the node agent's handling of them.
//
// +kubebuilder:object:generate=false
type PodVolumeObject interface {
	// PodVolumeStatus is the object's status, to read and change.
	PodVolumeStatus() *PodVolumeStatus
	// NodeName is the node whose agent handles it; "" while not yet known.
	NodeName() string
	// CancelRequested reports spec.cancel.
	CancelRequested() bool
	// PodVolume names the pod and the volume.
	PodVolume() (PodReference, string)
}

func (p *PodVolumeBackup) PodVolumeStatus() *PodVolumeStatus  { return &p.Status }
func (p *PodVolumeBackup) NodeName() string                   { return p.Spec.Node }
func (p *PodVolumeBackup) CancelRequested() bool              { return p.Spec.Cancel }
func (p *PodVolumeBackup) PodVolume() (PodReference, string)  { return p.Spec.Pod, p.Spec.Volume }
func (p *PodVolumeRestore) PodVolumeStatus() *PodVolumeStatus { return &p.Status }
func (p *PodVolumeRestore) NodeName() string                  { return p.Spec.Node }
func (p *PodVolumeRestore) CancelRequested() bool             { return p.Spec.Cancel }
func (p *PodVolumeRestore) PodVolume() (PodReference, string) { return p.Spec.Pod, p.Spec.Volume }
