package bench

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/testenv/emulator"
)

// BenchmarkCloud10kConfigMaps backs up and restores 10,000 ConfigMaps of 1 KiB with the real
// manager binary into a filesystem location (the floor), an azure one on Azurite and a gcs one
// on fake-gcs-server (issue 44), in turns in the same run, on the same control plane: each
// backup's best of two rounds, then one restore from each.
func BenchmarkCloud10kConfigMaps(b *testing.B) {
	const n = 10000
	cl := startBackupCluster(b, 1)
	defer cl.stop()
	azurite := emulator.StartAzurite(b)
	azurite.CreateContainer("bench")
	fakeGCS := emulator.StartFakeGCS(b)
	fakeGCS.CreateBucket("bench")
	tokens := emulator.StartTokenServer(b)
	mustCreate(b, cl.c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bench-clouds", Namespace: operatorNamespace}, Data: map[string][]byte{
		"azure": []byte("AZURE_STORAGE_ACCOUNT_ACCESS_KEY=" + azurite.Key + "\n"),
		"gcs":   tokens.ServiceAccountKey(b),
	}})
	for name, spec := range map[string]cairnv1.BackupStorageLocationSpec{
		"azure": {Provider: cairnv1.StorageProviderAzure, ObjectStorage: &cairnv1.ObjectStorage{Bucket: "bench"},
			Config: map[string]string{"storageAccount": azurite.Account, "endpoint": azurite.Endpoint()}},
		"gcs": {Provider: cairnv1.StorageProviderGCS, ObjectStorage: &cairnv1.ObjectStorage{Bucket: "bench"},
			Config: map[string]string{"endpoint": fakeGCS.Endpoint()}},
	} {
		spec.Credential = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "bench-clouds"}, Key: name}
		mustCreate(b, cl.c, &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: operatorNamespace}, Spec: spec})
		waitAvailable(b, cl.c, name)
	}
	namespaces := benchNamespaces()
	fillConfigMaps(b, cl.c, namespaces, n)
	backedUp := countConfigMaps(b, cl.c, namespaces)

	kinds := []string{"filesystem", "azure", "gcs"}
	locations := map[string]string{"filesystem": "default", "azure": "azure", "gcs": "gcs"}
	backupTime := map[string]time.Duration{}
	backupRSS := map[string]float64{}
	for round := range 2 {
		for _, kind := range kinds {
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
	for _, kind := range kinds {
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
	for _, kind := range kinds {
		b.ReportMetric(backupTime[kind].Seconds(), "backup-"+kind+"-s")
		b.ReportMetric(backupRSS[kind], "backup-"+kind+"-rss-MiB")
		b.ReportMetric(restoreTime[kind].Seconds(), "restore-"+kind+"-s")
		b.ReportMetric(restoreRSS[kind], "restore-"+kind+"-rss-MiB")
		if kind != "filesystem" {
			b.ReportMetric(backupTime[kind].Seconds()/backupTime["filesystem"].Seconds(), "backup-"+kind+"-ratio")
			b.ReportMetric(restoreTime[kind].Seconds()/restoreTime["filesystem"].Seconds(), "restore-"+kind+"-ratio")
		}
	}
}
