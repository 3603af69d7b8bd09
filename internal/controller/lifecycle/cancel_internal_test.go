package lifecycle

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

func TestCancelRequester(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 11, 22, 3, 4, 5, 0, time.UTC))
	tests := []struct {
		name string
		b    cairnv1.Backup
		want string
	}{
		{
			name: "the manager that set spec.cancel",
			b: cairnv1.Backup{Spec: cairnv1.BackupSpec{Cancel: true}, ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kubectl-client-side-apply", Time: &at, FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:includedNamespaces":{}}}`)},
				{Manager: "kubectl-patch", Time: &at, FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:cancel":{}}}`)},
			}}},
			want: `field manager "kubectl-patch" at 2026-11-22T03:04:05Z`,
		},
		{
			name: "no record of the field",
			b:    cairnv1.Backup{Spec: cairnv1.BackupSpec{Cancel: true}},
			want: "spec.cancel (the field manager is not recorded)",
		},
		{
			name: "a deletion",
			b:    cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &at}},
			want: "deletion of the Backup at 2026-11-22T03:04:05Z",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CancelRequester(&tt.b); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
