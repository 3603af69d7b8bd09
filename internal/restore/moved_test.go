package restore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	discoveryfake "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/restore"
	"github.com/cairn-backup/cairn/internal/storage"
)

// A bucket writer copies one backup's encrypted archive over another's (team-b's over
// team-a's, DESIGN.md section 21): the restore of the latter fails at once, naming the object, as no storage fault (a team
// sees the message, and it is not retried), and creates nothing.
func TestRunRefusesAnEncryptedArchiveMovedFromAnotherKey(t *testing.T) {
	plain, err := storage.NewFilesystem(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	store, err := storage.Encrypted(plain, storage.Keyring{Keys: map[string][]byte{"k1": key}, WriteKey: "k1"}, "")
	if err != nil {
		t.Fatal(err)
	}
	entries := func(ns string) []archiveEntry {
		cm := object("v1", "ConfigMap", ns, "settings", nil)
		return []archiveEntry{{path: archive.ItemPath("configmaps", "", ns, "settings"), obj: cm}}
	}
	// Two backups under the operator's namespace, as the restore reads its own namespace's.
	teamA := writeBackupTo(t, store, "cairn-system", "b1", entries("team-a"))
	teamB := writeBackupTo(t, store, "cairn-system", "b2", entries("team-b"))
	rc, err := plain.Get(context.Background(), teamB.Archive)
	if err != nil {
		t.Fatal(err)
	}
	moved, err := io.ReadAll(rc)
	_ = rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Put(context.Background(), teamA.Archive, bytes.NewReader(moved)); err != nil {
		t.Fatal(err)
	}

	var calls []string
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	dyn.PrependReactor("*", "*", func(action clienttesting.Action) (bool, runtime.Object, error) {
		calls = append(calls, action.GetVerb()+" "+action.GetResource().Resource)
		return false, nil, nil
	})
	runner := &restore.Runner{Dynamic: dyn, Discovery: &discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{}}}
	rs := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "cairn-system", Name: "r1"}, Status: cairnv1.RestoreStatus{BackupName: "b1"}}
	res := runner.Run(context.Background(), restore.Request{Restore: rs, OperatorNamespace: "cairn-system", Source: store, BackupKeys: teamA})
	if res.Ending != restore.Failed || res.StorageFailure ||
		!strings.Contains(res.FailureReason, "decrypting "+teamA.Archive) || !strings.Contains(res.FailureReason, "moved or copied here") {
		t.Fatalf("run ended %s (storage failure %v): %q; want Failed naming %s", res.Ending, res.StorageFailure, res.FailureReason, teamA.Archive)
	}
	if len(calls) != 0 {
		t.Errorf("the API server was called: %v", calls)
	}
}
