package v1alpha1

// Backups synced from a location with format velero (docs/migrating-from-velero.md).
const (
	// VeleroBackupNameAnnotation is the name of the Velero backup a Backup was synced from. A
	// Backup with it has its data in a Velero bucket that Cairn never writes: deleting the
	// Backup removes only the object, as cairn.dev/keep-data does.
	VeleroBackupNameAnnotation = "cairn.dev/velero-backup-name"
	// VeleroBackupUIDAnnotation is the UID of the Velero Backup object it was synced from.
	VeleroBackupUIDAnnotation = "cairn.dev/velero-backup-uid"

	// RestoreConditionArchiveVerified says whether the archive a restore read was checked
	// against a digest recorded when it was written. It is False (reason NoRecordedDigest)
	// for a backup synced from a Velero location: Velero records none, so the archive was
	// only read to its end, as a gzip-compressed tar, before anything was created.
	RestoreConditionArchiveVerified = "ArchiveVerified"
	// ReasonDigestMatched: the archive's SHA-256 and size are those its commit marker records.
	ReasonDigestMatched = "DigestMatched"
	// ReasonNoRecordedDigest: the backup's storage records no digest of its archive.
	ReasonNoRecordedDigest = "NoRecordedDigest"
)

// IsFromVelero reports whether a Backup was synced from a Velero location.
func (b *Backup) IsFromVelero() bool {
	return b.Annotations[VeleroBackupNameAnnotation] != ""
}
