package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// DownloadTargetKind names one file of a backup or a restore.
// +kubebuilder:validation:Enum=BackupLog;BackupContents;BackupResults;BackupResourceList;BackupItemOperations;RestoreLog;RestoreResults;RestoreResourceList
type DownloadTargetKind string

const (
	// DownloadTargetBackupLog is a backup's log, <name>-logs.gz.
	DownloadTargetBackupLog DownloadTargetKind = "BackupLog"
	// DownloadTargetBackupContents is a backup's archive, <name>.tar.gz.
	DownloadTargetBackupContents DownloadTargetKind = "BackupContents"
	// DownloadTargetBackupResults is a backup's warnings and errors, <name>-results.json.gz.
	DownloadTargetBackupResults DownloadTargetKind = "BackupResults"
	// DownloadTargetBackupResourceList is the list of what a backup holds, <name>-resource-list.json.gz.
	DownloadTargetBackupResourceList DownloadTargetKind = "BackupResourceList"
	// DownloadTargetBackupItemOperations is a backup's async plugin operations, <name>-itemoperations.json.gz.
	DownloadTargetBackupItemOperations DownloadTargetKind = "BackupItemOperations"
	// DownloadTargetRestoreLog is a restore's log, <name>-logs.gz.
	DownloadTargetRestoreLog DownloadTargetKind = "RestoreLog"
	// DownloadTargetRestoreResults is a restore's warnings and errors per namespace, <name>-results.gz.
	DownloadTargetRestoreResults DownloadTargetKind = "RestoreResults"
	// DownloadTargetRestoreResourceList is what a restore created, updated and skipped, <name>-resource-list.json.gz.
	DownloadTargetRestoreResourceList DownloadTargetKind = "RestoreResourceList"
)

// IsRestoreFile reports whether the kind names a restore's file rather than a backup's.
func (k DownloadTargetKind) IsRestoreFile() bool {
	switch k {
	case DownloadTargetRestoreLog, DownloadTargetRestoreResults, DownloadTargetRestoreResourceList:
		return true
	}
	return false
}

// DownloadRequestPhase is where a DownloadRequest is.
// +kubebuilder:validation:Enum=New;Processed;Failed
type DownloadRequestPhase string

const (
	// DownloadRequestPhaseNew is a request not yet answered.
	DownloadRequestPhaseNew DownloadRequestPhase = "New"
	// DownloadRequestPhaseProcessed is a request answered with a URL in status.downloadURL.
	DownloadRequestPhaseProcessed DownloadRequestPhase = "Processed"
	// DownloadRequestPhaseFailed is a request that cannot be answered; status.message says why.
	DownloadRequestPhaseFailed DownloadRequestPhase = "Failed"
)

// ConfigKeyPublicURL is the config key of an s3, azure or gcs location that replaces its endpoint in the
// URLs given to clients outside the cluster (download URLs), such as https://s3.example.com
// when config.endpoint is an in-cluster Service.
const ConfigKeyPublicURL = "publicURL"

// DownloadTarget names the file: its kind, and the backup or restore, in the request's own
// namespace, it belongs to.
type DownloadTarget struct {
	// Kind is which file of the backup or restore.
	// +required
	Kind DownloadTargetKind `json:"kind"`

	// Name is the name of the backup (Backup* kinds) or restore (Restore* kinds), in the
	// DownloadRequest's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// DownloadRequestSpec says which file is wanted. It cannot be changed once created.
type DownloadRequestSpec struct {
	// Target is the file.
	// +required
	Target DownloadTarget `json:"target"`
}

// DownloadRequestStatus is the answer.
type DownloadRequestStatus struct {
	// Phase is New until the request is answered, then Processed or Failed.
	// +optional
	Phase DownloadRequestPhase `json:"phase,omitempty"`

	// DownloadURL reads the file with a plain GET until Expiration, without credentials:
	// whoever can read it can read the file.
	// +optional
	DownloadURL string `json:"downloadURL,omitempty"`

	// Expiration is when the URL stops working and the request is deleted.
	// +optional
	Expiration *metav1.Time `json:"expiration,omitempty"`

	// Message says why a request Failed.
	// +optional
	Message string `json:"message,omitempty"`
}

// DownloadRequest asks for a URL that reads one file of a backup or restore in its own
// namespace (DESIGN.md section 12). Whoever may create one in a namespace may read that
// namespace's backups.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=cairn
// +kubebuilder:validation:XValidation:rule="self.spec == oldSelf.spec",message="spec is immutable: create another DownloadRequest"
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.target.kind`
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.target.name`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Expires",type=string,JSONPath=`.status.expiration`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DownloadRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec names the file.
	// +required
	Spec DownloadRequestSpec `json:"spec"`

	// Status is the answer.
	// +optional
	Status DownloadRequestStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// DownloadRequestList is a list of DownloadRequests.
type DownloadRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DownloadRequest `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(GroupVersion, &DownloadRequest{}, &DownloadRequestList{})
		return nil
	})
}
