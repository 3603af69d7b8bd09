package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StorageProvider names the kind of object store behind a location.
// +kubebuilder:validation:Enum=filesystem;s3;azure;gcs
type StorageProvider string

const (
	// StorageProviderFilesystem keeps objects in a directory (config.path) of the operator's
	// filesystem.
	StorageProviderFilesystem StorageProvider = "filesystem"
	// StorageProviderS3 keeps objects in a bucket of any S3-compatible service.
	StorageProviderS3 StorageProvider = "s3"
	// StorageProviderAzure keeps objects in a blob container (objectStorage.bucket) of an Azure
	// storage account (config.storageAccount).
	StorageProviderAzure StorageProvider = "azure"
	// StorageProviderGCS keeps objects in a Google Cloud Storage bucket.
	StorageProviderGCS StorageProvider = "gcs"
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

// LocationFormat names the layout of the backups under a location's prefix.
// +kubebuilder:validation:Enum=cairn;velero
type LocationFormat string

const (
	// LocationFormatCairn is Cairn's own layout (docs/format.md): Cairn writes and reads it.
	LocationFormatCairn LocationFormat = "cairn"
	// LocationFormatVelero is Velero's layout (backups/<name>/velero-backup.json and the files
	// beside it): Cairn only reads it, syncing each Completed or PartiallyFailed Velero backup
	// as a Backup of the operator's namespace (docs/migrating-from-velero.md). Such a location
	// must be ReadOnly.
	LocationFormatVelero LocationFormat = "velero"
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
	// ConfigKeyStorageAccount is an azure location's storage account (Velero's Azure plugin's
	// name for it).
	ConfigKeyStorageAccount = "storageAccount"
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
	// Bucket is the bucket that holds the backups (s3, gcs), or the blob container (azure): a
	// bucket name as S3 defines it, which both GCS and Azure containers accept but for '.'
	// (not in an Azure container's name).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == '' || (size(self) >= 3 && self.matches('^[a-z0-9][a-z0-9.-]*[a-z0-9]$') && !self.contains('..') && !self.matches('^[0-9]+[.][0-9]+[.][0-9]+[.][0-9]+$'))",message="objectStorage.bucket must be an S3 bucket name: 3 to 63 lowercase letters, digits, '.' and '-', beginning and ending with a letter or digit, without '..', and not an IP address"
	Bucket string `json:"bucket,omitempty"`
	// Prefix is the path inside the bucket (or directory) under which Cairn writes: relative,
	// made of letters, digits, '-', '_', '.' and '/', with no empty, '.' or '..' segment, so
	// that no key can climb out of it or name the same place as another prefix. At most 256
	// characters, which leaves the longest backup key within S3's 1024 bytes.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/')",message="objectStorage.prefix must be relative to the bucket: remove the leading '/'"
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9._/-]*$')",message="objectStorage.prefix may contain only letters, digits, '-', '_', '.' and '/'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('(^|/)[.][.]?(/|$)')",message="objectStorage.prefix must not have a '.' or '..' path segment: every key must stay under the prefix"
	// +kubebuilder:validation:XValidation:rule="!self.contains('//')",message="objectStorage.prefix must not have an empty path segment ('//')"
	Prefix string `json:"prefix,omitempty"`
}

// BackupStorageLocationSpec says where backups are stored.
//
// +kubebuilder:validation:XValidation:rule="self.provider != 's3' || (has(self.objectStorage) && has(self.objectStorage.bucket) && size(self.objectStorage.bucket) > 0)",message="an s3 location needs objectStorage.bucket"
// +kubebuilder:validation:XValidation:rule="self.provider != 'filesystem' || (has(self.config) && 'path' in self.config && size(self.config['path']) > 0)",message="a filesystem location needs config.path"
// +kubebuilder:validation:XValidation:rule="self.provider != 'azure' || (has(self.objectStorage) && has(self.objectStorage.bucket) && size(self.objectStorage.bucket) > 0)",message="an azure location needs objectStorage.bucket: the name of its blob container"
// +kubebuilder:validation:XValidation:rule="self.provider != 'azure' || (has(self.config) && 'storageAccount' in self.config && self.config['storageAccount'].matches('^[a-z0-9]{3,24}$'))",message="an azure location needs config.storageAccount: its storage account's name, 3 to 24 lowercase letters and digits"
// +kubebuilder:validation:XValidation:rule="self.provider != 'gcs' || (has(self.objectStorage) && has(self.objectStorage.bucket) && size(self.objectStorage.bucket) > 0)",message="a gcs location needs objectStorage.bucket"
// +kubebuilder:validation:XValidation:rule="has(self.encryption) == has(oldSelf.encryption)",message="encryption is chosen when a location is created: it cannot be turned on or off later (make another location); only encryption.writeKey may change"
// +kubebuilder:validation:XValidation:rule="!has(self.objectLock) || self.provider in ['s3', 'azure', 'gcs']",message="objectLock needs an s3 bucket with Object Lock, an azure container with version-level immutability or a gcs bucket with object retention: a filesystem location cannot lock its objects (docs/storage.md)"
// +kubebuilder:validation:XValidation:rule="has(self.objectLock) == has(oldSelf.objectLock)",message="objectLock is chosen when a location is created: it cannot be turned on or off later (make another location); only objectLock.minRetention may change"
// +kubebuilder:validation:XValidation:rule="(has(self.format) ? self.format : 'cairn') == (has(oldSelf.format) ? oldSelf.format : 'cairn')",message="format is chosen when a location is created: it cannot change (make another location)"
// +kubebuilder:validation:XValidation:rule="!has(self.format) || self.format != 'velero' || self.accessMode == 'ReadOnly'",message="a location with format velero must have accessMode ReadOnly: Cairn never writes to a Velero bucket"
// +kubebuilder:validation:XValidation:rule="!has(self.format) || self.format != 'velero' || !has(self.encryption)",message="a location with format velero cannot have encryption: Velero's objects are not encrypted by Cairn"
// +kubebuilder:validation:XValidation:rule="!has(self.velero) || (has(self.format) && self.format == 'velero')",message="velero settings apply only to a location with format velero"
// +kubebuilder:validation:XValidation:rule="!has(self.teamLimits) || !has(self.teamLimits.maxLockRetention) || has(self.objectLock)",message="teamLimits.maxLockRetention bounds Object Lock retention: it applies only to a location with objectLock"
// +kubebuilder:validation:XValidation:rule="!has(self.teamLimits) || !has(self.teamLimits.maxLockRetention) || !has(self.objectLock) || duration(self.teamLimits.maxLockRetention) >= duration(self.objectLock.minRetention)",message="teamLimits.maxLockRetention must be at least objectLock.minRetention: every backup is locked for minRetention"
type BackupStorageLocationSpec struct {
	// Format is the layout of the backups under the prefix: cairn (the default; Cairn's own)
	// or velero (a Velero backup storage location's bucket and prefix, read only: each
	// Completed or PartiallyFailed Velero backup is synced as a Backup of the operator's
	// namespace and can be restored; docs/migrating-from-velero.md). Set when the location is
	// created; a velero location must be ReadOnly.
	// +optional
	// +kubebuilder:default=cairn
	Format LocationFormat `json:"format,omitempty"`

	// Provider is the kind of object store: filesystem, s3, azure (Azure Blob Storage) or gcs
	// (Google Cloud Storage).
	// +required
	Provider StorageProvider `json:"provider"`

	// ObjectStorage names the bucket and prefix.
	// +optional
	ObjectStorage *ObjectStorage `json:"objectStorage,omitempty"`

	// Config holds provider settings. filesystem: path. s3: region, endpoint, forcePathStyle,
	// insecureSkipTLSVerify. azure: storageAccount (required), endpoint (the account's blob
	// service URL; default https://<storageAccount>.blob.core.windows.net). gcs: endpoint (the
	// service's scheme, host and port; default Google's). s3, azure and gcs: publicURL
	// (DownloadRequests). docs/storage.md describes each.
	// +optional
	Config map[string]string `json:"config,omitempty"`

	// Credential names the key of a Secret, in the location's namespace, holding the
	// location's credentials. s3: an AWS shared-credentials file ([default] with
	// aws_access_key_id and aws_secret_access_key). azure: lines of NAME=value with
	// AZURE_STORAGE_ACCOUNT_ACCESS_KEY (the account's shared key) or AZURE_STORAGE_SAS_TOKEN.
	// gcs: a service account's JSON key. Without it, an azure location uses the Azure SDK's
	// default credential chain (workload or managed identity) and a gcs location Google's
	// default credentials (GKE workload identity).
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

	// ValidationFrequency is how often the location is checked: 0s turns the periodic check off
	// (the location is still checked when it or its Secret changes), else from 1s to 87600h.
	// +optional
	// +kubebuilder:default="1m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self != '' && self.matches('^([0-9]{1,5}([.][0-9]+)?h)?([0-9]{1,7}([.][0-9]+)?m)?([0-9]{1,9}([.][0-9]+)?s)?([0-9]{1,12}([.][0-9]+)?ms)?([0-9]{1,15}([.][0-9]+)?(us|µs|μs))?([0-9]{1,18}([.][0-9]+)?ns)?$') && (duration(self) == duration('0s') || duration(self) >= duration('1s')) && duration(self) <= duration('87600h')",message="validationFrequency must be 0s (off) or a duration from 1s to 87600h (10 years), such as 1m or 1h"
	ValidationFrequency *metav1.Duration `json:"validationFrequency,omitempty"`

	// BackupSyncPeriod is how often the location's committed backups are synced into the
	// cluster (docs/disaster-recovery.md): Backup objects are created for those the cluster
	// lacks, and backups whose data is gone are marked DataAvailable=False. 0s turns sync off;
	// else from 1s to 87600h. Unset means the manager's --backup-sync-period (1m unless changed).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self != '' && self.matches('^([0-9]{1,5}([.][0-9]+)?h)?([0-9]{1,7}([.][0-9]+)?m)?([0-9]{1,9}([.][0-9]+)?s)?([0-9]{1,12}([.][0-9]+)?ms)?([0-9]{1,15}([.][0-9]+)?(us|µs|μs))?([0-9]{1,18}([.][0-9]+)?ns)?$') && (duration(self) == duration('0s') || duration(self) >= duration('1s')) && duration(self) <= duration('87600h')",message="backupSyncPeriod must be 0s (off) or a duration from 1s to 87600h (10 years), such as 1m or 1h"
	BackupSyncPeriod *metav1.Duration `json:"backupSyncPeriod,omitempty"`

	// Encryption, when set, encrypts every object Cairn writes to the location on the client
	// (docs/storage.md); volume data is encrypted by its repository. It is set when the
	// location is created and cannot be removed or added later.
	// +optional
	Encryption *LocationEncryption `json:"encryption,omitempty"`

	// ObjectLock, when set, locks every committed object of the location (docs/storage.md):
	// with S3 Object Lock, an Azure version-level immutability policy or GCS object retention,
	// so that nothing, Cairn included, can delete or overwrite it before its retain-until
	// date, which is the backup's expiration, and at least minRetention after the backup was
	// committed. The s3 bucket must have Object Lock enabled, the azure container
	// version-level immutability support, the gcs bucket object retention. Not for
	// filesystem locations; set when the location is created and cannot be removed or added
	// later.
	// +optional
	ObjectLock *LocationObjectLock `json:"objectLock,omitempty"`

	// Velero holds what Cairn needs to read more of a Velero location (format velero) than
	// its backups: the password of Velero's volume data repositories.
	// +optional
	Velero *VeleroLocation `json:"velero,omitempty"`

	// TeamLimits bound what backups in team namespaces (every namespace but the operator's)
	// may ask of the location (docs/storage.md, "Limits for teams"): which namespaces may use
	// it, the longest ttl, and the longest Object Lock retention. A team Backup or Schedule
	// outside them is FailedValidation, naming the limit. Backups in the operator's namespace
	// are an administrator's, and are not limited. Unset: no limits.
	// +optional
	TeamLimits *LocationTeamLimits `json:"teamLimits,omitempty"`
}

// LocationTeamLimits are what a location allows backups in team namespaces.
type LocationTeamLimits struct {
	// NamespaceSelector selects, by their labels, the team namespaces whose backups may use
	// the location (kubernetes.io/metadata.name is every namespace's name). Unset: all.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// MaxTTL is the longest ttl a team backup may ask for (spec.ttl, or the manager's
	// --default-backup-ttl when it sets none). A ttl of 0s, never to expire, is longer than
	// any; so is a Schedule's retention, whose backups never expire. From 1s to 87600h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self != '' && self.matches('^([0-9]{1,5}([.][0-9]+)?h)?([0-9]{1,7}([.][0-9]+)?m)?([0-9]{1,9}([.][0-9]+)?s)?([0-9]{1,12}([.][0-9]+)?ms)?([0-9]{1,15}([.][0-9]+)?(us|µs|μs))?([0-9]{1,18}([.][0-9]+)?ns)?$') && duration(self) >= duration('1s') && duration(self) <= duration('87600h')",message="teamLimits.maxTTL must be a duration from 1s to 87600h (10 years), such as 720h"
	MaxTTL *metav1.Duration `json:"maxTTL,omitempty"`

	// MaxLockRetention is the longest a team backup may have its objects locked by the
	// location's Object Lock: a backup is locked until it expires, and at least
	// objectLock.minRetention, so this bounds its ttl on such a location. At least
	// objectLock.minRetention; only with objectLock. From 1s to 87600h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self != '' && self.matches('^([0-9]{1,5}([.][0-9]+)?h)?([0-9]{1,7}([.][0-9]+)?m)?([0-9]{1,9}([.][0-9]+)?s)?([0-9]{1,12}([.][0-9]+)?ms)?([0-9]{1,15}([.][0-9]+)?(us|µs|μs))?([0-9]{1,18}([.][0-9]+)?ns)?$') && duration(self) >= duration('1s') && duration(self) <= duration('87600h')",message="teamLimits.maxLockRetention must be a duration from 1s to 87600h (10 years), such as 2160h"
	MaxLockRetention *metav1.Duration `json:"maxLockRetention,omitempty"`
}

// VeleroLocation is what Cairn needs to restore the volume data of a Velero location.
type VeleroLocation struct {
	// RepositoryPasswordSecretRef names the key of a Secret, in the location's namespace,
	// holding the password of Velero's kopia repositories under <prefix>/kopia/ (Velero keeps
	// it in its Secret velero-repo-credentials, key repository-password; unless it was
	// changed, it is Velero's default, static-passw0rd). Without it, a restore of a Velero
	// backup does not restore the pods whose volumes Velero copied
	// (docs/migrating-from-velero.md, "Volume data").
	// +optional
	RepositoryPasswordSecretRef *SecretKeyReference `json:"repositoryPasswordSecretRef,omitempty"`
}

// SecretKeyReference names a key of a Secret in the same namespace.
type SecretKeyReference struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`
}

// ObjectLockMode is the retention mode of a location's objects: S3 Object Lock's mode, or on
// Azure and GCS an Unlocked (Governance) or Locked (Compliance) policy.
// +kubebuilder:validation:Enum=Governance;Compliance
type ObjectLockMode string

const (
	// ObjectLockModeGovernance: a user with the s3:BypassGovernanceRetention permission may
	// still delete a locked object or shorten its retention; nobody else can.
	ObjectLockModeGovernance ObjectLockMode = "Governance"
	// ObjectLockModeCompliance: nobody, the bucket's root account included, can delete a locked
	// object or shorten its retention before its date.
	ObjectLockModeCompliance ObjectLockMode = "Compliance"
)

// LocationObjectLock is how a location's committed objects are locked.
type LocationObjectLock struct {
	// Mode is Governance or Compliance (S3's retention modes).
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="objectLock.mode cannot change: objects already locked keep their mode; make another location"
	Mode ObjectLockMode `json:"mode"`
	// MinRetention is the shortest time a committed backup stays locked: each backup's
	// objects are retained until its expiration, or until minRetention after it was
	// committed when that is later (always, for a backup that never expires). From 1s to
	// 87600h (10 years); a change applies to backups committed afterwards.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self != '' && self.matches('^([0-9]{1,5}([.][0-9]+)?h)?([0-9]{1,7}([.][0-9]+)?m)?([0-9]{1,9}([.][0-9]+)?s)?([0-9]{1,12}([.][0-9]+)?ms)?([0-9]{1,15}([.][0-9]+)?(us|µs|μs))?([0-9]{1,18}([.][0-9]+)?ns)?$') && duration(self) >= duration('1s') && duration(self) <= duration('87600h')",message="objectLock.minRetention must be a duration from 1s to 87600h (10 years), such as 720h"
	MinRetention metav1.Duration `json:"minRetention"`
}

// LocationEncryption names the keys of an encrypted location.
type LocationEncryption struct {
	// KeySecretRef names the Secret, in the location's namespace, whose data keys are key
	// names and whose values are 32-byte keys (kubectl create secret generic enc
	// --from-file=k1=<(openssl rand 32)).
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="encryption.keySecretRef cannot change: add keys to the Secret instead"
	KeySecretRef LocalSecretReference `json:"keySecretRef"`
	// WriteKey is the key new objects are written with; objects record the key they were
	// written with, so changing it (with the old key kept in the Secret) rotates keys.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._-]+$`
	WriteKey string `json:"writeKey"`
}

// LocalSecretReference names a Secret in the same namespace.
type LocalSecretReference struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
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
	// LastSyncedTime is when the location's committed backups were last synced into the
	// cluster. A pass that changes nothing refreshes it at most every few minutes, so that an
	// idle sync costs no API writes.
	// +optional
	LastSyncedTime *metav1.Time `json:"lastSyncedTime,omitempty"`
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
// +kubebuilder:printcolumn:name="Format",type=string,JSONPath=`.spec.format`,priority=1
// +kubebuilder:printcolumn:name="Last Validated",type=date,JSONPath=`.status.lastValidationTime`
// +kubebuilder:printcolumn:name="Last Synced",type=date,JSONPath=`.status.lastSyncedTime`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1
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
