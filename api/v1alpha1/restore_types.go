package v1alpha1

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RestorePhase is where a restore is in its life. As for backups, every phase has exactly one
// owning reconciler (docs/architecture.md); only that owner moves a restore out of it.
//
// +kubebuilder:validation:Enum=New;Queued;ReadyToStart;InProgress;WaitingForPluginOperations;WaitingForPluginOperationsPartiallyFailed;Finalizing;FinalizingPartiallyFailed;FinalizingCancelled;Completed;PartiallyFailed;Failed;FailedValidation
type RestorePhase string

const (
	// RestorePhaseNew is a restore that was just created; the restore queue owns it ("" means the same).
	RestorePhaseNew RestorePhase = "New"
	// RestorePhaseQueued is a validated restore waiting for its turn; the restore queue owns it.
	RestorePhaseQueued RestorePhase = "Queued"
	// RestorePhaseReadyToStart is a dequeued restore; the restore reconciler owns it.
	RestorePhaseReadyToStart RestorePhase = "ReadyToStart"
	// RestorePhaseInProgress is a restore whose items are being created by its own worker pool;
	// the restore reconciler owns it.
	RestorePhaseInProgress RestorePhase = "InProgress"
	// RestorePhaseWaitingForPluginOperations is a restore whose async operations still run; the
	// operations reconciler owns it.
	RestorePhaseWaitingForPluginOperations RestorePhase = "WaitingForPluginOperations"
	// RestorePhaseWaitingForPluginOperationsPartiallyFailed is the same, with errors already counted.
	RestorePhaseWaitingForPluginOperationsPartiallyFailed RestorePhase = "WaitingForPluginOperationsPartiallyFailed"
	// RestorePhaseFinalizing is a restore whose items are all created; the restore finalizer
	// owns it and ends it.
	RestorePhaseFinalizing RestorePhase = "Finalizing"
	// RestorePhaseFinalizingPartiallyFailed is the same, with errors already counted.
	RestorePhaseFinalizingPartiallyFailed RestorePhase = "FinalizingPartiallyFailed"
	// RestorePhaseFinalizingCancelled is a cancelled restore; the restore finalizer owns it and
	// ends it in Failed.
	RestorePhaseFinalizingCancelled RestorePhase = "FinalizingCancelled"
	// RestorePhaseCompleted is terminal: every selected item was restored, without errors.
	RestorePhaseCompleted RestorePhase = "Completed"
	// RestorePhasePartiallyFailed is terminal: the restore ran to its end, but some items had errors.
	RestorePhasePartiallyFailed RestorePhase = "PartiallyFailed"
	// RestorePhaseFailed is terminal: the restore stopped (see failureReason).
	RestorePhaseFailed RestorePhase = "Failed"
	// RestorePhaseFailedValidation is terminal: the spec, its backup or its storage location was invalid.
	RestorePhaseFailedValidation RestorePhase = "FailedValidation"
)

// AllRestorePhases lists every restore phase, in the order of the owner table.
var AllRestorePhases = []RestorePhase{
	RestorePhaseNew, RestorePhaseQueued, RestorePhaseReadyToStart, RestorePhaseInProgress,
	RestorePhaseWaitingForPluginOperations, RestorePhaseWaitingForPluginOperationsPartiallyFailed,
	RestorePhaseFinalizing, RestorePhaseFinalizingPartiallyFailed, RestorePhaseFinalizingCancelled,
	RestorePhaseCompleted, RestorePhasePartiallyFailed, RestorePhaseFailed, RestorePhaseFailedValidation,
}

// IsTerminal reports whether a restore in this phase is finished.
func (p RestorePhase) IsTerminal() bool {
	switch p {
	case RestorePhaseCompleted, RestorePhasePartiallyFailed, RestorePhaseFailed, RestorePhaseFailedValidation:
		return true
	}
	return false
}

// Well-known names on and around Restore objects.
const (
	// RestoreDataFinalizer is set on every Restore; it is removed once the restore's files (log,
	// results, resource list) are gone from storage. Restored objects are never touched.
	RestoreDataFinalizer = "cairn.dev/restore-data"
	// BackupNameLabel is set on every restored object: the backup it came from.
	BackupNameLabel = "cairn.dev/backup-name"
	// RestoreNameLabel is set on every restored object: the restore that created or updated it.
	RestoreNameLabel = "cairn.dev/restore-name"
)

// Condition types on a Restore.
const (
	// RestoreConditionQueued is True while the restore waits for its turn; its message says why.
	RestoreConditionQueued = "Queued"
	// RestoreConditionNamespacesReady is False while the restore waits for a target namespace
	// that is still terminating; its message names it.
	RestoreConditionNamespacesReady = "NamespacesReady"
	// RestoreConditionStorageReady is False while a ReadyToStart restore waits for its storage
	// location; its message says why.
	RestoreConditionStorageReady = "StorageReady"
	// RestoreConditionCancelled is True once a cancelled (or deleted) restore has ended; the
	// objects it created stay.
	RestoreConditionCancelled = "Cancelled"
	// RestoreConditionFilesStored says whether the restore's log, results and resource list were
	// written to storage (False when no ReadWrite location could hold them).
	RestoreConditionFilesStored = "FilesStored"
)

// Condition reasons on a Restore.
const (
	ReasonNamespaceTerminating = "NamespaceTerminating"
	ReasonNamespacesReady      = "NamespacesReady"
	ReasonFilesStored          = "Stored"
	ReasonNoWritableLocation   = "NoWritableLocation"
	// ReasonRestoreDeleted: the restore was stopped because it was deleted.
	ReasonRestoreDeleted = "RestoreDeleted"
)

// ExistingResourcePolicy says what a restore does with an object that already exists.
//
// +kubebuilder:validation:Enum=none;update
type ExistingResourcePolicy string

const (
	// ExistingResourcePolicyNone leaves an existing object alone: identical ones are skipped,
	// different ones are a warning naming the object.
	ExistingResourcePolicyNone ExistingResourcePolicy = "none"
	// ExistingResourcePolicyUpdate merge-patches an existing object that differs from the
	// backed-up one; a failed patch is a warning.
	ExistingResourcePolicyUpdate ExistingResourcePolicy = "update"
)

// FailureReasonRestoreCancelled is the failureReason of a restore cancelled with spec.cancel.
const FailureReasonRestoreCancelled = "Restore cancelled by user"

// NamespaceName is the name of a namespace: at most 63 lowercase letters, digits and '-',
// beginning and ending with a letter or digit.
//
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
type NamespaceName string

// RestoreStatusSpec selects the resources whose status is restored (after the object is
// created), named as in includedResources. Empty includedResources means none.
type RestoreStatusSpec struct {
	// IncludedResources are the resources whose status is restored; `*` means every resource.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=253
	IncludedResources []string `json:"includedResources,omitempty"`
	// ExcludedResources are resources whose status is not restored.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=253
	ExcludedResources []string `json:"excludedResources,omitempty"`
}

// RestoreSpec says which backup to restore, what of it, and how. It is immutable once created,
// except that cancel may be set to true.
//
// The first rule lists every field but cancel: a new field must be added to it.
//
// +kubebuilder:validation:XValidation:rule="has(self.backupName) == has(oldSelf.backupName) && (!has(self.backupName) || self.backupName == oldSelf.backupName) && has(self.scheduleName) == has(oldSelf.scheduleName) && (!has(self.scheduleName) || self.scheduleName == oldSelf.scheduleName) && has(self.includedNamespaces) == has(oldSelf.includedNamespaces) && (!has(self.includedNamespaces) || self.includedNamespaces == oldSelf.includedNamespaces) && has(self.excludedNamespaces) == has(oldSelf.excludedNamespaces) && (!has(self.excludedNamespaces) || self.excludedNamespaces == oldSelf.excludedNamespaces) && has(self.includedResources) == has(oldSelf.includedResources) && (!has(self.includedResources) || self.includedResources == oldSelf.includedResources) && has(self.excludedResources) == has(oldSelf.excludedResources) && (!has(self.excludedResources) || self.excludedResources == oldSelf.excludedResources) && has(self.includeClusterResources) == has(oldSelf.includeClusterResources) && (!has(self.includeClusterResources) || self.includeClusterResources == oldSelf.includeClusterResources) && has(self.labelSelector) == has(oldSelf.labelSelector) && (!has(self.labelSelector) || self.labelSelector == oldSelf.labelSelector) && has(self.orLabelSelectors) == has(oldSelf.orLabelSelectors) && (!has(self.orLabelSelectors) || self.orLabelSelectors == oldSelf.orLabelSelectors) && has(self.namespaceMapping) == has(oldSelf.namespaceMapping) && (!has(self.namespaceMapping) || self.namespaceMapping == oldSelf.namespaceMapping) && has(self.existingResourcePolicy) == has(oldSelf.existingResourcePolicy) && (!has(self.existingResourcePolicy) || self.existingResourcePolicy == oldSelf.existingResourcePolicy) && has(self.restoreStatus) == has(oldSelf.restoreStatus) && (!has(self.restoreStatus) || self.restoreStatus == oldSelf.restoreStatus) && has(self.preserveNodePorts) == has(oldSelf.preserveNodePorts) && (!has(self.preserveNodePorts) || self.preserveNodePorts == oldSelf.preserveNodePorts) && has(self.restorePVs) == has(oldSelf.restorePVs) && (!has(self.restorePVs) || self.restorePVs == oldSelf.restorePVs) && has(self.itemOperationTimeout) == has(oldSelf.itemOperationTimeout) && (!has(self.itemOperationTimeout) || self.itemOperationTimeout == oldSelf.itemOperationTimeout || duration(self.itemOperationTimeout) == duration(oldSelf.itemOperationTimeout)) && has(self.hooks) == has(oldSelf.hooks) && (!has(self.hooks) || self.hooks == oldSelf.hooks)",message="spec is immutable after the restore is created: only spec.cancel may be changed, from false to true"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.cancel) || !oldSelf.cancel || (has(self.cancel) && self.cancel)",message="spec.cancel cannot be changed back to false: a cancelled restore stays cancelled"
// +kubebuilder:validation:XValidation:rule="(has(self.backupName) && size(self.backupName) > 0) != (has(self.scheduleName) && size(self.scheduleName) > 0)",message="exactly one of spec.backupName and spec.scheduleName must be set"
type RestoreSpec struct {
	// BackupName is the Backup, in the restore's namespace, to restore.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	BackupName string `json:"backupName,omitempty"`

	// ScheduleName restores the newest Completed backup of this Schedule, in the restore's
	// namespace. Exactly one of backupName and scheduleName is set.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ScheduleName string `json:"scheduleName,omitempty"`

	// IncludedNamespaces are the backed-up namespaces to restore (before mapping); `*`
	// wildcards are allowed. Empty means every namespace of the backup (or, for a Restore
	// outside the operator's namespace, its own namespace).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=63
	IncludedNamespaces []string `json:"includedNamespaces,omitempty"`

	// ExcludedNamespaces are backed-up namespaces to leave out; `*` wildcards are allowed.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=63
	ExcludedNamespaces []string `json:"excludedNamespaces,omitempty"`

	// IncludedResources are the resources to restore, named as in a Backup. Empty means every
	// resource of the backup.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=253
	IncludedResources []string `json:"includedResources,omitempty"`

	// ExcludedResources are resources to leave out.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=253
	ExcludedResources []string `json:"excludedResources,omitempty"`

	// IncludeClusterResources says which cluster-scoped items of the backup are restored:
	// unset means those that restored namespaced items need (the Namespace objects, the PVs of
	// restored PVCs, the CRDs of restored custom resources); true means all of them; false none.
	// +optional
	IncludeClusterResources *bool `json:"includeClusterResources,omitempty"`

	// LabelSelector keeps only the backed-up items whose labels match it.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.matchLabels) || size(self.matchLabels) <= 20",message="matchLabels may have at most 20 entries"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || size(self.matchExpressions) <= 20",message="matchExpressions may have at most 20 entries"
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`

	// OrLabelSelectors keeps the items whose labels match any of these selectors. It cannot be
	// combined with labelSelector.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	// +kubebuilder:validation:items:XValidation:rule="!has(self.matchLabels) || size(self.matchLabels) <= 20",message="matchLabels may have at most 20 entries"
	// +kubebuilder:validation:items:XValidation:rule="!has(self.matchExpressions) || size(self.matchExpressions) <= 20",message="matchExpressions may have at most 20 entries"
	OrLabelSelectors []*metav1.LabelSelector `json:"orLabelSelectors,omitempty"`

	// NamespaceMapping restores the items of a backed-up namespace (key) into another namespace
	// (value). Keys and values are namespace names; at most 100 entries.
	// +optional
	// +kubebuilder:validation:MaxProperties=100
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 63 && k.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'))",message="namespaceMapping keys must be namespace names: at most 63 lowercase letters, digits and '-', beginning and ending with a letter or digit"
	NamespaceMapping map[string]NamespaceName `json:"namespaceMapping,omitempty"`

	// ExistingResourcePolicy says what happens to an object that already exists: none (the
	// default) skips identical objects and warns about different ones; update merge-patches
	// the different ones.
	// +optional
	ExistingResourcePolicy ExistingResourcePolicy `json:"existingResourcePolicy,omitempty"`

	// RestoreStatus selects the resources whose status is restored too.
	// +optional
	RestoreStatus *RestoreStatusSpec `json:"restoreStatus,omitempty"`

	// PreserveNodePorts keeps the node ports of restored Services; unset or false lets the
	// cluster assign new ones.
	// +optional
	PreserveNodePorts *bool `json:"preserveNodePorts,omitempty"`

	// RestorePVs says whether PersistentVolumes are restored (those with reclaimPolicy Retain,
	// and volumes from snapshots); unset means yes.
	// +optional
	RestorePVs *bool `json:"restorePVs,omitempty"`

	// ItemOperationTimeout bounds how long async restore operations may run: from 1s to 87600h.
	// +optional
	// +kubebuilder:default="4h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self != '' && self.matches('^([0-9]{1,5}([.][0-9]+)?h)?([0-9]{1,7}([.][0-9]+)?m)?([0-9]{1,9}([.][0-9]+)?s)?([0-9]{1,12}([.][0-9]+)?ms)?([0-9]{1,15}([.][0-9]+)?(us|µs|μs))?([0-9]{1,18}([.][0-9]+)?ns)?$') && duration(self) >= duration('1s') && duration(self) <= duration('87600h')",message="itemOperationTimeout must be a duration from 1s to 87600h (10 years), such as 4h or 30m"
	ItemOperationTimeout *metav1.Duration `json:"itemOperationTimeout,omitempty"`

	// Hooks are init containers added to the restored pods and commands run in them once
	// they run (docs/hooks.md); pods' restore hook annotations apply too.
	// +optional
	Hooks *RestoreHooks `json:"hooks,omitempty"`

	// Cancel, set to true, stops the restore in whatever phase it is in. It cannot be set back
	// to false.
	// +optional
	Cancel bool `json:"cancel,omitempty"`
}

// Filters returns the item filters the restore shares with a Backup.
func (s *RestoreSpec) Filters() ItemFilters {
	return ItemFilters{
		IncludedNamespaces: s.IncludedNamespaces, ExcludedNamespaces: s.ExcludedNamespaces,
		IncludedResources: s.IncludedResources, ExcludedResources: s.ExcludedResources,
		IncludeClusterResources: s.IncludeClusterResources,
		LabelSelector:           s.LabelSelector, OrLabelSelectors: s.OrLabelSelectors,
	}
}

// GetExistingResourcePolicy is spec.existingResourcePolicy, with unset read as none.
func (s *RestoreSpec) GetExistingResourcePolicy() ExistingResourcePolicy {
	if s.ExistingResourcePolicy == "" {
		return ExistingResourcePolicyNone
	}
	return s.ExistingResourcePolicy
}

// ShouldRestorePVs is spec.restorePVs, with unset read as true.
func (s *RestoreSpec) ShouldRestorePVs() bool { return s.RestorePVs == nil || *s.RestorePVs }

// ShouldPreserveNodePorts is spec.preserveNodePorts, with unset read as false.
func (s *RestoreSpec) ShouldPreserveNodePorts() bool {
	return s.PreserveNodePorts != nil && *s.PreserveNodePorts
}

// GetItemOperationTimeout is spec.itemOperationTimeout, or its default when unset.
func (s *RestoreSpec) GetItemOperationTimeout() time.Duration {
	if s.ItemOperationTimeout == nil {
		return DefaultItemOperationTimeout
	}
	return s.ItemOperationTimeout.Duration
}

// MapNamespace is the namespace the items of the backed-up namespace ns are restored into.
func (s *RestoreSpec) MapNamespace(ns string) string {
	if to, ok := s.NamespaceMapping[ns]; ok && to != "" {
		return string(to)
	}
	return ns
}

// RestoreProgress counts the items of a restore.
type RestoreProgress struct {
	// TotalItems is the number of items selected to restore.
	// +optional
	TotalItems int64 `json:"totalItems,omitempty"`
	// ItemsRestored is the number of items handled so far (created, updated, skipped or failed).
	// +optional
	ItemsRestored int64 `json:"itemsRestored,omitempty"`
	// Summary is "itemsRestored/totalItems", for kubectl's Progress column (with the volume
	// bytes while volume data is written: WithVolumeBytes).
	// +optional
	Summary string `json:"summary,omitempty"`
	// VolumeBytesDone is how many bytes of pod volume data the restore's PodVolumeRestores have
	// written so far.
	// +optional
	VolumeBytesDone int64 `json:"volumeBytesDone,omitempty"`
	// VolumeBytesTotal is how many bytes the volume snapshots being restored hold, as far as known.
	// +optional
	VolumeBytesTotal int64 `json:"volumeBytesTotal,omitempty"`
}

// WithVolumeBytes returns p with the volume byte counts set and the summary saying them.
func (p RestoreProgress) WithVolumeBytes(done, total int64) *RestoreProgress {
	p.VolumeBytesDone, p.VolumeBytesTotal = done, total
	p.Summary = fmt.Sprintf("%d/%d, volumes %s/%s", p.ItemsRestored, p.TotalItems, HumanBytes(done), HumanBytes(total))
	return &p
}

// NewRestoreProgress returns the progress for these counts, with its Summary filled in.
func NewRestoreProgress(itemsRestored, totalItems int64) *RestoreProgress {
	return &RestoreProgress{TotalItems: totalItems, ItemsRestored: itemsRestored, Summary: fmt.Sprintf("%d/%d", itemsRestored, totalItems)}
}

// RestoreStatus is what Cairn observed and did. Each field is written by the owner of the
// restore's phase.
type RestoreStatus struct {
	// Phase is where the restore is in its life.
	// +optional
	Phase RestorePhase `json:"phase,omitempty"`

	// QueuePosition is the restore's place in the queue, 1..n, while it is Queued; 0 otherwise.
	// +optional
	// +kubebuilder:validation:Minimum=0
	QueuePosition int32 `json:"queuePosition,omitempty"`

	// BackupName is the backup being restored: spec.backupName, or the backup that
	// spec.scheduleName resolved to.
	// +optional
	BackupName string `json:"backupName,omitempty"`

	// StorageLocation is the location the restore's log, results and resource list are written
	// to: its backup's, or the default location when the backup's is ReadOnly. Empty when none
	// could hold them (condition FilesStored says so).
	// +optional
	StorageLocation string `json:"storageLocation,omitempty"`

	// ValidationErrors says what is wrong with a restore in FailedValidation.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	// +kubebuilder:validation:items:MaxLength=1024
	ValidationErrors []string `json:"validationErrors,omitempty"`

	// PhaseTransitionTime is when the restore entered its current phase.
	// +optional
	PhaseTransitionTime *metav1.Time `json:"phaseTransitionTime,omitempty"`

	// FailureReason says why a restore Failed.
	// +optional
	FailureReason string `json:"failureReason,omitempty"`

	// StartTimestamp is when the restore entered InProgress.
	// +optional
	StartTimestamp *metav1.Time `json:"startTimestamp,omitempty"`

	// CompletionTimestamp is when the restore reached a terminal phase.
	// +optional
	CompletionTimestamp *metav1.Time `json:"completionTimestamp,omitempty"`

	// Progress counts the items selected and handled.
	// +optional
	Progress *RestoreProgress `json:"progress,omitempty"`

	// Warnings is the number of warnings logged for this restore.
	// +optional
	Warnings int32 `json:"warnings,omitempty"`

	// Errors is the number of errors logged for this restore.
	// +optional
	Errors int32 `json:"errors,omitempty"`

	// RestoreItemOperationsAttempted is the number of async restore operations started.
	// +optional
	RestoreItemOperationsAttempted int32 `json:"restoreItemOperationsAttempted,omitempty"`

	// RestoreItemOperationsCompleted is the number of async restore operations that completed.
	// +optional
	RestoreItemOperationsCompleted int32 `json:"restoreItemOperationsCompleted,omitempty"`

	// RestoreItemOperationsFailed is the number of async restore operations that failed.
	// +optional
	RestoreItemOperationsFailed int32 `json:"restoreItemOperationsFailed,omitempty"`

	// HookStatus counts the restore's exec hooks (those run, those failed), written once its
	// async operations, which run them, have ended.
	// +optional
	HookStatus *HookStatus `json:"hookStatus,omitempty"`

	// Conditions are the restore's observed conditions.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Restore brings a Backup of the same namespace back into the cluster (DESIGN.md section 9).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=cairn
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 200",message="a Restore's name may have at most 200 characters, so that its storage keys and file names fit S3's and filesystems' limits"
// +kubebuilder:printcolumn:name="Backup",type=string,JSONPath=`.status.backupName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Queue",type=integer,JSONPath=`.status.queuePosition`
// +kubebuilder:printcolumn:name="Progress",type=string,JSONPath=`.status.progress.summary`
// +kubebuilder:printcolumn:name="Errors",type=integer,JSONPath=`.status.errors`,priority=1
// +kubebuilder:printcolumn:name="Warnings",type=integer,JSONPath=`.status.warnings`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Failure",type=string,JSONPath=`.status.failureReason`,priority=1
type Restore struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec says which backup to restore, what of it, and how.
	// +required
	Spec RestoreSpec `json:"spec"`

	// Status is what Cairn observed and did.
	// +optional
	Status RestoreStatus `json:"status,omitempty"`
}

// EffectivePhase is the restore's phase, with the empty phase of a just-created restore read as New.
func (r *Restore) EffectivePhase() RestorePhase {
	if r.Status.Phase == "" {
		return RestorePhaseNew
	}
	return r.Status.Phase
}

// +kubebuilder:object:root=true

// RestoreList is a list of Restores.
type RestoreList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Restore `json:"items"`
}

// ItemFilters are the filters a Backup and a Restore share, with the same names and the same
// meaning (internal/backup's Selection applies them to both). It is not part of any CRD.
type ItemFilters struct {
	IncludedNamespaces      []string
	ExcludedNamespaces      []string
	IncludedResources       []string
	ExcludedResources       []string
	IncludeClusterResources *bool
	LabelSelector           *metav1.LabelSelector
	OrLabelSelectors        []*metav1.LabelSelector
}

// Filters returns the item filters of the backup.
func (s *BackupSpec) Filters() ItemFilters {
	return ItemFilters{
		IncludedNamespaces: s.IncludedNamespaces, ExcludedNamespaces: s.ExcludedNamespaces,
		IncludedResources: s.IncludedResources, ExcludedResources: s.ExcludedResources,
		IncludeClusterResources: s.IncludeClusterResources,
		LabelSelector:           s.LabelSelector, OrLabelSelectors: s.OrLabelSelectors,
	}
}
