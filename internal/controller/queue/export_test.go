package queue

// BackupTrigger is backupTrigger, for the external tests that pass it the deletion's rule
// (internal/controller, which imports this package).
var BackupTrigger = backupTrigger
