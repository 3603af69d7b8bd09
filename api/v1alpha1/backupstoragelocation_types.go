package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StorageProvider names the kind of object store behind a location.
// +kubebuilder:validation:Enum=filesystem;s3
type StorageProvider string

const (
	// StorageProviderFilesystem keeps objects in a directory (config.path) of the operator's
	// filesystem.
	StorageProviderFilesystem StorageProvider = "filesystem"
	// StorageProviderS3 keeps objects in a bucket of any S3-compatible service.
	StorageProviderS3 StorageProvider = "s3"
)

// AccessMode says whether Cairn may write to a location.
// +kubebuilder:validation:Enum=ReadWrite;ReadOnly
type AccessMode string

const (
	// AccessModeReadWrite lets Cairn write backups to and delete them from the location.
	AccessModeReadWrite AccessMode = "ReadWrite"
	// AccessModeReadOnly refuses every write and delete.
	AccessModeReadOnly AccessMode = "ReadOnly"
)

// StorageLocationPhase says whether a location can be used.
// +kubebuilder:validation:Enum=Available;Unavailable
type StorageLocationPhase string

const (
	// StorageLocationPhaseAvailable is a location whose last validation succeeded.
	StorageLocationPhaseAvailable StorageLocationPhase = "Available"
	// StorageLocationPhaseUnavailable is a location whose last validation failed; the message says why.
	StorageLocationPhaseUnavailable StorageLocationPhase = "Unavailable"
)

// Keys of BackupStorageLocation.spec.config.
const (
	ConfigKeyPath                  = "path"
	ConfigKeyRegion                = "region"
	ConfigKeyEndpoint              = "endpoint"
	ConfigKeyForcePathStyle        = "forcePathStyle"
	ConfigKeyInsecureSkipTLSVerify = "insecureSkipTLSVerify"
)

// Condition types and reasons on a BackupStorageLocation.
const (
	// StorageLocationConditionDefaultConflict is True on every location that says default: true
	// while another one does too.
	StorageLocationConditionDefaultConflict = "DefaultConflict"
	ReasonMultipleDefaults                  = "MultipleDefaults"
	ReasonSingleDefault                     = "SingleDefault"
)

// ObjectStorage names the bucket and the prefix inside it.
type ObjectStorage struct {
	// Bucket is the bucket that holds the backups (s3).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Bucket string `json:"bucket,omitempty"`
	// Prefix is the path inside the bucket (or directory) under which Cairn writes.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Prefix string `json:"prefix,omitempty"`
}

// BackupStorageLocationSpec says where backups are stored.
//
// +kubebuilder:validation:XValidation:rule="self.provider != 's3' || (has(self.objectStorage) && has(self.objectStorage.bucket) && size(self.objectStorage.bucket) > 0)",message="an s3 location needs objectStorage.bucket"
// +kubebuilder:validation:XValidation:rule="self.provider != 'filesystem' || (has(self.config) && 'path' in self.config && size(self.config['path']) > 0)",message="a filesystem location needs config.path"
type BackupStorageLocationSpec struct {
	// Provider is the kind of object store: filesystem or s3.
	// +required
	Provider StorageProvider `json:"provider"`

	// ObjectStorage names the bucket and prefix.
	// +optional
	ObjectStorage *ObjectStorage `json:"objectStorage,omitempty"`

	// Config holds provider settings. filesystem: path. s3: region, endpoint, forcePathStyle,
	// insecureSkipTLSVerify.
	// +optional
	Config map[string]string `json:"config,omitempty"`

	// Credential names the key of a Secret, in the location's namespace, whose value is an AWS
	// shared-credentials file ([default] with aws_access_key_id and aws_secret_access_key).
	// +optional
	Credential *corev1.SecretKeySelector `json:"credential,omitempty"`

	// Default marks the location used by backups that name none. If several say so, the oldest
	// one stays the default.
	// +optional
	Default bool `json:"default,omitempty"`

	// AccessMode is ReadWrite or ReadOnly; a ReadOnly location refuses every write.
	// +optional
	// +kubebuilder:default=ReadWrite
	AccessMode AccessMode `json:"accessMode,omitempty"`

	// ValidationFrequency is how often the location is checked.
	// +optional
	// +kubebuilder:default="1m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	ValidationFrequency *metav1.Duration `json:"validationFrequency,omitempty"`
}

// BackupStorageLocationStatus is the result of the location's last validation.
type BackupStorageLocationStatus struct {
	// Phase is Available or Unavailable.
	// +optional
	Phase StorageLocationPhase `json:"phase,omitempty"`
	// Message says what is wrong with an Unavailable location, in words a person can act on.
	// +optional
	Message string `json:"message,omitempty"`
	// LastValidationTime is when the location was last checked.
	// +optional
	LastValidationTime *metav1.Time `json:"lastValidationTime,omitempty"`
	// Conditions are the location's observed conditions (DefaultConflict).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// BackupStorageLocation is a place where backups are stored.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=bsl,categories=cairn
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.provider`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Default",type=boolean,JSONPath=`.spec.default`
// +kubebuilder:printcolumn:name="Access",type=string,JSONPath=`.spec.accessMode`
// +kubebuilder:printcolumn:name="Last Validated",type=date,JSONPath=`.status.lastValidationTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BackupStorageLocation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec BackupStorageLocationSpec `json:"spec"`

	// +optional
	Status BackupStorageLocationStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// BackupStorageLocationList is a list of BackupStorageLocations.
type BackupStorageLocationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BackupStorageLocation `json:"items"`
}
