package cli

// Pod volume data in the CLI (docs/volumes.md): --default-volumes-to-fs-backup, describe's
// volume bytes and its --details list of PodVolumeBackups, and --wait's bytes.

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

const mib = 1 << 20

// copyingBackup is backup b1 of team-a whose items are written and whose volumes are being
// copied.
func copyingBackup() *cairnv1.Backup {
	return &cairnv1.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: "b1", Namespace: "team-a", UID: "uid-b1", CreationTimestamp: ago(2 * time.Minute)},
		Spec: cairnv1.BackupSpec{DefaultVolumesToFsBackup: ptr.To(true), Hooks: &cairnv1.BackupHooks{Resources: []cairnv1.BackupResourceHookSpec{
			{Name: "quiesce", Pre: []cairnv1.BackupResourceHook{{Exec: &cairnv1.ExecHook{Command: []string{"/freeze"}}}}, Post: []cairnv1.BackupResourceHook{{Exec: &cairnv1.ExecHook{Command: []string{"/thaw"}}}}},
		}}},
		Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseWaitingForPluginOperations, StorageLocation: "default",
			StartTimestamp: at(-110 * time.Second), Progress: cairnv1.NewBackupProgress(40, 40).WithVolumeBytes(230*mib, 300*mib),
			BackupItemOperationsAttempted: 3, BackupItemOperationsCompleted: 1, BackupItemOperationsFailed: 1,
			HookStatus: &cairnv1.HookStatus{HooksAttempted: 2, HooksFailed: 1}},
	}
}

// podVolumeBackup is a PodVolumeBackup of the backup with UID backupUID, in namespace.
func podVolumeBackup(namespace, name, backupUID, pod, volume string, status cairnv1.PodVolumeStatus) *cairnv1.PodVolumeBackup {
	return &cairnv1.PodVolumeBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
			Labels: map[string]string{cairnv1.PodVolumeBackupUIDLabel: backupUID, cairnv1.PodVolumeBackupNameLabel: "b1"}},
		Spec: cairnv1.PodVolumeBackupSpec{Node: "node-1", Pod: cairnv1.PodReference{Namespace: "team-a", Name: pod, UID: types.UID("uid-" + pod)},
			Volume: volume, Repository: cairnv1.RepositoryReference{StorageLocation: "default", Namespace: "team-a"}},
		Status: status,
	}
}

// copyingVolumes are b1's three volume copies (one done, one copying, one failed), and
// PodVolumeBackups that are not b1's: another backup's, and one outside the operator's
// namespace.
func copyingVolumes() []client.Object {
	return []client.Object{
		podVolumeBackup(DefaultOperatorNamespace, "b1-web-0-data", "uid-b1", "web-0", "data", cairnv1.PodVolumeStatus{
			Phase: cairnv1.PodVolumePhaseCompleted, BytesDone: 200 * mib, BytesTotal: 200 * mib, UploadedBytes: 12 * mib, Files: 10000,
			SnapshotID: "k5f0c1e8a9b2d3c4e5f60718293a4b5c6", StartTimestamp: at(-100 * time.Second), CompletionTimestamp: at(-60 * time.Second)}),
		podVolumeBackup(DefaultOperatorNamespace, "b1-db-0-wal", "uid-b1", "db-0", "wal", cairnv1.PodVolumeStatus{
			Phase: cairnv1.PodVolumePhaseInProgress, BytesDone: 30 * mib, BytesTotal: 100 * mib, UploadedBytes: 30 * mib, StartTimestamp: at(-20 * time.Second)}),
		podVolumeBackup(DefaultOperatorNamespace, "b1-web-0-cache", "uid-b1", "web-0", "cache", cairnv1.PodVolumeStatus{
			Phase: cairnv1.PodVolumePhaseFailed, Message: "the pod web-0 is not Running on node-1 any more"}),
		podVolumeBackup(DefaultOperatorNamespace, "b1-web-0-tmp", "uid-b1", "web-0", "tmp", cairnv1.PodVolumeStatus{}),
		podVolumeBackup(DefaultOperatorNamespace, "b0-web-0-data", "uid-b0", "web-0", "data", cairnv1.PodVolumeStatus{Phase: cairnv1.PodVolumePhaseCompleted}),
		podVolumeBackup("team-a", "b1-forged", "uid-b1", "web-0", "forged", cairnv1.PodVolumeStatus{}),
	}
}

func TestDescribeBackupVolumes(t *testing.T) {
	e, out, errOut := testEnv(t, append(copyingVolumes(), copyingBackup())...)
	if got := run(e, "backup", "describe", "b1", "--details"); got != ExitOK {
		t.Fatalf("exit %d: %s", got, errOut)
	}
	golden(t, "describe-backup-volumes.golden", out.Bytes())
}

// TestDescribeBackupVolumesInOtherOperatorNamespace: the PodVolumeBackups are looked for in
// --cairn-namespace.
func TestDescribeBackupVolumesInOtherOperatorNamespace(t *testing.T) {
	e, out, errOut := testEnv(t, copyingBackup(),
		podVolumeBackup("backup-system", "b1-web-0-data", "uid-b1", "web-0", "data", cairnv1.PodVolumeStatus{Phase: cairnv1.PodVolumePhaseCompleted}))
	if got := run(e, "backup", "describe", "b1", "--details", "--cairn-namespace", "backup-system"); got != ExitOK {
		t.Fatalf("exit %d: %s", got, errOut)
	}
	if !regexp.MustCompile(`(?m)^  team-a/web-0\s+data\s+Completed\s`).MatchString(out.String()) {
		t.Errorf("the volume in backup-system is not listed:\n%s", out)
	}
}

// TestDescribeBackupVolumesForbidden: a user who may not list PodVolumeBackups (a team's)
// gets a note and the rest of the description, not an error.
func TestDescribeBackupVolumesForbidden(t *testing.T) {
	e, out, errOut := testEnv(t)
	b := copyingBackup()
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "cairn.dev", Resource: "podvolumebackups"}, "",
		errors.New(`User "alice" cannot list resource "podvolumebackups" in API group "cairn.dev" in the namespace "cairn-system"`))
	c := fake.NewClientBuilder().WithScheme(Scheme()).WithRESTMapper(restMapper(t)).WithObjects(b).WithStatusSubresource(b).
		WithInterceptorFuncs(interceptor.Funcs{
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				if _, ok := list.(*cairnv1.PodVolumeBackupList); ok {
					return forbidden
				}
				return c.List(ctx, list, opts...)
			},
		}).Build()
	e.newClient = func() (client.WithWatch, error) { return c, nil }
	if got := run(e, "backup", "describe", "b1", "--details"); got != ExitOK {
		t.Fatalf("exit %d, want 0: %s", got, errOut)
	}
	want := "\nVolumes: not shown: you may not list PodVolumeBackups in namespace cairn-system (Volume bytes above sums them up).\n"
	if !strings.HasSuffix(out.String(), want) || errOut.Len() > 0 {
		t.Errorf("stdout does not end with the note %q:\n%s\nstderr: %s", want, out, errOut)
	}
	if !regexp.MustCompile(`(?m)^Volume bytes:\s+230\.0 MiB of 300\.0 MiB read$`).MatchString(out.String()) {
		t.Errorf("no volume bytes:\n%s", out)
	}
}

// TestDescribeBackupVolumeBytes: without --details, describe shows the backup's volume bytes
// when there are any, and lists no PodVolumeBackups.
func TestDescribeBackupVolumeBytes(t *testing.T) {
	e, out, errOut := testEnv(t, append(copyingVolumes(), copyingBackup())...)
	if got := run(e, "backup", "describe", "b1"); got != ExitOK {
		t.Fatalf("exit %d: %s", got, errOut)
	}
	if !regexp.MustCompile(`(?m)^Volume bytes:\s+230\.0 MiB of 300\.0 MiB read$`).MatchString(out.String()) {
		t.Errorf("no volume bytes:\n%s", out)
	}
	if strings.Contains(out.String(), "Volumes:") {
		t.Errorf("volumes listed without --details:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^  Volume data:\s+every PVC and emptyDir volume, except those in backup.cairn.dev/backup-volumes-excludes$`).MatchString(out.String()) {
		t.Errorf("the spec's defaultVolumesToFsBackup is not shown:\n%s", out)
	}

	noBytes := copyingBackup()
	noBytes.Status.Progress = cairnv1.NewBackupProgress(40, 40)
	e, out, errOut = testEnv(t, noBytes)
	if got := run(e, "backup", "describe", "b1", "--details"); got != ExitOK {
		t.Fatalf("exit %d: %s", got, errOut)
	}
	if strings.Contains(out.String(), "Volume bytes") || !strings.HasSuffix(out.String(), "\nVolumes:\n  none\n") {
		t.Errorf("a backup without volume data:\n%s", out)
	}
}

func TestVolumeSpeed(t *testing.T) {
	tests := []struct {
		name string
		st   cairnv1.PodVolumeStatus
		want string
	}{
		{"not started", cairnv1.PodVolumeStatus{BytesDone: 10}, "-"},
		{"running", cairnv1.PodVolumeStatus{BytesDone: 10 * mib, StartTimestamp: at(-time.Second)}, "-"},
		{"done in 4s", cairnv1.PodVolumeStatus{BytesDone: 100 * mib, StartTimestamp: at(-5 * time.Second), CompletionTimestamp: at(-time.Second)}, "25.0 MiB/s"},
		{"done at once", cairnv1.PodVolumeStatus{BytesDone: 100, StartTimestamp: at(0), CompletionTimestamp: at(0)}, "-"},
		{"empty", cairnv1.PodVolumeStatus{StartTimestamp: at(-2 * time.Second), CompletionTimestamp: at(0)}, "0 B/s"},
	}
	for _, tt := range tests {
		if got := volumeSpeed(tt.st); got != tt.want {
			t.Errorf("%s: volumeSpeed = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestCreateWaitShowsVolumeBytes: --wait shows the volume bytes of a backup that waits for
// its volume copies.
func TestCreateWaitShowsVolumeBytes(t *testing.T) {
	e, out, errOut := testEnv(t)
	withStatusesAfterCreate(t, e, "InProgress", "WaitingForPluginOperations", "Completed")
	if got := run(e, "backup", "create", "b1", "--wait", "--default-volumes-to-fs-backup"); got != ExitOK {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", got, out, errOut)
	}
	if !strings.Contains(out.String(), "WaitingForPluginOperations\n2/2 items, volumes 100.0 MiB/200.0 MiB") {
		t.Errorf("the volume bytes are not shown:\n%s", out)
	}
	c, _ := e.client()
	var b cairnv1.Backup
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "team-a", Name: "b1"}, &b); err != nil {
		t.Fatal(err)
	}
	if b.Spec.DefaultVolumesToFsBackup == nil || !*b.Spec.DefaultVolumesToFsBackup {
		t.Errorf("spec.defaultVolumesToFsBackup = %v, want true", b.Spec.DefaultVolumesToFsBackup)
	}
}

// TestDescribeRestoreVolumes: describe --details of a restore lists its PodVolumeRestores (and
// only its own, in the operator's namespace), with the bytes written and no upload column;
// describe shows the volume bytes written.
func TestDescribeRestoreVolumes(t *testing.T) {
	rs := &cairnv1.Restore{
		ObjectMeta: metav1.ObjectMeta{Name: "r1", Namespace: "team-a", UID: "uid-r1", CreationTimestamp: ago(time.Minute)},
		Spec: cairnv1.RestoreSpec{BackupName: "b1", Hooks: &cairnv1.RestoreHooks{Resources: []cairnv1.RestoreResourceHookSpec{{Name: "db", PostHooks: []cairnv1.RestoreResourceHook{
			{Init: &cairnv1.InitRestoreHook{InitContainers: []corev1.Container{{Name: "check"}}}},
			{Exec: &cairnv1.RestoreExecHook{Command: []string{"/reindex"}}}, {Exec: &cairnv1.RestoreExecHook{Command: []string{"/warm"}}}}}}}},
		Status: cairnv1.RestoreStatus{Phase: cairnv1.RestorePhaseWaitingForPluginOperations, BackupName: "b1",
			StartTimestamp: at(-50 * time.Second), Progress: cairnv1.NewRestoreProgress(40, 40).WithVolumeBytes(150*mib, 300*mib),
			HookStatus: &cairnv1.HookStatus{HooksAttempted: 2, HooksFailed: 1}},
	}
	pvr := func(namespace, name, restoreUID, pod, volume string, st cairnv1.PodVolumeStatus) *cairnv1.PodVolumeRestore {
		return &cairnv1.PodVolumeRestore{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{cairnv1.PodVolumeRestoreUIDLabel: restoreUID}},
			Spec: cairnv1.PodVolumeRestoreSpec{Node: "node-1", Pod: cairnv1.PodReference{Namespace: "team-a", Name: pod}, Volume: volume,
				Repository: cairnv1.RepositoryReference{StorageLocation: "default", Namespace: "team-a"}, SnapshotID: "k-" + volume},
			Status: st,
		}
	}
	e, out, errOut := testEnv(t, rs,
		pvr(DefaultOperatorNamespace, "r1-web-0-data", "uid-r1", "web-0", "data", cairnv1.PodVolumeStatus{
			Phase: cairnv1.PodVolumePhaseCompleted, BytesDone: 200 * mib, BytesTotal: 200 * mib,
			StartTimestamp: at(-40 * time.Second), CompletionTimestamp: at(-20 * time.Second)}),
		pvr(DefaultOperatorNamespace, "r1-db-0-wal", "uid-r1", "db-0", "wal", cairnv1.PodVolumeStatus{
			Phase: cairnv1.PodVolumePhaseFailed, Message: "Cancelled: cancelled during the restore"}),
		pvr(DefaultOperatorNamespace, "r0-web-0-data", "uid-r0", "web-0", "old", cairnv1.PodVolumeStatus{}),
	)
	if got := run(e, "restore", "describe", "r1", "--details"); got != ExitOK {
		t.Fatalf("exit %d: %s", got, errOut)
	}
	text := out.String()
	for _, want := range []string{
		`(?m)^Volume bytes:\s+150\.0 MiB of 300\.0 MiB written$`,
		`(?m)^Exec hooks:\s+2 run, 1 failed$`,
		`(?m)^  Hooks:\s+db \(1 init, 2 exec\); pods' restore hook annotations take their place$`,
		`(?m)^  POD\s+VOLUME\s+PHASE\s+BYTES\s+SPEED\s+SNAPSHOT\s+MESSAGE$`,
		`(?m)^  team-a/db-0\s+wal\s+Failed\s+0 B\s+-\s+k-wal\s+Cancelled: cancelled during the restore$`,
		`(?m)^  team-a/web-0\s+data\s+Completed\s+200\.0 MiB/200\.0 MiB\s+10\.0 MiB/s\s+k-data$`,
	} {
		if !regexp.MustCompile(want).MatchString(text) {
			t.Errorf("no line matching %s:\n%s", want, text)
		}
	}
	if strings.Contains(text, "k-old") || strings.Contains(text, "UPLOADED") {
		t.Errorf("another restore's volume, or an upload column:\n%s", text)
	}
}
