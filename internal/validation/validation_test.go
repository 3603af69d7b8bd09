package validation

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

func TestValidate(t *testing.T) {
	locations := []cairnv1.BackupStorageLocation{
		{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "cairn-system"}, Spec: cairnv1.BackupStorageLocationSpec{Default: true}},
		{ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: "cairn-system"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "velero", Namespace: "cairn-system"}, Spec: cairnv1.BackupStorageLocationSpec{Format: cairnv1.LocationFormatVelero, AccessMode: cairnv1.AccessModeReadOnly}},
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
		{name: "a Velero location", namespace: "cairn-system", spec: cairnv1.BackupSpec{StorageLocation: "velero"},
			wantErrs: []string{"spec.storageLocation: storage location velero holds Velero's backups, which Cairn reads and never writes"}},
		{name: "a Velero location as the default", namespace: "cairn-system", locations: []cairnv1.BackupStorageLocation{{ObjectMeta: metav1.ObjectMeta{Name: "velero"}, Spec: cairnv1.BackupStorageLocationSpec{Default: true, Format: cairnv1.LocationFormatVelero}}},
			wantErrs: []string{"storage location velero holds Velero's backups"}},
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
			errs, loc := Backup(b, "cairn-system", locs, LimitFacts{})
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

func TestCheckTenancy(t *testing.T) {
	tests := []struct {
		name      string
		namespace string
		spec      cairnv1.BackupSpec
		want      []string
	}{
		{name: "admin backup of everything", namespace: "cairn-system"},
		{name: "admin backup of other namespaces and cluster resources", namespace: "cairn-system",
			spec: cairnv1.BackupSpec{IncludedNamespaces: []string{"team-a", "*"}, IncludeClusterResources: ptr.To(true)}},
		{name: "team backup with no filter", namespace: "team-a"},
		{name: "team backup of its own namespace", namespace: "team-a", spec: cairnv1.BackupSpec{IncludedNamespaces: []string{"team-a"}}},
		{name: "team backup that excludes namespaces", namespace: "team-a", spec: cairnv1.BackupSpec{ExcludedNamespaces: []string{"team-b"}}},
		{name: "team backup without cluster resources", namespace: "team-a", spec: cairnv1.BackupSpec{IncludeClusterResources: ptr.To(false)}},
		{name: "team backup of another namespace", namespace: "team-a", spec: cairnv1.BackupSpec{IncludedNamespaces: []string{"team-a", "team-b", "team-c"}},
			want: []string{`spec.includedNamespaces: a backup in namespace team-a may only back up its own namespace, not "team-b" (only backups in cairn-system may select other namespaces)`}},
		{name: "team backup with a wildcard that matches its own namespace", namespace: "team-a", spec: cairnv1.BackupSpec{IncludedNamespaces: []string{"team-?"}},
			want: []string{`spec.includedNamespaces: a backup in namespace team-a may only back up its own namespace, not "team-?" (only backups in cairn-system may select other namespaces)`}},
		{name: "team backup with cluster resources", namespace: "team-a", spec: cairnv1.BackupSpec{IncludeClusterResources: ptr.To(true)},
			want: []string{"spec.includeClusterResources: a backup in namespace team-a cannot include cluster-scoped resources (only backups in cairn-system can)"}},
		{name: "both", namespace: "team-a", spec: cairnv1.BackupSpec{IncludedNamespaces: []string{"*"}, IncludeClusterResources: ptr.To(true)},
			want: []string{
				`spec.includedNamespaces: a backup in namespace team-a may only back up its own namespace, not "*" (only backups in cairn-system may select other namespaces)`,
				"spec.includeClusterResources: a backup in namespace team-a cannot include cluster-scoped resources (only backups in cairn-system can)",
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: tt.namespace}, Spec: tt.spec}
			if got := Tenancy("backup", b.Namespace, b.Spec.Filters(), "cairn-system"); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("CheckTenancy = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCapValidationErrors(t *testing.T) {
	numbered := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("problem %d", i+1)
		}
		return out
	}
	long := strings.Repeat("a", cairnv1.MaxValidationErrorLength+10)
	// Three-byte characters placed so that the cut falls inside one.
	wide := strings.Repeat("a", cairnv1.MaxValidationErrorLength-5) + strings.Repeat("€", 5)
	tests := []struct {
		name string
		in   []string
		want []string
	}{
		{name: "none", in: nil, want: nil},
		{name: "a few, unchanged", in: numbered(3), want: numbered(3)},
		{name: "exactly the most", in: numbered(cairnv1.MaxValidationErrors), want: numbered(cairnv1.MaxValidationErrors)},
		{name: "one more than the most", in: numbered(cairnv1.MaxValidationErrors + 1),
			want: append(numbered(cairnv1.MaxValidationErrors-1), "and 2 more problems")},
		{name: "many more", in: numbered(1000), want: append(numbered(cairnv1.MaxValidationErrors-1), "and 981 more problems")},
		{name: "a message of exactly the longest length", in: []string{long[:cairnv1.MaxValidationErrorLength]}, want: []string{long[:cairnv1.MaxValidationErrorLength]}},
		{name: "a long message", in: []string{long}, want: []string{long[:cairnv1.MaxValidationErrorLength-3] + "…"}},
		{name: "a long message cut between characters", in: []string{wide},
			want: []string{strings.Repeat("a", cairnv1.MaxValidationErrorLength-5) + "…"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Cap(tt.in)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("CapValidationErrors = %q, want %q", got, tt.want)
			}
			if len(got) > cairnv1.MaxValidationErrors {
				t.Errorf("%d messages", len(got))
			}
			for _, m := range got {
				if len(m) > cairnv1.MaxValidationErrorLength || !utf8.ValidString(m) {
					t.Errorf("message of %d bytes (valid UTF-8: %v)", len(m), utf8.ValidString(m))
				}
			}
		})
	}
}

// TestValidateMaxSizeSpec: a spec with the most entries the CRD allows, all bad, yields
// messages that fit status.validationErrors once capped.
func TestValidateMaxSizeSpec(t *testing.T) {
	spec := cairnv1.BackupSpec{StorageLocation: "gone"}
	for i := range 1000 {
		spec.IncludedNamespaces = append(spec.IncludedNamespaces, fmt.Sprintf("Bad_%d_%s", i, strings.Repeat("x", 200)))
	}
	for i := range 500 {
		spec.ExcludedResources = append(spec.ExcludedResources, fmt.Sprintf("Bad/%d", i))
	}
	b := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "team-a"}, Spec: spec}
	errs, _ := Backup(b, "cairn-system", nil, LimitFacts{})
	capped := Cap(errs)
	if len(capped) != cairnv1.MaxValidationErrors || capped[len(capped)-1] != fmt.Sprintf("and %d more problems", len(errs)-cairnv1.MaxValidationErrors+1) {
		t.Errorf("%d problems capped to %d messages, the last %q", len(errs), len(capped), capped[len(capped)-1])
	}
	size := 0
	for _, m := range capped {
		size += len(m)
	}
	if size > cairnv1.MaxValidationErrors*cairnv1.MaxValidationErrorLength {
		t.Errorf("capped messages take %d bytes", size)
	}
}
