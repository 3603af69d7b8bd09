package download

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/storage"
)

func TestDecideDownloadRequest(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { t := metav1.NewTime(now.Add(d)); return &t }
	tests := []struct {
		name      string
		status    cairnv1.DownloadRequestStatus
		created   time.Time
		want      downloadAction
		wantAfter time.Duration
	}{
		{name: "just created", status: cairnv1.DownloadRequestStatus{}, want: downloadAnswer},
		{name: "New", status: cairnv1.DownloadRequestStatus{Phase: cairnv1.DownloadRequestPhaseNew}, want: downloadAnswer},
		{name: "answered, not expired", status: cairnv1.DownloadRequestStatus{Phase: cairnv1.DownloadRequestPhaseProcessed, Expiration: at(3 * time.Minute)},
			want: downloadWait, wantAfter: 3 * time.Minute},
		{name: "failed, not expired", status: cairnv1.DownloadRequestStatus{Phase: cairnv1.DownloadRequestPhaseFailed, Expiration: at(time.Second)},
			want: downloadWait, wantAfter: time.Second},
		{name: "answered, expiring now", status: cairnv1.DownloadRequestStatus{Phase: cairnv1.DownloadRequestPhaseProcessed, Expiration: at(0)}, want: downloadDelete},
		{name: "failed, expired", status: cairnv1.DownloadRequestStatus{Phase: cairnv1.DownloadRequestPhaseFailed, Expiration: at(-time.Hour)}, want: downloadDelete},
		{name: "answered without an expiration (written by hand)", status: cairnv1.DownloadRequestStatus{Phase: cairnv1.DownloadRequestPhaseProcessed}, want: downloadDelete},
		{name: "unanswered a whole ttl after it was created (its storage hangs)", status: cairnv1.DownloadRequestStatus{},
			created: now.Add(-10 * time.Minute), want: downloadDelete},
		{name: "unanswered, created just before", status: cairnv1.DownloadRequestStatus{Phase: cairnv1.DownloadRequestPhaseNew},
			created: now.Add(-9 * time.Minute), want: downloadAnswer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, after := decideDownloadRequest(tt.status, tt.created, 10*time.Minute, now)
			if got != tt.want || after != tt.wantAfter {
				t.Errorf("decideDownloadRequest = %s after %v, want %s after %v", got, after, tt.want, tt.wantAfter)
			}
		})
	}
}

func TestDownloadKey(t *testing.T) {
	layout := storage.Layout{Prefix: "cluster-a"}
	tests := []struct {
		kind cairnv1.DownloadTargetKind
		want string
	}{
		{cairnv1.DownloadTargetBackupLog, "cluster-a/backups/team-a/x/x-logs.gz"},
		{cairnv1.DownloadTargetBackupContents, "cluster-a/backups/team-a/x/x.tar.gz"},
		{cairnv1.DownloadTargetBackupResults, "cluster-a/backups/team-a/x/x-results.json.gz"},
		{cairnv1.DownloadTargetBackupResourceList, "cluster-a/backups/team-a/x/x-resource-list.json.gz"},
		{cairnv1.DownloadTargetBackupItemOperations, "cluster-a/backups/team-a/x/x-itemoperations.json.gz"},
		{cairnv1.DownloadTargetRestoreLog, "cluster-a/restores/team-a/x/x-logs.gz"},
		{cairnv1.DownloadTargetRestoreResults, "cluster-a/restores/team-a/x/x-results.gz"},
		{cairnv1.DownloadTargetRestoreResourceList, "cluster-a/restores/team-a/x/x-resource-list.json.gz"},
	}
	for _, tt := range tests {
		got, known := downloadKey(layout, "team-a", cairnv1.DownloadTarget{Kind: tt.kind, Name: "x"})
		if !known || got != tt.want {
			t.Errorf("downloadKey(%s) = %q, %v; want %q", tt.kind, got, known, tt.want)
		}
	}
	if _, known := downloadKey(layout, "team-a", cairnv1.DownloadTarget{Kind: "Secrets", Name: "x"}); known {
		t.Error("an unknown kind got a key")
	}
}

// TestBackupFilesRefusal: a backup's files are handed out only when they are its own.
func TestBackupFilesRefusal(t *testing.T) {
	started := metav1.NewTime(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	backup := func(phase cairnv1.BackupPhase, ran bool, annotations map[string]string, origin string) *cairnv1.Backup {
		b := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "x", UID: "mine", Annotations: annotations},
			Status: cairnv1.BackupStatus{Phase: phase, OriginUID: origin}}
		if ran {
			b.Status.StartTimestamp = &started
		}
		return b
	}
	synced := map[string]string{cairnv1.SyncedFromAnnotation: "dr"}
	tests := []struct {
		name      string
		b         *cairnv1.Backup
		committed bool
		markerUID string
		want      string // a substring; "" for none
	}{
		{"its own committed backup", backup(cairnv1.BackupPhaseCompleted, true, nil, ""), true, "mine", ""},
		{"a synced backup, through its origin", backup(cairnv1.BackupPhaseCompleted, false, synced, "theirs"), true, "theirs", ""},
		{"another object's data under its name", backup(cairnv1.BackupPhaseFailedValidation, false, nil, ""), true, "theirs", "belongs to another Backup object"},
		{"another object's data, though it ran (refused at start)", backup(cairnv1.BackupPhaseFailed, true, nil, ""), true, "theirs", "belongs to another Backup object"},
		{"its own failed backup's log", backup(cairnv1.BackupPhaseFailed, true, nil, ""), false, "", ""},
		{"never ran, no marker", backup(cairnv1.BackupPhaseFailedValidation, false, nil, ""), false, "", "no files of its own"},
		{"sync pending, made by hand", backup("", false, synced, ""), true, "theirs", "not synced"},
		{"refused by the sync", backup(cairnv1.BackupPhaseFailedValidation, false, synced, ""), false, "", "no files of its own"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := backupFilesRefusal(tt.b, tt.committed, tt.markerUID)
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("backupFilesRefusal = %q, want %q", got, tt.want)
			}
		})
	}
}
