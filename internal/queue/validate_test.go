package queue

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

func TestValidate(t *testing.T) {
	locations := []cairnv1.BackupStorageLocation{
		{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "cairn-system"}, Spec: cairnv1.BackupStorageLocationSpec{Default: true}},
		{ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: "cairn-system"}},
	}
	badSelector := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Maybe"}}}
	tests := []struct {
		name         string
		namespace    string
		spec         cairnv1.BackupSpec
		locations    []cairnv1.BackupStorageLocation
		wantErrs     []string
		wantLocation string
	}{
		{name: "admin backup of everything", namespace: "cairn-system", wantLocation: "default"},
		{name: "named location", namespace: "cairn-system", spec: cairnv1.BackupSpec{StorageLocation: "s3"}, wantLocation: "s3"},
		{name: "team backup of its own namespace", namespace: "team-a", spec: cairnv1.BackupSpec{IncludedNamespaces: []string{"team-a"}}, wantLocation: "default"},
		{name: "team backup reaching another namespace", namespace: "team-a", spec: cairnv1.BackupSpec{IncludedNamespaces: []string{"team-a", "team-b"}},
			wantErrs: []string{`a backup in namespace team-a may only back up its own namespace, not "team-b"`}},
		{name: "team backup with a wildcard", namespace: "team-a", spec: cairnv1.BackupSpec{IncludedNamespaces: []string{"*"}},
			wantErrs: []string{`may only back up its own namespace, not "*"`}},
		{name: "team backup with cluster resources", namespace: "team-a", spec: cairnv1.BackupSpec{IncludeClusterResources: ptr.To(true)},
			wantErrs: []string{"cannot include cluster-scoped resources"}},
		{name: "bad namespace pattern", namespace: "cairn-system", spec: cairnv1.BackupSpec{IncludedNamespaces: []string{"Team_A"}},
			wantErrs: []string{`spec.includedNamespaces: "Team_A" is not a valid namespace name`}},
		{name: "missing location", namespace: "cairn-system", spec: cairnv1.BackupSpec{StorageLocation: "gone"},
			wantErrs: []string{`spec.storageLocation: storage location "gone" does not exist in namespace cairn-system`}},
		{name: "no default location", namespace: "cairn-system", locations: locations[1:],
			wantErrs: []string{"spec.storageLocation: no default storage location in namespace cairn-system"}},
		{name: "bad label selector", namespace: "cairn-system", spec: cairnv1.BackupSpec{LabelSelector: badSelector},
			wantErrs: []string{`spec.labelSelector: "Maybe" is not a valid label selector operator`}},
		{name: "bad or-selector", namespace: "cairn-system", spec: cairnv1.BackupSpec{OrLabelSelectors: []*metav1.LabelSelector{{}, badSelector}},
			wantErrs: []string{"spec.orLabelSelectors[1]"}},
		{name: "both selectors", namespace: "cairn-system", spec: cairnv1.BackupSpec{LabelSelector: &metav1.LabelSelector{}, OrLabelSelectors: []*metav1.LabelSelector{{}}},
			wantErrs: []string{"spec.labelSelector and spec.orLabelSelectors cannot be used together"}},
		{name: "bad resource names", namespace: "cairn-system", spec: cairnv1.BackupSpec{IncludedResources: []string{"ConfigMaps", "apps/deployments"}, ExcludedResources: []string{"*"}},
			wantErrs: []string{`"ConfigMaps" must be lowercase`, `"apps/deployments" is not a resource name`, `"*" would exclude every resource`}},
		{name: "every problem at once", namespace: "team-a", spec: cairnv1.BackupSpec{IncludedNamespaces: []string{"x"}, StorageLocation: "gone", LabelSelector: badSelector},
			wantErrs: []string{"may only back up its own namespace", "spec.labelSelector", `storage location "gone"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			locs := tt.locations
			if locs == nil {
				locs = locations
			}
			b := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: tt.namespace}, Spec: tt.spec}
			errs, loc := Validate(b, "cairn-system", locs)
			all := strings.Join(errs, "\n")
			if len(tt.wantErrs) == 0 && len(errs) > 0 {
				t.Fatalf("unexpected errors: %s", all)
			}
			if len(errs) != len(tt.wantErrs) {
				t.Errorf("got %d errors, want %d:\n%s", len(errs), len(tt.wantErrs), all)
			}
			for _, w := range tt.wantErrs {
				if !strings.Contains(all, w) {
					t.Errorf("errors do not say %q:\n%s", w, all)
				}
			}
			if len(tt.wantErrs) == 0 && loc != tt.wantLocation {
				t.Errorf("location = %q, want %q", loc, tt.wantLocation)
			}
		})
	}
}
