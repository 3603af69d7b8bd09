package v1alpha1

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BackupPhase is where a backup is in its life. Every phase has exactly one owning reconciler
// (docs/architecture.md); only that owner moves a backup out of it.
//
// +kubebuilder:validation:Enum=New;Queued;ReadyToStart;InProgress;WaitingForPluginOperations;WaitingForPluginOperationsPartiallyFailed;Finalizing;FinalizingPartiallyFailed;FinalizingCancelled;FinalizingFailed;Completed;PartiallyFailed;Failed;FailedValidation;Deleting;DeletionFailed
type BackupPhase string

const (
	// BackupPhaseNew is a backup that was just created; the queue owns it ("" means the same).
	BackupPhaseNew BackupPhase = "New"
	// BackupPhaseQueued is a backup waiting for a concurrency slot; the queue owns it.
	BackupPhaseQueued BackupPhase = "Queued"
	// BackupPhaseReadyToStart is a dequeued backup holding a concurrency slot; the backup
	// reconciler owns it.
	BackupPhaseReadyToStart BackupPhase = "ReadyToStart"
	// BackupPhaseInProgress is a backup whose items are being written; the backup reconciler owns it.
	BackupPhaseInProgress BackupPhase = "InProgress"
	// BackupPhaseWaitingForPluginOperations is a backup whose async plugin operations still run;
	// the operations reconciler owns it.
	BackupPhaseWaitingForPluginOperations BackupPhase = "WaitingForPluginOperations"
	// BackupPhaseWaitingForPluginOperationsPartiallyFailed is the same, with errors already counted.
	BackupPhaseWaitingForPluginOperationsPartiallyFailed BackupPhase = "WaitingForPluginOperationsPartiallyFailed"
	// BackupPhaseFinalizing is a backup whose post-operation items and final metadata are being
	// written; the finalizer reconciler owns it.
	BackupPhaseFinalizing BackupPhase = "Finalizing"
	// BackupPhaseFinalizingPartiallyFailed is the same, with errors already counted.
	BackupPhaseFinalizingPartiallyFailed BackupPhase = "FinalizingPartiallyFailed"
	// BackupPhaseFinalizingCancelled is a cancelled backup whose data is being removed (its logs
	// are kept); the finalizer reconciler owns it.
	BackupPhaseFinalizingCancelled BackupPhase = "FinalizingCancelled"
	// BackupPhaseFinalizingFailed is a backup that failed (its failureReason says why) whose
	// partial data is being removed (its log is kept); the finalizer reconciler owns it, and
	// ends it in Failed.
	BackupPhaseFinalizingFailed BackupPhase = "FinalizingFailed"
	// BackupPhaseCompleted is terminal: the backup is restorable and had no errors.
	BackupPhaseCompleted BackupPhase = "Completed"
	// BackupPhasePartiallyFailed is terminal: the backup is restorable but some items had errors.
	BackupPhasePartiallyFailed BackupPhase = "PartiallyFailed"
	// BackupPhaseFailed is terminal: the backup is not restorable (see failureReason).
	BackupPhaseFailed BackupPhase = "Failed"
	// BackupPhaseFailedValidation is terminal: the spec or its storage location was invalid.
	BackupPhaseFailedValidation BackupPhase = "FailedValidation"
	// BackupPhaseDeleting is a deleted backup whose data is being removed; the deletion
	// reconciler owns it.
	BackupPhaseDeleting BackupPhase = "Deleting"
	// BackupPhaseDeletionFailed is a deleted backup whose last data removal failed; the deletion
	// reconciler retries it with backoff.
	BackupPhaseDeletionFailed BackupPhase = "DeletionFailed"
)

// AllBackupPhases lists every phase, in the order of the owner table.
var AllBackupPhases = []BackupPhase{
	BackupPhaseNew, BackupPhaseQueued, BackupPhaseReadyToStart, BackupPhaseInProgress,
	BackupPhaseWaitingForPluginOperations, BackupPhaseWaitingForPluginOperationsPartiallyFailed,
	BackupPhaseFinalizing, BackupPhaseFinalizingPartiallyFailed, BackupPhaseFinalizingCancelled, BackupPhaseFinalizingFailed,
	BackupPhaseCompleted, BackupPhasePartiallyFailed, BackupPhaseFailed, BackupPhaseFailedValidation,
	BackupPhaseDeleting, BackupPhaseDeletionFailed,
}

// IsTerminal reports whether a backup in this phase is finished: nothing more happens to it
// until it is deleted.
func (p BackupPhase) IsTerminal() bool {
	switch p {
	case BackupPhaseCompleted, BackupPhasePartiallyFailed, BackupPhaseFailed, BackupPhaseFailedValidation:
		return true
	}
	return false
}

// Well-known names on and around Backup objects.
const (
	// BackupDataFinalizer is set on every Backup; it is removed once the backup's data is gone
	// from its storage location.
	BackupDataFinalizer = "cairn.dev/backup-data"
	// KeepDataAnnotation, set to "true", lets a Backup object be deleted without touching the
	// data in its storage location.
	KeepDataAnnotation = "cairn.dev/keep-data"
	// ExcludeFromBackupLabel, set to "true" on any object, keeps that object out of every backup.
	ExcludeFromBackupLabel = "cairn.dev/exclude-from-backup"
)

// Condition types on a Backup.
const (
	// BackupConditionQueued is True while the backup waits in the queue; its message says why.
	BackupConditionQueued = "Queued"
	// BackupConditionCancelled is True once a cancelled backup has been cleaned up; False
	// (reason CleanupFailed) while removing its data fails and is retried.
	BackupConditionCancelled = "Cancelled"
	// BackupConditionCleanedUp is True once a failed backup's partial data has been removed;
	// False (reason CleanupFailed) while removing it fails and is retried.
	BackupConditionCleanedUp = "CleanedUp"
	// BackupConditionStorageReady is False while a ReadyToStart backup waits for its storage
	// location (not validated yet, or not reachable); its message says why.
	BackupConditionStorageReady = "StorageReady"
	// BackupConditionDeletionBlocked is True while a deleted backup is kept from Deleting
	// because a restore that has not ended reads it; its message names the restore.
	BackupConditionDeletionBlocked = "DeletionBlocked"
	// BackupConditionExpired is True while an expired backup cannot be deleted (its storage
	// location is ReadOnly or missing); the reason and message say why. Expiry retries when the
	// location changes.
	BackupConditionExpired = "Expired"
)

// Condition reasons on a Backup.
const (
	ReasonWaitingForConcurrencySlot = "WaitingForConcurrencySlot"
	ReasonNamespaceOverlap          = "NamespaceOverlap"
	ReasonWaitingForDeletion        = "WaitingForDeletion"
	ReasonWaitingForEarlierBackup   = "WaitingForEarlierBackup"
	ReasonEnqueued                  = "Enqueued"
	ReasonDequeued                  = "Dequeued"
	ReasonCancelledByUser           = "CancelledByUser"
	ReasonBackupDeleted             = "BackupDeleted"
	// ReasonCleanupFailed: removing a cancelled backup's data failed; it is retried with backoff.
	ReasonCleanupFailed = "CleanupFailed"
	// ReasonDataRemoved: a failed backup's partial data was removed (its log is kept).
	ReasonDataRemoved = "DataRemoved"
	// ReasonDataKept: a failed backup's partial data could not be, or must not be, removed.
	ReasonDataKept = "DataKept"
	// ReasonStorageUnavailable: the backup's storage location cannot be used yet.
	ReasonStorageUnavailable = "StorageUnavailable"
	// ReasonReadByRestore: a restore that has not ended reads the backup, so its data stays.
	ReasonReadByRestore = "ReadByRestore"
	// ReasonLocationReadOnly: an expired backup's storage location is ReadOnly, so its data
	// cannot be deleted.
	ReasonLocationReadOnly = "LocationReadOnly"
	// ReasonLocationNotFound: an expired backup's storage location does not exist.
	ReasonLocationNotFound = "LocationNotFound"
)

// Bounds of status.validationErrors: a spec with many bad entries must still produce a status
// the API server accepts (the queue caps the messages it writes to these).
const (
	// MaxValidationErrors is the most messages status.validationErrors holds; the last one says
	// how many more problems there were.
	MaxValidationErrors = 20
	// MaxValidationErrorLength is the longest message in status.validationErrors, in bytes.
	MaxValidationErrorLength = 1024
)

// FailureReasonCancelled is the failureReason of a backup cancelled with spec.cancel.
const FailureReasonCancelled = "Backup cancelled by user"

// BackupSpec says what to back up and where: a Backup's spec, and a Schedule's template.
// Within a Backup it is immutable once created, except that cancel may be set to true (the
// rules are on Backup.Spec; the first one lists every field but cancel: a new field must be
// added to it).
type BackupSpec struct {
	// IncludedNamespaces are the namespaces to back up; `*` wildcards are allowed. Empty means
	// every namespace (or, for a Backup outside the operator's namespace, its own namespace).
	// At most 100, each a namespace name or pattern of at most 63 characters.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=63
	IncludedNamespaces []string `json:"includedNamespaces,omitempty"`

	// ExcludedNamespaces are namespaces to leave out; `*` wildcards are allowed. At most 100,
	// each of at most 63 characters.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=63
	ExcludedNamespaces []string `json:"excludedNamespaces,omitempty"`

	// IncludedResources are the resources to back up, by plural, singular or short name,
	// optionally qualified by group (`deployments.apps`). Empty means every resource. At most
	// 100, each of at most 253 characters (the longest name a CRD can have).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=253
	IncludedResources []string `json:"includedResources,omitempty"`

	// ExcludedResources are resources to leave out, named as in includedResources; at most 100.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=253
	ExcludedResources []string `json:"excludedResources,omitempty"`

	// IncludeClusterResources says which cluster-scoped resources to back up: unset means only
	// those that selected namespaced items need (the PVs of PVCs, the CRDs of custom
	// resources); true means all of them; false means none.
	// +optional
	IncludeClusterResources *bool `json:"includeClusterResources,omitempty"`

	// LabelSelector, when set, keeps only the items whose labels match it: at most 20
	// matchLabels and 20 matchExpressions. Keys, operators and values are checked when the
	// backup is queued (FailedValidation).
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.matchLabels) || size(self.matchLabels) <= 20",message="matchLabels may have at most 20 entries"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || size(self.matchExpressions) <= 20",message="matchExpressions may have at most 20 entries"
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`

	// OrLabelSelectors keeps the items whose labels match any of these selectors, each bounded
	// as labelSelector is. It cannot be combined with labelSelector.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	// +kubebuilder:validation:items:XValidation:rule="!has(self.matchLabels) || size(self.matchLabels) <= 20",message="matchLabels may have at most 20 entries"
	// +kubebuilder:validation:items:XValidation:rule="!has(self.matchExpressions) || size(self.matchExpressions) <= 20",message="matchExpressions may have at most 20 entries"
	OrLabelSelectors []*metav1.LabelSelector `json:"orLabelSelectors,omitempty"`

	// StorageLocation is the name of the BackupStorageLocation, in the operator's namespace,
	// that receives the backup. Empty means the default location.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == '' || self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="storageLocation must be the name of a BackupStorageLocation: lowercase letters, digits, '-' and '.', beginning and ending with a letter or digit"
	StorageLocation string `json:"storageLocation,omitempty"`

	// TTL is how long the backup is kept, from its start, before it expires and is deleted
	// (docs/expiry.md): 0s (or "0") means never, else from 1s to 87600h (10 years). Unset means
	// the manager's --default-backup-ttl (720h unless changed), so there is no default here.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self == '0' || (self != '' && self.matches('^([0-9]{1,5}([.][0-9]+)?h)?([0-9]{1,7}([.][0-9]+)?m)?([0-9]{1,9}([.][0-9]+)?s)?([0-9]{1,12}([.][0-9]+)?ms)?([0-9]{1,15}([.][0-9]+)?(us|µs|μs))?([0-9]{1,18}([.][0-9]+)?ns)?$') && (duration(self) == duration('0s') || duration(self) >= duration('1s')) && duration(self) <= duration('87600h'))",message="ttl must be 0s (never expire) or a duration from 1s to 87600h (10 years), such as 720h or 1h30m"
	TTL *metav1.Duration `json:"ttl,omitempty"`

	// ItemOperationTimeout bounds how long async plugin operations (such as volume snapshots)
	// may run before they are cancelled and counted as failed: from 1s to 87600h.
	// +optional
	// +kubebuilder:default="4h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self != '' && self.matches('^([0-9]{1,5}([.][0-9]+)?h)?([0-9]{1,7}([.][0-9]+)?m)?([0-9]{1,9}([.][0-9]+)?s)?([0-9]{1,12}([.][0-9]+)?ms)?([0-9]{1,15}([.][0-9]+)?(us|µs|μs))?([0-9]{1,18}([.][0-9]+)?ns)?$') && duration(self) >= duration('1s') && duration(self) <= duration('87600h')",message="itemOperationTimeout must be a duration from 1s to 87600h (10 years), such as 4h or 30m"
	ItemOperationTimeout *metav1.Duration `json:"itemOperationTimeout,omitempty"`

	// SnapshotVolumes says whether volume snapshots are taken; unset means yes, where a
	// snapshotter applies.
	// +optional
	SnapshotVolumes *bool `json:"snapshotVolumes,omitempty"`

	// DefaultVolumesToFsBackup copies the data of every PVC and emptyDir volume of the selected
	// pods into the location's volume repository (docs/volumes.md), as if each pod listed all
	// its volumes in backup.cairn.dev/backup-volumes; a pod's
	// backup.cairn.dev/backup-volumes-excludes still leaves volumes out. Unset or false: only
	// the volumes pods opt in with that annotation are copied.
	// +optional
	DefaultVolumesToFsBackup *bool `json:"defaultVolumesToFsBackup,omitempty"`

	// Hooks are commands run in the selected pods before and after their backup
	// (docs/hooks.md); pods' hook annotations run in addition.
	// +optional
	Hooks *BackupHooks `json:"hooks,omitempty"`

	// Cancel, set to true, stops the backup in whatever phase it is in. It cannot be set back
	// to false.
	// +optional
	Cancel bool `json:"cancel,omitempty"`

	// Metadata, in a Schedule's template, holds the labels of the backups the schedule
	// creates (as Velero's template.metadata.labels). A Backup keeps it as written.
	// +optional
	Metadata *BackupMetadata `json:"metadata,omitempty"`
}

// MaxTemplateLabels is how many labels BackupMetadata may hold: the MaxProperties marker on
// its Labels says the same number to the API server (a marker cannot name a constant).
const MaxTemplateLabels = 20

// BackupMetadata is what a Schedule puts on the metadata of the backups it creates.
type BackupMetadata struct {
	// Labels go on every backup the schedule creates, beside cairn.dev/schedule-name. At most
	// 20; keys in the cairn.dev domain are Cairn's own and refused.
	// +optional
	// +kubebuilder:validation:MaxProperties=20
	Labels map[string]string `json:"labels,omitempty"`
}

// BackupProgress counts the items of a backup.
type BackupProgress struct {
	// TotalItems is the number of items found so far to back up.
	// +optional
	TotalItems int64 `json:"totalItems,omitempty"`
	// ItemsBackedUp is the number of items written to the archive so far.
	// +optional
	ItemsBackedUp int64 `json:"itemsBackedUp,omitempty"`
	// Summary is "itemsBackedUp/totalItems", for kubectl's Progress column. It is written
	// together with the counts by NewBackupProgress (and, while volume data is copied, by
	// WithVolumeBytes).
	// +optional
	Summary string `json:"summary,omitempty"`
	// VolumeBytesDone is how many bytes of pod volume data the backup's PodVolumeBackups have
	// read so far.
	// +optional
	VolumeBytesDone int64 `json:"volumeBytesDone,omitempty"`
	// VolumeBytesTotal is how many bytes the volumes being copied hold, as far as known.
	// +optional
	VolumeBytesTotal int64 `json:"volumeBytesTotal,omitempty"`
}

// WithVolumeBytes returns p with the volume byte counts set and the summary saying them,
// such as "40/40, volumes 120.0MiB/200.0MiB".
func (p BackupProgress) WithVolumeBytes(done, total int64) *BackupProgress {
	p.VolumeBytesDone, p.VolumeBytesTotal = done, total
	p.Summary = fmt.Sprintf("%d/%d, volumes %s/%s", p.ItemsBackedUp, p.TotalItems, HumanBytes(done), HumanBytes(total))
	return &p
}

// HumanBytes writes n bytes in binary units with one decimal: 512B, 1.5KiB, 200.0MiB.
func HumanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// NewBackupProgress returns the progress for these counts, with its Summary filled in.
func NewBackupProgress(itemsBackedUp, totalItems int64) *BackupProgress {
	return &BackupProgress{
		TotalItems:    totalItems,
		ItemsBackedUp: itemsBackedUp,
		Summary:       fmt.Sprintf("%d/%d", itemsBackedUp, totalItems),
	}
}

// BackupStatus is what Cairn observed and did. Each field is written by the owner of the
// backup's phase.
type BackupStatus struct {
	// Phase is where the backup is in its life.
	// +optional
	Phase BackupPhase `json:"phase,omitempty"`

	// QueuePosition is the backup's place in the queue, 1..n, while it is Queued; 0 otherwise.
	// +optional
	// +kubebuilder:validation:Minimum=0
	QueuePosition int32 `json:"queuePosition,omitempty"`

	// StorageLocation is the name of the storage location the backup was queued for: its
	// spec.storageLocation, or the default location at that time.
	// +optional
	StorageLocation string `json:"storageLocation,omitempty"`

	// ValidationErrors says what is wrong with a backup in FailedValidation.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	// +kubebuilder:validation:items:MaxLength=1024
	ValidationErrors []string `json:"validationErrors,omitempty"`

	// PhaseTransitionTime is when the backup entered its current phase; a phase that cannot
	// move on for --phase-timeout ends the backup with the last error.
	// +optional
	PhaseTransitionTime *metav1.Time `json:"phaseTransitionTime,omitempty"`

	// FailureReason says why a backup Failed.
	// +optional
	FailureReason string `json:"failureReason,omitempty"`

	// StartTimestamp is when the backup entered InProgress.
	// +optional
	StartTimestamp *metav1.Time `json:"startTimestamp,omitempty"`

	// CompletionTimestamp is when the backup reached a terminal phase.
	// +optional
	CompletionTimestamp *metav1.Time `json:"completionTimestamp,omitempty"`

	// Expiration is when the backup expires and is deleted (start + ttl); unset for a backup
	// with ttl 0s, which never expires.
	// +optional
	Expiration *metav1.Time `json:"expiration,omitempty"`

	// Progress counts the items found and written.
	// +optional
	Progress *BackupProgress `json:"progress,omitempty"`

	// Warnings is the number of warnings logged for this backup.
	// +optional
	Warnings int32 `json:"warnings,omitempty"`

	// Errors is the number of errors logged for this backup.
	// +optional
	Errors int32 `json:"errors,omitempty"`

	// BackupItemOperationsAttempted is the number of async plugin operations started.
	// +optional
	BackupItemOperationsAttempted int32 `json:"backupItemOperationsAttempted,omitempty"`

	// BackupItemOperationsCompleted is the number of async plugin operations that completed.
	// +optional
	BackupItemOperationsCompleted int32 `json:"backupItemOperationsCompleted,omitempty"`

	// BackupItemOperationsFailed is the number of async plugin operations that failed.
	// +optional
	BackupItemOperationsFailed int32 `json:"backupItemOperationsFailed,omitempty"`

	// HookStatus counts the backup's hooks: those run while the backup ran, then, once its
	// async operations ended, the post hooks that waited for volume copies.
	// +optional
	HookStatus *HookStatus `json:"hookStatus,omitempty"`

	// ArchiveSHA256 is the SHA-256 of the archive as it was uploaded (hex); the finalizer checks
	// the stored archive against it before the backup is committed.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ArchiveSHA256 string `json:"archiveSHA256,omitempty"`

	// ArchiveSize is the size of the archive as it was uploaded, in bytes.
	// +optional
	ArchiveSize int64 `json:"archiveSize,omitempty"`

	// FormatVersion is the version of the archive format the backup was written in.
	// +optional
	FormatVersion string `json:"formatVersion,omitempty"`

	// LastDeletionError is the error of the last failed attempt to delete the backup's data.
	// +optional
	LastDeletionError string `json:"lastDeletionError,omitempty"`

	// NextDeletionAttempt is when a backup in DeletionFailed will be retried.
	// +optional
	NextDeletionAttempt *metav1.Time `json:"nextDeletionAttempt,omitempty"`

	// DeletionAttempts counts the failed attempts to delete the backup's data; it sets the backoff.
	// +optional
	DeletionAttempts int32 `json:"deletionAttempts,omitempty"`

	// OriginUID is, for a backup synced from storage (annotation cairn.dev/synced-from), the
	// UID of the Backup object that wrote its data, as its commit marker records it: the data
	// under this backup's name is this backup's only while the marker carries this UID.
	// Unset for a backup this cluster wrote (its own UID is the one).
	// +optional
	// +kubebuilder:validation:MaxLength=128
	OriginUID string `json:"originUID,omitempty"`

	// Conditions are the backup's observed conditions (Queued, Cancelled).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Backup is one backup of Kubernetes resources (and, through plugins, volume snapshots) into a
// BackupStorageLocation.
// The name is bounded so that every storage key and file name of the backup fits the limits
// of S3 (1024-byte keys) and of filesystems (255-byte names, with the temporary file's suffix).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=bk,categories=cairn
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 200",message="a Backup's name may have at most 200 characters, so that its storage keys and file names fit S3's and filesystems' limits"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Queue",type=integer,JSONPath=`.status.queuePosition`
// +kubebuilder:printcolumn:name="Progress",type=string,JSONPath=`.status.progress.summary`
// +kubebuilder:printcolumn:name="Errors",type=integer,JSONPath=`.status.errors`,priority=1
// +kubebuilder:printcolumn:name="Warnings",type=integer,JSONPath=`.status.warnings`,priority=1
// +kubebuilder:printcolumn:name="Location",type=string,JSONPath=`.status.storageLocation`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Failure",type=string,JSONPath=`.status.failureReason`,priority=1
// +kubebuilder:printcolumn:name="Deletion Error",type=string,JSONPath=`.status.lastDeletionError`,priority=1
// +kubebuilder:printcolumn:name="Next Deletion Attempt",type=string,JSONPath=`.status.nextDeletionAttempt`,priority=1
// +kubebuilder:printcolumn:name="Expires",type=string,JSONPath=`.status.expiration`,priority=1
type Backup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec says what to back up and where. It is immutable once created, except that cancel
	// may be set to true (the rules are on this field, not on BackupSpec, so that a Schedule's
	// template, also a BackupSpec, may be edited).
	// +optional
	// +kubebuilder:default={}
	// +kubebuilder:validation:XValidation:rule="has(self.includedNamespaces) == has(oldSelf.includedNamespaces) && (!has(self.includedNamespaces) || self.includedNamespaces == oldSelf.includedNamespaces) && has(self.excludedNamespaces) == has(oldSelf.excludedNamespaces) && (!has(self.excludedNamespaces) || self.excludedNamespaces == oldSelf.excludedNamespaces) && has(self.includedResources) == has(oldSelf.includedResources) && (!has(self.includedResources) || self.includedResources == oldSelf.includedResources) && has(self.excludedResources) == has(oldSelf.excludedResources) && (!has(self.excludedResources) || self.excludedResources == oldSelf.excludedResources) && has(self.includeClusterResources) == has(oldSelf.includeClusterResources) && (!has(self.includeClusterResources) || self.includeClusterResources == oldSelf.includeClusterResources) && has(self.labelSelector) == has(oldSelf.labelSelector) && (!has(self.labelSelector) || self.labelSelector == oldSelf.labelSelector) && has(self.orLabelSelectors) == has(oldSelf.orLabelSelectors) && (!has(self.orLabelSelectors) || self.orLabelSelectors == oldSelf.orLabelSelectors) && has(self.storageLocation) == has(oldSelf.storageLocation) && (!has(self.storageLocation) || self.storageLocation == oldSelf.storageLocation) && has(self.ttl) == has(oldSelf.ttl) && (!has(self.ttl) || self.ttl == oldSelf.ttl || duration(self.ttl) == duration(oldSelf.ttl)) && has(self.itemOperationTimeout) == has(oldSelf.itemOperationTimeout) && (!has(self.itemOperationTimeout) || self.itemOperationTimeout == oldSelf.itemOperationTimeout || duration(self.itemOperationTimeout) == duration(oldSelf.itemOperationTimeout)) && has(self.snapshotVolumes) == has(oldSelf.snapshotVolumes) && (!has(self.snapshotVolumes) || self.snapshotVolumes == oldSelf.snapshotVolumes) && has(self.defaultVolumesToFsBackup) == has(oldSelf.defaultVolumesToFsBackup) && (!has(self.defaultVolumesToFsBackup) || self.defaultVolumesToFsBackup == oldSelf.defaultVolumesToFsBackup) && has(self.hooks) == has(oldSelf.hooks) && (!has(self.hooks) || self.hooks == oldSelf.hooks) && has(self.metadata) == has(oldSelf.metadata) && (!has(self.metadata) || self.metadata == oldSelf.metadata)",message="spec is immutable after the backup is created: only spec.cancel may be changed, from false to true"
	// +kubebuilder:validation:XValidation:rule="!has(oldSelf.cancel) || !oldSelf.cancel || (has(self.cancel) && self.cancel)",message="spec.cancel cannot be changed back to false: a cancelled backup stays cancelled"
	Spec BackupSpec `json:"spec,omitempty"`

	// Status is what Cairn observed and did.
	// +optional
	Status BackupStatus `json:"status,omitempty"`
}

// DefaultBackupTTL is the default of the manager's --default-backup-ttl: how long a backup
// without spec.ttl is kept.
const DefaultBackupTTL = 720 * time.Hour

// DefaultItemOperationTimeout is the default of spec.itemOperationTimeout, applied by the API
// server; the getter falls back to it for objects that did not pass through it.
const DefaultItemOperationTimeout = 4 * time.Hour

// GetTTL is spec.ttl, or defaultTTL (the manager's --default-backup-ttl) when unset. 0 means
// the backup never expires.
func (s *BackupSpec) GetTTL(defaultTTL time.Duration) time.Duration {
	if s.TTL == nil {
		return defaultTTL
	}
	return s.TTL.Duration
}

// GetItemOperationTimeout is spec.itemOperationTimeout, or its default when unset.
func (s *BackupSpec) GetItemOperationTimeout() time.Duration {
	if s.ItemOperationTimeout == nil {
		return DefaultItemOperationTimeout
	}
	return s.ItemOperationTimeout.Duration
}

// EffectivePhase is the backup's phase, with the empty phase of a just-created backup read as New.
func (b *Backup) EffectivePhase() BackupPhase {
	if b.Status.Phase == "" {
		return BackupPhaseNew
	}
	return b.Status.Phase
}

// +kubebuilder:object:root=true

// BackupList is a list of Backups.
type BackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Backup `json:"items"`
}

// Sync from storage (DESIGN.md section 11, docs/disaster-recovery.md).
const (
	// SyncedFromAnnotation names the storage location a Backup was synced from. A Backup in
	// phase "" with it is owned by the sync reconciler, which writes its terminal status from
	// the commit marker; the queue never runs it.
	SyncedFromAnnotation = "cairn.dev/synced-from"
	// StorageLocationLabel names the storage location of a backup synced from storage.
	StorageLocationLabel = "cairn.dev/storage-location"

	// BackupConditionDataAvailable is False (reason NotFoundInStorage) on a Completed or
	// PartiallyFailed backup whose commit marker is gone from its storage location: it cannot
	// be restored, and deleting it touches no storage. It goes back to True when the data
	// reappears.
	BackupConditionDataAvailable = "DataAvailable"
	// ReasonNotFoundInStorage: the backup's commit marker is not in its storage location.
	ReasonNotFoundInStorage = "NotFoundInStorage"
	// ReasonFoundInStorage: the backup's commit marker is in its storage location.
	ReasonFoundInStorage = "FoundInStorage"
	// ReasonNameConflict: a committed backup of another Backup object holds the name.
	ReasonNameConflict = "NameConflict"
)

// IsSyncPending reports whether the backup was created by the sync reconciler and waits for it
// to write its status: phase "" with the annotation cairn.dev/synced-from. No other reconciler
// acts on such a backup.
func (b *Backup) IsSyncPending() bool {
	return b.Status.Phase == "" && b.Annotations[SyncedFromAnnotation] != ""
}
