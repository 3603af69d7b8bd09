package backupsync

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/validation"
)

// Marker is the commit marker of backup b, which ends in phase final at completed: the
// archive's digest and format, and all a cluster that syncs the location needs to show the
// backup (its spec and labels, its final status, and its UID, the origin of its data). The
// finalizer writes it; Object and Status read it back.
func Marker(b *cairnv1.Backup, final cairnv1.BackupPhase, formatVersion string, digest storage.ArchiveDigest, completed time.Time, warnings int) (storage.BackupMetadata, error) {
	spec, err := json.Marshal(b.Spec)
	if err != nil {
		return storage.BackupMetadata{}, fmt.Errorf("encoding the spec of backup %s/%s: %w", b.Namespace, b.Name, err)
	}
	m := storage.BackupMetadata{
		FormatVersion: formatVersion, Namespace: b.Namespace, Name: b.Name, UID: DataUID(b),
		Phase: string(final), ArchiveSHA256: digest.SHA256, ArchiveSize: digest.Size,
		CompletionTimestamp: completed, Warnings: warnings, Errors: int(b.Status.Errors),
		Spec: spec, Labels: maps.Clone(b.Labels),
		OperationsAttempted: int(b.Status.BackupItemOperationsAttempted),
		OperationsCompleted: int(b.Status.BackupItemOperationsCompleted),
		OperationsFailed:    int(b.Status.BackupItemOperationsFailed),
	}
	if b.Status.StartTimestamp != nil {
		m.StartTimestamp = b.Status.StartTimestamp.Time
	}
	if b.Status.Expiration != nil {
		m.Expiration = b.Status.Expiration.Time
	}
	if p := b.Status.Progress; p != nil {
		m.TotalItems, m.ItemsBackedUp = p.TotalItems, p.ItemsBackedUp
	}
	return m, nil
}

// Object is the Backup object that stands for committed backup c of location in the cluster,
// made from its commit marker m: in c's namespace, under c's name, with the spec and labels the
// marker records (the spec naming this cluster's location, and never cancelled), the label
// cairn.dev/storage-location, the annotation cairn.dev/synced-from, and the data finalizer.
// Its status comes after (Status). It refuses a marker that names another backup than the key
// it was found under, that is not of a restorable backup, or whose spec would break the
// tenancy rule in c's namespace: a stored marker never puts another namespace's backup into a
// team's namespace.
func Object(c storage.CommittedBackup, m storage.BackupMetadata, location, operatorNamespace string) (*cairnv1.Backup, error) {
	if problem := CheckName(c); problem != "" {
		return nil, fmt.Errorf("not a Backup's %s", problem)
	}
	if (m.Namespace != "" && m.Namespace != c.Namespace) || (m.Name != "" && m.Name != c.Name) {
		return nil, fmt.Errorf("its commit marker names backup %s/%s, not %s/%s", m.Namespace, m.Name, c.Namespace, c.Name)
	}
	if err := checkPhase(m); err != nil {
		return nil, err
	}
	var spec cairnv1.BackupSpec
	if len(m.Spec) > 0 {
		if err := json.Unmarshal(m.Spec, &spec); err != nil {
			return nil, fmt.Errorf("its commit marker's spec cannot be read: %w", err)
		}
	}
	spec.Cancel = false
	spec.StorageLocation = location
	if errs := validation.Tenancy("backup", c.Namespace, spec.Filters(), operatorNamespace); len(errs) > 0 {
		return nil, fmt.Errorf("its spec breaks the tenancy rule in namespace %s: %s", c.Namespace, strings.Join(errs, "; "))
	}
	labels := maps.Clone(m.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[cairnv1.StorageLocationLabel] = location
	return &cairnv1.Backup{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   c.Namespace,
			Name:        c.Name,
			Labels:      labels,
			Annotations: map[string]string{cairnv1.SyncedFromAnnotation: location},
			Finalizers:  []string{cairnv1.BackupDataFinalizer},
		},
		Spec: spec,
	}, nil
}

// Status is the terminal status of a backup synced from location, from its commit marker m,
// with DataAvailable=True observed at now. A marker of a backup that is not restorable is an
// error. A marker written before it recorded a start keeps the completion as the start, so
// that deleting the backup deletes its data.
func Status(m storage.BackupMetadata, location string, generation int64, now time.Time) (cairnv1.BackupStatus, error) {
	if err := checkPhase(m); err != nil {
		return cairnv1.BackupStatus{}, err
	}
	completed := metav1.NewTime(m.CompletionTimestamp)
	started := completed
	if !m.StartTimestamp.IsZero() {
		started = metav1.NewTime(m.StartTimestamp)
	}
	s := cairnv1.BackupStatus{
		Phase:                         cairnv1.BackupPhase(m.Phase),
		StorageLocation:               location,
		StartTimestamp:                &started,
		CompletionTimestamp:           &completed,
		Progress:                      cairnv1.NewBackupProgress(m.ItemsBackedUp, m.TotalItems),
		Warnings:                      int32(m.Warnings),
		Errors:                        int32(m.Errors),
		BackupItemOperationsAttempted: int32(m.OperationsAttempted),
		BackupItemOperationsCompleted: int32(m.OperationsCompleted),
		BackupItemOperationsFailed:    int32(m.OperationsFailed),
		ArchiveSHA256:                 m.ArchiveSHA256,
		ArchiveSize:                   m.ArchiveSize,
		FormatVersion:                 m.FormatVersion,
		OriginUID:                     m.UID,
		Conditions: []metav1.Condition{
			DataCondition(true, location, generation, now),
		},
	}
	if !m.Expiration.IsZero() {
		expiration := metav1.NewTime(m.Expiration)
		s.Expiration = &expiration
	}
	return s, nil
}

// DataCondition is the DataAvailable condition of a backup whose commit marker is (found) or
// is not in location.
func DataCondition(found bool, location string, generation int64, now time.Time) metav1.Condition {
	c := metav1.Condition{
		Type: cairnv1.BackupConditionDataAvailable, Status: metav1.ConditionTrue, Reason: cairnv1.ReasonFoundInStorage,
		Message:            fmt.Sprintf("The backup's commit marker is in storage location %s", location),
		ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now),
	}
	if !found {
		c.Status, c.Reason = metav1.ConditionFalse, cairnv1.ReasonNotFoundInStorage
		c.Message = fmt.Sprintf("The backup's data is not in storage location %s any more (its commit marker is gone): it cannot be restored, and deleting it touches no storage", location)
	}
	return c
}

// checkPhase refuses a marker whose backup is not restorable, or whose status the API server
// would refuse (a marker Cairn did not write).
func checkPhase(m storage.BackupMetadata) error {
	switch cairnv1.BackupPhase(m.Phase) {
	case cairnv1.BackupPhaseCompleted, cairnv1.BackupPhasePartiallyFailed:
	default:
		return fmt.Errorf("its commit marker has phase %q, not Completed or PartiallyFailed", m.Phase)
	}
	switch {
	case len(m.ArchiveSHA256) > maxSHA256Length || len(m.UID) > maxUIDLength || len(m.FormatVersion) > maxUIDLength:
		return fmt.Errorf("its commit marker's checksum, UID or format version is too long")
	case !fitsInt32(m.Warnings, m.Errors, m.OperationsAttempted, m.OperationsCompleted, m.OperationsFailed) ||
		m.TotalItems < 0 || m.ItemsBackedUp < 0 || m.ArchiveSize < 0:
		return fmt.Errorf("its commit marker's counts are out of range")
	}
	return nil
}

// The bounds of the status fields a marker fills (the CRD's).
const (
	maxSHA256Length = 64
	maxUIDLength    = 128
)

func fitsInt32(counts ...int) bool {
	for _, n := range counts {
		if n < 0 || n > math.MaxInt32 {
			return false
		}
	}
	return true
}
