package validation

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

func TestLocationLimits(t *testing.T) {
	hours := func(h int) *metav1.Duration { return &metav1.Duration{Duration: time.Duration(h) * time.Hour} }
	prod := &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "prod"}}
	limited := cairnv1.LocationTeamLimits{NamespaceSelector: prod, MaxTTL: hours(720)}
	locked := &cairnv1.LocationObjectLock{Mode: cairnv1.ObjectLockModeCompliance, MinRetention: metav1.Duration{Duration: 24 * time.Hour}}
	prodLabels := map[string]string{"tier": "prod"}
	tests := []struct {
		name      string
		namespace string
		ttl       *metav1.Duration
		limits    *cairnv1.LocationTeamLimits
		lock      *cairnv1.LocationObjectLock
		labels    map[string]string
		want      []string // substrings, one per message; none: no message
	}{
		{name: "no limits", namespace: "team-a", ttl: hours(87600), labels: prodLabels},
		{name: "within every limit", namespace: "team-a", ttl: hours(720), limits: &limited, labels: prodLabels},
		{name: "a namespace the selector leaves out", namespace: "team-a", ttl: hours(1), limits: &limited, labels: map[string]string{"tier": "dev"},
			want: []string{"storage location primary takes backups only from the namespaces its teamLimits.namespaceSelector selects (tier=prod), and namespace team-a is not one of them"}},
		{name: "a namespace without labels", namespace: "team-a", ttl: hours(1), limits: &limited,
			want: []string{"namespace team-a is not one of them"}},
		{name: "a selector by name", namespace: "team-a", ttl: hours(1), labels: map[string]string{"kubernetes.io/metadata.name": "team-a"},
			limits: &cairnv1.LocationTeamLimits{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{"team-a", "team-b"}}}}}},
		{name: "a selector that does not parse refuses", namespace: "team-a", ttl: hours(1), labels: prodLabels,
			limits: &cairnv1.LocationTeamLimits{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "tier", Operator: "Near"}}}},
			want: []string{"teamLimits.namespaceSelector that does not parse"}},
		{name: "a ttl over maxTTL", namespace: "team-a", ttl: hours(721), limits: &limited, labels: prodLabels,
			want: []string{"spec.ttl: 721h0m0s is longer than storage location primary allows a backup in a team namespace (teamLimits.maxTTL 720h0m0s)"}},
		{name: "ttl 0, never to expire, is over any maxTTL", namespace: "team-a", ttl: hours(0), limits: &limited, labels: prodLabels,
			want: []string{"spec.ttl: 0s (never expire) is longer than storage location primary allows"}},
		{name: "no ttl takes the manager's default", namespace: "team-a", limits: &cairnv1.LocationTeamLimits{MaxTTL: hours(24)},
			want: []string{"spec.ttl: unset, so the manager's default 48h0m0s, is longer than storage location primary allows a backup in a team namespace (teamLimits.maxTTL 24h0m0s)"}},
		{name: "both at once", namespace: "team-a", ttl: hours(8760), limits: &limited,
			want: []string{"teamLimits.namespaceSelector", "teamLimits.maxTTL 720h0m0s"}},
		{name: "the operator's namespace is an administrator's: not limited", namespace: "cairn-system", ttl: hours(0), limits: &limited},
		{name: "a lock within maxLockRetention", namespace: "team-a", ttl: hours(2160), lock: locked,
			limits: &cairnv1.LocationTeamLimits{MaxLockRetention: hours(2160)}},
		{name: "a lock over maxLockRetention", namespace: "team-a", ttl: hours(87600), lock: locked,
			limits: &cairnv1.LocationTeamLimits{MaxLockRetention: hours(2160)},
			want:   []string{"spec.ttl: 87600h0m0s would keep the backup's objects locked for 87600h0m0s under storage location primary's Object Lock, longer than it allows a backup in a team namespace (teamLimits.maxLockRetention 2160h0m0s)"}},
		{name: "a backup that never expires is locked for minRetention only", namespace: "team-a", ttl: hours(0), lock: locked,
			limits: &cairnv1.LocationTeamLimits{MaxLockRetention: hours(24)}},
		{name: "a ttl shorter than minRetention is locked for minRetention", namespace: "team-a", ttl: hours(1), lock: locked,
			limits: &cairnv1.LocationTeamLimits{MaxLockRetention: hours(24)}},
		{name: "maxLockRetention without Object Lock limits nothing", namespace: "team-a", ttl: hours(87600),
			limits: &cairnv1.LocationTeamLimits{MaxLockRetention: hours(24)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loc := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "primary", Namespace: "cairn-system"},
				Spec: cairnv1.BackupStorageLocationSpec{TeamLimits: tt.limits, ObjectLock: tt.lock}}
			b := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: tt.namespace}, Spec: cairnv1.BackupSpec{TTL: tt.ttl}}
			got := LocationLimits(b, loc, "cairn-system", LimitFacts{NamespaceLabels: tt.labels, DefaultTTL: 48 * time.Hour})
			if len(got) != len(tt.want) {
				t.Fatalf("LocationLimits = %q, want %d messages", got, len(tt.want))
			}
			for i, want := range tt.want {
				if !strings.Contains(got[i], want) {
					t.Errorf("message %d = %q, want it to contain %q", i, got[i], want)
				}
			}
		})
	}
}

// Backup checks the limits of the location it resolves, the default one included, and
// LimitFacts' zero DefaultTTL is cairnv1.DefaultBackupTTL.
func TestBackupChecksItsLocationsLimits(t *testing.T) {
	loc := cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "cairn-system"},
		Spec: cairnv1.BackupStorageLocationSpec{Default: true, TeamLimits: &cairnv1.LocationTeamLimits{
			MaxTTL: &metav1.Duration{Duration: cairnv1.DefaultBackupTTL - time.Hour}}}}
	b := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "team-a"}}
	errs, name := Backup(b, "cairn-system", []cairnv1.BackupStorageLocation{loc}, LimitFacts{})
	if name != "default" || len(errs) != 1 || !strings.Contains(errs[0], "the manager's default 720h0m0s") {
		t.Errorf("Backup = %q, %q; want the default location's maxTTL refusing the default ttl", errs, name)
	}
}
