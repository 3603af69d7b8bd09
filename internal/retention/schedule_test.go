package retention

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

func TestOf(t *testing.T) {
	alice := map[string]string{cairnv1.RequesterAnnotation: "alice", cairnv1.RequesterUIDAnnotation: "u1"}
	// bob defined the schedule before alice changed its spec.
	s := &cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "nightly", Annotations: alice},
		Status: cairnv1.ScheduleStatus{FormerRequesters: []cairnv1.ScheduleRequester{{Username: "bob", UID: "u9"}}}}
	start := metav1.NewTime(utc("2026-01-02T03:04:05Z"))
	created := metav1.NewTime(utc("2026-01-02T03:00:00Z"))
	now := metav1.NewTime(utc("2026-01-03T00:00:00Z"))
	backup := func(name string, mutate func(*cairnv1.Backup)) cairnv1.Backup {
		b := cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name, CreationTimestamp: created,
			Labels: map[string]string{cairnv1.ScheduleNameLabel: "nightly"}, Annotations: map[string]string{}},
			Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseCompleted, StartTimestamp: &start}}
		for k, v := range alice {
			b.Annotations[k] = v
		}
		if mutate != nil {
			mutate(&b)
		}
		return b
	}
	tests := []struct {
		name   string
		backup cairnv1.Backup
		want   []Backup
	}{
		{"a run of the schedule, by its start", backup("nightly-20260102030000", nil),
			[]Backup{{Name: "nightly-20260102030000", Phase: cairnv1.BackupPhaseCompleted, Time: start.Time}}},
		{"one that never started, by its creation", backup("nightly-20260102030000", func(b *cairnv1.Backup) {
			b.Status = cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseFailedValidation}
		}), []Backup{{Name: "nightly-20260102030000", Phase: cairnv1.BackupPhaseFailedValidation, Time: created.Time}}},
		{"a new one, phase empty", backup("nightly-20260102030000", func(b *cairnv1.Backup) { b.Status = cairnv1.BackupStatus{} }),
			[]Backup{{Name: "nightly-20260102030000", Phase: cairnv1.BackupPhaseNew, Time: created.Time}}},
		{"another requester's, labelled as the schedule's", backup("nightly-20260102030000", func(b *cairnv1.Backup) {
			b.Annotations[cairnv1.RequesterAnnotation] = "mallory"
		}), nil},
		{"a run for a former requester, before the spec changed", backup("nightly-20260102030000", func(b *cairnv1.Backup) {
			b.Annotations[cairnv1.RequesterAnnotation], b.Annotations[cairnv1.RequesterUIDAnnotation] = "bob", "u9"
			b.Annotations[cairnv1.RequesterGroupsAnnotation] = `["team"]`
		}), []Backup{{Name: "nightly-20260102030000", Phase: cairnv1.BackupPhaseCompleted, Time: start.Time}}},
		{"a former requester's name with another UID", backup("nightly-20260102030000", func(b *cairnv1.Backup) {
			b.Annotations[cairnv1.RequesterAnnotation], b.Annotations[cairnv1.RequesterUIDAnnotation] = "bob", "u10"
		}), nil},
		{"the current requester's, with another token's extra", backup("nightly-20260102030000", func(b *cairnv1.Backup) {
			b.Annotations[cairnv1.RequesterExtraAnnotation] = `{"authentication.kubernetes.io/credential-id":["JTI=old"]}`
		}), []Backup{{Name: "nightly-20260102030000", Phase: cairnv1.BackupPhaseCompleted, Time: start.Time}}},
		{"no requester, for a schedule with one", backup("nightly-20260102030000", func(b *cairnv1.Backup) { b.Annotations = nil }), nil},
		{"not named as a run", backup("nightly-manual", nil), nil},
		{"a run's name with a bad time", backup("nightly-20261302030000", nil), nil},
		{"another schedule's name prefix", backup("nightly-x-20260102030000", nil), nil},
		{"another schedule's label", backup("nightly-20260102030000", func(b *cairnv1.Backup) { b.Labels[cairnv1.ScheduleNameLabel] = "other" }), nil},
		{"another namespace", backup("nightly-20260102030000", func(b *cairnv1.Backup) { b.Namespace = "other" }), nil},
		{"synced from storage", backup("nightly-20260102030000", func(b *cairnv1.Backup) { b.Annotations[cairnv1.SyncedFromAnnotation] = "s3" }), nil},
		{"being deleted", backup("nightly-20260102030000", func(b *cairnv1.Backup) { b.DeletionTimestamp = &now }), nil},
		{"in DeletionFailed", backup("nightly-20260102030000", func(b *cairnv1.Backup) { b.Status.Phase = cairnv1.BackupPhaseDeletionFailed }), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Of(s, []cairnv1.Backup{tt.backup})
			if !slices.EqualFunc(got, tt.want, func(a, b Backup) bool { return a.Name == b.Name && a.Phase == b.Phase && a.Time.Equal(b.Time) }) {
				t.Errorf("Of = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestForSchedule(t *testing.T) {
	s := &cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "d"}, Spec: cairnv1.ScheduleSpec{Schedule: "CRON_TZ=Europe/Paris 30 0 * * *"}}
	var backups []cairnv1.Backup
	// 23:30Z on 1 and 2 January is 00:30 on 2 and 3 January in Paris: two days there, and
	// one (the 2nd) in UTC would hold 00:00Z..23:59Z.
	for _, at := range []string{"2026-01-01T23:30:00Z", "2026-01-02T00:10:00Z", "2026-01-02T23:30:00Z"} {
		t0 := metav1.NewTime(utc(at))
		backups = append(backups, cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "d-" + t0.UTC().Format("20060102150405"),
			Labels: map[string]string{cairnv1.ScheduleNameLabel: "d"}}, Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseCompleted, StartTimestamp: &t0}})
	}
	if vs, err := ForSchedule(s, backups); vs != nil || err != nil {
		t.Fatalf("without retention: %v, %v; want nothing", vs, err)
	}
	s.Spec.Retention = &cairnv1.RetentionPolicy{Daily: 2}
	vs, err := ForSchedule(s, backups)
	if err != nil {
		t.Fatal(err)
	}
	diff(t, kept(vs), map[string]string{"d-20260102233000": "daily,newestCompleted", "d-20260102001000": "daily"})
	s.Spec.Schedule = "CRON_TZ=Nowhere/Land 0 3 * * *"
	if _, err := ForSchedule(s, backups); err == nil {
		t.Error("an unknown zone: no error")
	}
}
