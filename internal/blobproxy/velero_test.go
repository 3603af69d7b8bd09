package blobproxy

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/repository"
	"github.com/cairn-backup/cairn/internal/testenv"
	"github.com/cairn-backup/cairn/internal/velerofmt"
)

// veleroVolumes is the Velero file-system backup hack/velero-volume-fixtures.sh made with
// Velero v1.18.1's server and node agent (its kopia fork): the bucket, and each volume's tree as
// it was when Velero copied it.
var veleroVolumes = filepath.Join("..", "..", "testdata", "velero", "volumes")

// veleroPassword is Velero's default repository password, the one the fixture's repository has.
const veleroPassword = "static-passw0rd"

// copyTree copies the directory src into dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// files lists the regular files under dir with their sizes.
func files(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			info, _ := d.Info()
			out[p] = info.Size()
		}
		return err
	})
	return out
}

// TestVeleroKopiaRepositoryThroughTheProxy: Velero's kopia repository (its fork of kopia, its
// uploader) opens read only with Cairn's kopia through the node agent's path (the blob proxy
// serving a ReadOnly filesystem location of format velero, at <prefix>/kopia/<namespace>/)
// with Velero's password; each PodVolumeBackup's snapshot restores the volume exactly as it
// was (every file's content and mode, directories, the symbolic link), naming the pod's
// namespace, pod and volume as its source; nothing is written to the location; a wrong
// password is ErrWrongPassword.
func TestVeleroKopiaRepositoryThroughTheProxy(t *testing.T) {
	root := t.TempDir()
	copyTree(t, filepath.Join(veleroVolumes, "bucket"), root)
	before := files(t, root)
	bsl := &cairnv1.BackupStorageLocation{
		ObjectMeta: metav1.ObjectMeta{Name: "velero", Namespace: "cairn-system"},
		Spec: cairnv1.BackupStorageLocationSpec{
			Format: cairnv1.LocationFormatVelero, AccessMode: cairnv1.AccessModeReadOnly,
			Provider:      cairnv1.StorageProviderFilesystem,
			Config:        map[string]string{"path": root},
			ObjectStorage: &cairnv1.ObjectStorage{Prefix: "velero"},
		},
	}
	reader := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(bsl).Build()
	e := newEnv(t, LocationBackends{Reader: reader, Namespace: "cairn-system"}, nil)
	ctx := context.Background()

	f, err := os.Open(filepath.Join(root, "velero", "backups", "ledger-fs", "ledger-fs"+velerofmt.PodVolumeBackupsSuffix))
	if err != nil {
		t.Fatal(err)
	}
	pvbs, err := velerofmt.ReadPodVolumeBackups(f, "ledger-fs"+velerofmt.PodVolumeBackupsSuffix)
	_ = f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(pvbs) != 2 {
		t.Fatalf("the fixture has %d PodVolumeBackups, want 2 (data and journal)", len(pvbs))
	}

	_, err = repository.Open(ctx, repository.Options{
		Storage: e.client("velero", "ledger"), Password: "not-" + veleroPassword, Hostname: "cairn", Username: "node-a",
		ConfigDir: t.TempDir(), ReadOnly: true, MustExist: true,
	})
	if !errors.Is(err, repository.ErrWrongPassword) {
		t.Errorf("opening with a wrong password: %v, want ErrWrongPassword", err)
	}

	rep, err := repository.Open(ctx, repository.Options{
		Storage: e.client("velero", "ledger"), Password: veleroPassword, Hostname: "cairn", Username: "node-a",
		ConfigDir: t.TempDir(), ReadOnly: true, MustExist: true,
	})
	if err != nil {
		t.Fatalf("opening Velero's repository: %v", err)
	}
	defer func() { _ = rep.Close() }()
	for _, p := range pvbs {
		t.Run(p.Spec.Volume, func(t *testing.T) {
			if p.Spec.UploaderType != "kopia" || p.Status.Phase != "Completed" || p.Status.SnapshotID == "" {
				t.Fatalf("PodVolumeBackup of %s: uploader %q, phase %q, snapshot %q", p.Spec.Volume, p.Spec.UploaderType, p.Status.Phase, p.Status.SnapshotID)
			}
			src, err := rep.SnapshotSource(ctx, p.Status.SnapshotID)
			// Velero v1.18's uploader names the source <requestor>/kopia/<namespace>/<pod>/<volume>.
			if want := "snapshot-pod-volume/kopia/ledger/books/" + p.Spec.Volume; err != nil || src != want {
				t.Errorf("SnapshotSource = %q, %v; want %q", src, err, want)
			}
			other := filepath.Join(t.TempDir(), "other")
			if _, err := rep.Restore(ctx, p.Status.SnapshotID, other, repository.RestoreOptions{Of: repository.SnapshotIdentity{
				SourcePrefix: "snapshot-pod-volume/kopia/shop/", Tags: map[string]string{"ns": "shop", "pod": "books"}}}); err == nil ||
				!strings.Contains(err.Error(), "is not restored") {
				t.Errorf("Restore of a snapshot of another source: %v, want a refusal", err)
			}
			if entries, _ := os.ReadDir(other); len(entries) > 0 {
				t.Errorf("a refused snapshot wrote %d entries", len(entries))
			}
			dst := filepath.Join(t.TempDir(), p.Spec.Volume)
			res, err := rep.Restore(ctx, p.Status.SnapshotID, dst, repository.RestoreOptions{Of: repository.SnapshotIdentity{
				SourcePrefix: "snapshot-pod-volume/kopia/ledger/books/", Tags: map[string]string{"ns": "ledger", "pod": "books"}}})
			if err != nil {
				t.Fatalf("Restore: %v", err)
			}
			want, err := testenv.VeleroFixtureTree(p.Spec.Volume)
			if err != nil {
				t.Fatal(err)
			}
			got, err := testenv.VolumeTree(dst)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Errorf("restored tree differs from the volume Velero copied:\ngot\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if res.Files == 0 {
				t.Errorf("Restore reported %d files", res.Files)
			}
		})
	}
	if after := files(t, root); !maps.Equal(before, after) {
		t.Errorf("the location changed: %d files before, %d after", len(before), len(after))
	}
}
