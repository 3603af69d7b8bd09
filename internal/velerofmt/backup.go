// Package velerofmt reads Velero's backups (DESIGN.md section 19, docs/migrating-from-velero.md):
// the conversion of a Velero Backup object, as Velero stores it in velero-backup.json, into the
// commit marker Cairn's sync and restore read (Marker, pure and table-tested), and Store, a
// read-only object store that shows a Velero bucket and prefix in Cairn's layout, so that sync,
// restore and downloads read a Velero location through the same code as a Cairn one.
package velerofmt

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/storage"
)

// Backup is the part of a Velero Backup object (velero.io/v1, the content of
// backups/<name>/velero-backup.json) that Cairn reads. Field names are Velero's.
type Backup struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   BackupMetadata `json:"metadata"`
	Spec       BackupSpec     `json:"spec"`
	Status     BackupStatus   `json:"status"`
}

// BackupMetadata is the Velero Backup's object metadata.
type BackupMetadata struct {
	Name   string            `json:"name"`
	UID    string            `json:"uid"`
	Labels map[string]string `json:"labels,omitempty"`
}

// BackupSpec is what Cairn keeps of a Velero Backup's spec: the fields whose names and meaning
// Cairn's BackupSpec shares. Velero's hooks, volume snapshot locations, resource policies and
// the rest describe how Velero ran the backup; they are not carried over.
type BackupSpec struct {
	IncludedNamespaces       []string                `json:"includedNamespaces,omitempty"`
	ExcludedNamespaces       []string                `json:"excludedNamespaces,omitempty"`
	IncludedResources        []string                `json:"includedResources,omitempty"`
	ExcludedResources        []string                `json:"excludedResources,omitempty"`
	IncludeClusterResources  *bool                   `json:"includeClusterResources,omitempty"`
	LabelSelector            *metav1.LabelSelector   `json:"labelSelector,omitempty"`
	OrLabelSelectors         []*metav1.LabelSelector `json:"orLabelSelectors,omitempty"`
	TTL                      *metav1.Duration        `json:"ttl,omitempty"`
	ItemOperationTimeout     *metav1.Duration        `json:"itemOperationTimeout,omitempty"`
	SnapshotVolumes          *bool                   `json:"snapshotVolumes,omitempty"`
	DefaultVolumesToFsBackup *bool                   `json:"defaultVolumesToFsBackup,omitempty"`
}

// BackupStatus is the Velero Backup's status.
type BackupStatus struct {
	FormatVersion                 string          `json:"formatVersion,omitempty"`
	Phase                         string          `json:"phase,omitempty"`
	Expiration                    *metav1.Time    `json:"expiration,omitempty"`
	StartTimestamp                *metav1.Time    `json:"startTimestamp,omitempty"`
	CompletionTimestamp           *metav1.Time    `json:"completionTimestamp,omitempty"`
	Warnings                      int             `json:"warnings,omitempty"`
	Errors                        int             `json:"errors,omitempty"`
	Progress                      *BackupProgress `json:"progress,omitempty"`
	BackupItemOperationsAttempted int             `json:"backupItemOperationsAttempted,omitempty"`
	BackupItemOperationsCompleted int             `json:"backupItemOperationsCompleted,omitempty"`
	BackupItemOperationsFailed    int             `json:"backupItemOperationsFailed,omitempty"`
}

// BackupProgress is Velero's count of items.
type BackupProgress struct {
	TotalItems    int64 `json:"totalItems,omitempty"`
	ItemsBackedUp int64 `json:"itemsBackedUp,omitempty"`
}

// The phases of a Velero backup that Cairn syncs; every other one (New, FailedValidation,
// InProgress, WaitingForPluginOperations*, Finalizing*, Failed, Deleting) is skipped.
const (
	PhaseCompleted       = "Completed"
	PhasePartiallyFailed = "PartiallyFailed"
)

// MaxBackupObjectSize bounds the velero-backup.json a reader accepts, as storage.MaxMetadataSize
// bounds Cairn's commit marker.
const MaxBackupObjectSize = storage.MaxMetadataSize

var (
	// ErrNotVeleroBackup means velero-backup.json does not hold a Velero Backup object.
	ErrNotVeleroBackup = errors.New("not a Velero Backup object")
	// ErrPhaseSkipped means a Velero backup's phase is not one Cairn syncs.
	ErrPhaseSkipped = errors.New("not a Completed or PartiallyFailed Velero backup")
)

// Parse decodes velero-backup.json.
func Parse(data []byte) (Backup, error) {
	var b Backup
	if len(data) > MaxBackupObjectSize {
		return b, fmt.Errorf("%w: larger than %d bytes", ErrNotVeleroBackup, MaxBackupObjectSize)
	}
	if err := json.Unmarshal(data, &b); err != nil {
		return b, fmt.Errorf("%w: %w", ErrNotVeleroBackup, err)
	}
	if b.Kind != "Backup" || b.APIVersion != "velero.io/v1" {
		return b, fmt.Errorf("%w: kind %q, apiVersion %q (want Backup, velero.io/v1)", ErrNotVeleroBackup, b.Kind, b.APIVersion)
	}
	return b, nil
}

// Marker is the commit marker Cairn's sync and restore read for Velero backup vb, shown as the
// backup namespace/name of the cluster (the operator's namespace; the name is vb's, or its
// rename, Rename): its phase, times, counts, labels and expiration, its spec as a Cairn
// BackupSpec (the filters, ttl, itemOperationTimeout and volume settings, which Cairn's
// fields share with Velero's), and the Velero Backup's UID as the origin. It records no
// archive digest: Velero writes none (storage.ArchiveDigest.Unverified). A backup in another
// phase than Completed or PartiallyFailed is ErrPhaseSkipped, naming its phase.
func Marker(vb Backup, namespace, name string) (storage.BackupMetadata, error) {
	switch vb.Status.Phase {
	case PhaseCompleted, PhasePartiallyFailed:
	default:
		phase := vb.Status.Phase
		if phase == "" {
			phase = "New"
		}
		return storage.BackupMetadata{}, fmt.Errorf("Velero backup %s has phase %s: %w", vb.Metadata.Name, phase, ErrPhaseSkipped) //nolint:staticcheck // Velero is a name
	}
	spec, err := json.Marshal(cairnv1.BackupSpec{
		IncludedNamespaces:       vb.Spec.IncludedNamespaces,
		ExcludedNamespaces:       vb.Spec.ExcludedNamespaces,
		IncludedResources:        vb.Spec.IncludedResources,
		ExcludedResources:        vb.Spec.ExcludedResources,
		IncludeClusterResources:  vb.Spec.IncludeClusterResources,
		LabelSelector:            vb.Spec.LabelSelector,
		OrLabelSelectors:         vb.Spec.OrLabelSelectors,
		TTL:                      vb.Spec.TTL,
		ItemOperationTimeout:     vb.Spec.ItemOperationTimeout,
		SnapshotVolumes:          vb.Spec.SnapshotVolumes,
		DefaultVolumesToFsBackup: vb.Spec.DefaultVolumesToFsBackup,
	})
	if err != nil {
		return storage.BackupMetadata{}, fmt.Errorf("encoding the spec of Velero backup %s: %w", vb.Metadata.Name, err)
	}
	m := storage.BackupMetadata{
		FormatVersion: vb.Status.FormatVersion,
		Namespace:     namespace, Name: name, UID: vb.Metadata.UID,
		Phase:    vb.Status.Phase,
		Warnings: vb.Status.Warnings, Errors: vb.Status.Errors,
		Spec:                spec,
		Labels:              maps.Clone(vb.Metadata.Labels),
		OperationsAttempted: vb.Status.BackupItemOperationsAttempted,
		OperationsCompleted: vb.Status.BackupItemOperationsCompleted,
		OperationsFailed:    vb.Status.BackupItemOperationsFailed,
	}
	if m.FormatVersion == "" {
		// Velero before 1.x's format field; its archives are format 1.
		m.FormatVersion = "1.0.0"
	}
	m.StartTimestamp = timeOf(vb.Status.StartTimestamp)
	m.CompletionTimestamp = timeOf(vb.Status.CompletionTimestamp)
	if m.CompletionTimestamp.IsZero() {
		m.CompletionTimestamp = m.StartTimestamp
	}
	m.Expiration = timeOf(vb.Status.Expiration)
	if p := vb.Status.Progress; p != nil {
		m.TotalItems, m.ItemsBackedUp = p.TotalItems, p.ItemsBackedUp
	}
	return m, nil
}

func timeOf(t *metav1.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// RenamePrefix begins the name a Velero backup gets in the cluster when a Backup that is not
// from its location holds its own name (Rename).
const RenamePrefix = "velero-"

// Rename is the name a Velero backup gets in the cluster when its own is held by a Backup of
// another origin: "velero-<name>". It depends on the name alone, so every sync pass (and every
// cluster) picks the same one; Store finds the Velero backup under either name.
func Rename(name string) string { return RenamePrefix + name }
