package bench

import (
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// BenchmarkEncryption10kConfigMaps backs up and restores 10,000 ConfigMaps of 1 KiB with the
// real manager binary into a plain filesystem location and an encrypted one (issue 31; goal: no
// more than 10% slower, memory unchanged), in turns in the same run, on the same control plane:
// plain, encrypted, plain, encrypted, each backup's best of two; then one restore from each.
func BenchmarkEncryption10kConfigMaps(b *testing.B) {
	const n = 10000
	cl := startBackupCluster(b, 1)
	defer cl.stop()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	mustCreate(b, cl.c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bench-keys", Namespace: operatorNamespace}, Data: map[string][]byte{"k1": key}})
	mustCreate(b, cl.c, &cairnv1.BackupStorageLocation{
		ObjectMeta: metav1.ObjectMeta{Name: "encrypted", Namespace: operatorNamespace},
		Spec: cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Config: map[string]string{"path": b.TempDir()},
			Encryption: &cairnv1.LocationEncryption{KeySecretRef: cairnv1.LocalSecretReference{Name: "bench-keys"}, WriteKey: "k1"}},
	})
	waitAvailable(b, cl.c, "encrypted")
	namespaces := benchNamespaces()
	fillConfigMaps(b, cl.c, namespaces, n)
	backedUp := countConfigMaps(b, cl.c, namespaces)

	locations := map[string]string{"plain": "default", "encrypted": "encrypted"}
	backupTime := map[string]time.Duration{}
	backupRSS := map[string]float64{}
	for round := range 2 {
		for _, kind := range []string{"plain", "encrypted"} {
			cl.manager.resetRSSPeak(b)
			_, wall := timeBackupSpec(b, cl.c, fmt.Sprintf("%s-%d", kind, round),
				cairnv1.BackupSpec{IncludedNamespaces: namespaces, StorageLocation: locations[kind]})
			if best, ok := backupTime[kind]; !ok || wall < best {
				backupTime[kind] = wall
			}
			backupRSS[kind] = max(backupRSS[kind], cl.manager.rssPeakMiB(b))
		}
	}
	restoreTime := map[string]time.Duration{}
	restoreRSS := map[string]float64{}
	for _, kind := range []string{"plain", "encrypted"} {
		deleteConfigMaps(b, cl.c, namespaces)
		cl.manager.resetRSSPeak(b)
		run := timeRestore(b, cl.cfg, cl.c, &cairnv1.Restore{
			ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: "restore-" + kind},
			Spec:       cairnv1.RestoreSpec{BackupName: kind + "-0", IncludedResources: []string{"configmaps"}},
		})
		restoreTime[kind] = run.entered[cairnv1.RestorePhaseCompleted]
		restoreRSS[kind] = cl.manager.rssPeakMiB(b)
		if restored := countConfigMaps(b, cl.c, namespaces, client.MatchingLabels{cairnv1.RestoreNameLabel: "restore-" + kind}); restored != backedUp {
			b.Fatalf("restore-%s: %d ConfigMaps carry its label, want %d", kind, restored, backedUp)
		}
	}

	for _, kind := range []string{"plain", "encrypted"} {
		b.ReportMetric(backupTime[kind].Seconds(), "backup-"+kind+"-s")
		b.ReportMetric(backupRSS[kind], "backup-"+kind+"-rss-MiB")
		b.ReportMetric(restoreTime[kind].Seconds(), "restore-"+kind+"-s")
		b.ReportMetric(restoreRSS[kind], "restore-"+kind+"-rss-MiB")
	}
	b.ReportMetric(backupTime["encrypted"].Seconds()/backupTime["plain"].Seconds(), "backup-ratio")
	b.ReportMetric(restoreTime["encrypted"].Seconds()/restoreTime["plain"].Seconds(), "restore-ratio")
}

// waitAvailable waits until the location is Available.
func waitAvailable(b *testing.B, c client.Client, name string) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var l cairnv1.BackupStorageLocation
		if err := c.Get(b.Context(), client.ObjectKey{Namespace: operatorNamespace, Name: name}, &l); err == nil && l.Status.Phase == cairnv1.StorageLocationPhaseAvailable {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("location %s is not Available", name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
