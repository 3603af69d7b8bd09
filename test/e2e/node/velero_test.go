//go:build e2enode

package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/podvolume"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// veleroVolumeFixture is the real Velero file-system backup hack/velero-volume-fixtures.sh made
// on this node with Velero v1.18.1's server and node agent: backup ledger-fs of namespace
// ledger, whose pod books (the voldata app, seed 33) had two emptyDir volumes, data and
// journal, copied by Velero's kopia uploader; report.json is what the app reported of them.
var veleroVolumeFixture = filepath.Join(testenv.RepoRoot(), "testdata", "velero", "volumes")

// uploadTree puts every file under dir into bucket of server, keyed by its path under dir.
func uploadTree(ctx context.Context, server *testenv.S3Server, bucket, dir string) {
	GinkgoHelper()
	s3, err := storage.NewS3(storage.S3Config{Bucket: bucket, Endpoint: server.Endpoint(), Region: "us-east-1", ForcePathStyle: true,
		Credentials: storage.S3Credentials{AccessKeyID: server.AccessKey, SecretAccessKey: server.SecretKey}})
	Expect(err).NotTo(HaveOccurred())
	Expect(filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		rel, _ := filepath.Rel(dir, path)
		return s3.Put(ctx, filepath.ToSlash(rel), f)
	})).To(Succeed())
}

// describeVeleroVolumes adds the spec of restoring the volume data of a Velero backup (issue
// 33) to the ordered container that installed Cairn: the fixture's bucket is put into a bucket
// of its own on the suite's S3 server (*server, behind *proxy, which the manager reaches).
func describeVeleroVolumes(proxy **testenv.StallingProxy, server **testenv.S3Server) {
	Describe("restoring the volume data of a Velero backup", func() {
		It("restores a Velero file-system backup into a new namespace: the pod starts on its data, every file's SHA-256, mode and link target as Velero backed it up", func(ctx SpecContext) {
			suffix := rand.String(5)
			bucket, location, ns, restoreName := "velero-"+suffix, "velero-"+suffix, "node-velero-"+suffix, "node-velero-"+suffix
			By("putting Velero's bucket on the S3 server, and a velero location over it with Velero's repository password")
			(*server).CreateBucket(bucket)
			uploadTree(ctx, *server, bucket, filepath.Join(veleroVolumeFixture, "bucket"))
			secrets := []*corev1.Secret{
				{ObjectMeta: metav1.ObjectMeta{Name: location + "-s3", Namespace: cairnNamespace}, Data: map[string][]byte{"cloud": []byte((*server).CredentialsFile())}},
				{ObjectMeta: metav1.ObjectMeta{Name: location + "-repo", Namespace: cairnNamespace}, Data: map[string][]byte{"repository-password": []byte("static-passw0rd")}},
			}
			for _, s := range secrets {
				Expect(k8s.Create(ctx, s)).To(Succeed())
			}
			bsl := &cairnv1.BackupStorageLocation{
				ObjectMeta: metav1.ObjectMeta{Name: location, Namespace: cairnNamespace},
				Spec: cairnv1.BackupStorageLocationSpec{
					Format: cairnv1.LocationFormatVelero, AccessMode: cairnv1.AccessModeReadOnly, Provider: cairnv1.StorageProviderS3,
					ObjectStorage:    &cairnv1.ObjectStorage{Bucket: bucket, Prefix: "velero"},
					Config:           map[string]string{"endpoint": (*proxy).URL, "region": "us-east-1", "forcePathStyle": "true"},
					Credential:       &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: location + "-s3"}, Key: "cloud"},
					BackupSyncPeriod: &metav1.Duration{Duration: 2 * time.Second},
					Velero:           &cairnv1.VeleroLocation{RepositoryPasswordSecretRef: &cairnv1.SecretKeyReference{Name: location + "-repo", Key: "repository-password"}},
				},
			}
			Expect(k8s.Create(ctx, bsl)).To(Succeed())
			DeferCleanup(func(ctx SpecContext) {
				_, _, _ = kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait", "--timeout=180s")
				_, _, _ = kubectl("delete", "restore", restoreName, "-n", cairnNamespace, "--ignore-not-found", "--wait", "--timeout=120s")
				// The location first: while it exists, its sync makes the backup again.
				_, _, _ = kubectl("delete", "backupstoragelocation", location, "-n", cairnNamespace, "--ignore-not-found", "--wait", "--timeout=60s")
				_, _, _ = kubectl("delete", "backup", "ledger-fs", "-n", cairnNamespace, "--ignore-not-found", "--wait", "--timeout=120s")
				for _, s := range secrets {
					_ = client.IgnoreNotFound(k8s.Delete(ctx, s))
				}
			})
			kubectlOK("wait", "backupstoragelocation/"+location, "-n", cairnNamespace, "--for=jsonpath={.status.phase}=Available", "--timeout=120s")
			kubectlOK("wait", "backup/ledger-fs", "-n", cairnNamespace, "--for=create", "--timeout=120s")
			waitBackupPhase(ctx, "ledger-fs", cairnv1.BackupPhaseCompleted)

			By("restoring the Velero backup into a new namespace")
			started := time.Now()
			apply(restoreManifest(restoreName, "ledger-fs", "ledger", ns))
			waitRestoreCompleted(ctx, restoreName)
			fmt.Fprintf(GinkgoWriter, "The restore took %s\n", time.Since(started).Round(time.Millisecond))
			r := getRestore(ctx, Default, k8s, restoreName)
			pvrs := podVolumeRestores(ctx, Default, k8s, r.UID)
			Expect(pvrs).To(HaveLen(2))
			for volume, p := range pvrs {
				Expect(p.Status.Phase).To(Equal(cairnv1.PodVolumePhaseCompleted), "volume %s: %s", volume, p.Status.Message)
				Expect(p.Spec.Repository).To(Equal(cairnv1.RepositoryReference{StorageLocation: location, Namespace: "ledger"}))
				Expect(p.Spec.SnapshotSource).To(Equal("snapshot-pod-volume/kopia/ledger/books/"))
				Expect(p.Spec.SnapshotTags).To(Equal(map[string]string{"ns": "ledger", "pod": "books"}))
				Expect(p.Spec.Node).To(Equal("cairn-node"))
			}

			By("finding the app started once, after its restore helper, on the data Velero copied")
			kubectlOK("wait", "pod/books", "-n", ns, "--for=condition=Ready", "--timeout=120s")
			var pod corev1.Pod
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "books"}, &pod)).To(Succeed())
			Expect(pod.Spec.InitContainers).NotTo(BeEmpty())
			Expect(pod.Spec.InitContainers[0].Name).To(Equal(podvolume.RestoreHelperContainer))
			helper, ok := containerStatus(pod, podvolume.RestoreHelperContainer)
			Expect(ok).To(BeTrue())
			Expect(helper.State.Terminated).NotTo(BeNil())
			Expect(helper.State.Terminated.ExitCode).To(BeZero())
			app, ok := containerStatus(pod, "app")
			Expect(ok).To(BeTrue())
			Expect(app.RestartCount).To(BeZero())

			var original []voldataReport
			data, err := os.ReadFile(filepath.Join(veleroVolumeFixture, "report.json"))
			Expect(err).NotTo(HaveOccurred())
			Expect(json.Unmarshal(data, &original)).To(Succeed())
			reports := map[string]voldataReport{}
			for _, line := range strings.Split(strings.TrimSpace(kubectlOK("logs", "books", "-n", ns, "-c", "app")), "\n") {
				var rep voldataReport
				Expect(json.Unmarshal([]byte(line), &rep)).To(Succeed(), "the app's log line %q", line)
				reports[filepath.Base(rep.Dir)] = rep
			}
			Expect(reports).To(HaveLen(len(original)))
			for _, want := range original {
				volume := filepath.Base(want.Dir)
				got := reports[volume]
				Expect(got.Written).To(BeFalse(), "volume %s was empty when the app started: it wrote the data itself", volume)
				expectSameTree(volume, got, want)
			}
		})
	})
}
