package controller_test

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// ownersConditions are conditions without the kstatus ones (Ready, Reconciling, Stalled), which
// the readiness reconciler writes after each phase change and rewrites (observedGeneration)
// when a cancel changes the spec: what the phase owners wrote.
func ownersConditions(conditions []metav1.Condition) []metav1.Condition {
	return slices.DeleteFunc(slices.Clone(conditions), func(c metav1.Condition) bool {
		return c.Type == cairnv1.ConditionReady || c.Type == cairnv1.ConditionReconciling || c.Type == cairnv1.ConditionStalled
	})
}

// ownersBackupStatus is a backup's status as its phase owners wrote it (ownersConditions).
func ownersBackupStatus(s cairnv1.BackupStatus) cairnv1.BackupStatus {
	s.Conditions = ownersConditions(s.Conditions)
	return s
}

// ownersRestoreStatus is a restore's status as its phase owners wrote it (ownersConditions).
func ownersRestoreStatus(s cairnv1.RestoreStatus) cairnv1.RestoreStatus {
	s.Conditions = ownersConditions(s.Conditions)
	return s
}
