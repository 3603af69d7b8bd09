//go:build e2enode

package node

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv/emulator"
)

// The app's volumes in the cloud specs: small, so that each provider's round trip is quick.
const (
	cloudLargeBytes = 4 << 20
	cloudSmallFiles = 200
)

// azureDNSNamespace holds the Service that names Azurite's account for the pods: kopia's Azure
// storage reaches an account as <account>.<storage domain>, so the account's name must resolve
// to Azurite in the manager's pod. A headless Service named for the account, without a
// selector, whose EndpointSlice is the node's address, makes CoreDNS answer
// <account>.<namespace>.svc.cluster.local with the node's address; nothing else is resolved.
const azureDNSNamespace = "azure-blob"

// cloudVolumeStore is an emulated cloud of the azure or gcs provider in the node's network
// namespace, on the node's address, where the manager's pod reaches it.
type cloudVolumeStore struct {
	provider cairnv1.StorageProvider
	// config is the location's config, credential what its Secret holds.
	config     map[string]string
	credential []byte
	newBucket  func(name string)
	objects    func(bucket string) ([]string, error)
}

// startAzureVolumeStore runs Azurite on the node's address, and the Service that names its
// account for the pods.
func startAzureVolumeStore() *cloudVolumeStore {
	GinkgoHelper()
	a := emulator.StartAzuriteOn(GinkgoT(), nodeIP)
	_, port, err := net.SplitHostPort(a.Addr())
	Expect(err).NotTo(HaveOccurred())
	apply(fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: Service
metadata: {name: %[2]s, namespace: %[1]s}
spec:
  clusterIP: None
  ports: [{name: blob, port: %[3]s, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: %[2]s
  namespace: %[1]s
  labels: {kubernetes.io/service-name: %[2]s}
addressType: IPv4
ports: [{name: blob, port: %[3]s, protocol: TCP}]
endpoints: [{addresses: [%[4]q]}]
`, azureDNSNamespace, a.Account, port, nodeIP))
	DeferCleanup(func() {
		_, _, _ = kubectl("delete", "namespace", azureDNSNamespace, "--ignore-not-found", "--wait", "--timeout=120s")
	})
	return &cloudVolumeStore{
		provider: cairnv1.StorageProviderAzure,
		config: map[string]string{
			cairnv1.ConfigKeyStorageAccount: a.Account,
			cairnv1.ConfigKeyEndpoint:       fmt.Sprintf("http://%s.%s.svc.cluster.local:%s", a.Account, azureDNSNamespace, port),
		},
		credential: []byte("AZURE_STORAGE_ACCOUNT_ACCESS_KEY=" + a.Key + "\n"),
		newBucket:  a.CreateContainer,
		objects:    a.Blobs,
	}
}

// startGCSVolumeStore runs fake-gcs-server and a token endpoint on the node's address, and
// points the manager at the server with STORAGE_EMULATOR_HOST (kopia's GCS storage has no
// endpoint option), by helm upgrade: the manager's pod is replaced.
func startGCSVolumeStore(ctx context.Context) *cloudVolumeStore {
	GinkgoHelper()
	f := emulator.StartFakeGCSOn(GinkgoT(), nodeIP)
	l, err := net.Listen("tcp", net.JoinHostPort(nodeIP, "0"))
	Expect(err).NotTo(HaveOccurred())
	tokens := emulator.ServeTokenServer(GinkgoT(), l)

	By("helm upgrade --reuse-values, the manager's extraEnv STORAGE_EMULATOR_HOST=" + f.Endpoint())
	old := readyManager(ctx)
	helmOK("upgrade", release, "charts/cairn", "--namespace", cairnNamespace, "--reuse-values",
		"--set-json", fmt.Sprintf(`extraEnv=[{"name":"STORAGE_EMULATOR_HOST","value":%q}]`, f.Endpoint()), "--wait", "--timeout=5m")
	Eventually(func(g Gomega) {
		pods := runningPods(ctx, g, cairnNamespace, managerSelector)
		g.Expect(pods).To(HaveLen(1))
		g.Expect(pods[0].Name).NotTo(Equal(old.Name))
		g.Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(&old), &corev1.Pod{}))).To(BeTrue(), "the old pod is gone")
	}).WithTimeout(180 * time.Second).WithPolling(time.Second).Should(Succeed())
	Eventually(leader).WithTimeout(60 * time.Second).WithPolling(time.Second).Should(Equal(readyManager(ctx).Name))

	return &cloudVolumeStore{
		provider:   cairnv1.StorageProviderGCS,
		config:     map[string]string{},
		credential: tokens.ServiceAccountKey(GinkgoT()),
		newBucket:  f.CreateBucket,
		objects:    f.Objects,
	}
}

// location makes the storage location name of bucket (prefix "cluster") with its credential
// Secret, removed at the end of the spec, and waits until it is Available.
func (c *cloudVolumeStore) location(name, bucket string) {
	GinkgoHelper()
	file := filepath.Join(GinkgoT().TempDir(), "cloud")
	Expect(os.WriteFile(file, c.credential, 0o600)).To(Succeed())
	kubectlOK("create", "secret", "generic", name, "-n", cairnNamespace, "--from-file=cloud="+file)
	DeferCleanup(func() { _, _, _ = kubectl("delete", "secret", name, "-n", cairnNamespace, "--ignore-not-found") })
	var config []string
	for k, v := range c.config {
		config = append(config, fmt.Sprintf("%s: %q", k, v))
	}
	apply(fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: BackupStorageLocation
metadata: {name: %s, namespace: %s}
spec:
  provider: %s
  objectStorage: {bucket: %s, prefix: cluster}
  config: {%s}
  credential: {name: %s, key: cloud}
`, name, cairnNamespace, c.provider, bucket, strings.Join(config, ", "), name))
	DeferCleanup(func() {
		_, _, _ = kubectl("delete", "backupstoragelocation", name, "-n", cairnNamespace, "--ignore-not-found")
	})
	_, stderr, err := kubectl("wait", "backupstoragelocation/"+name, "-n", cairnNamespace, "--for=jsonpath={.status.phase}=Available", "--timeout=120s")
	if err != nil {
		yaml, _, _ := kubectl("get", "backupstoragelocation", name, "-n", cairnNamespace, "-o", "yaml")
		Fail(fmt.Sprintf("location %s is not Available: %s\n%s", name, stderr, yaml))
	}
}

// describeCloudVolumes adds the specs of volume data on azure and gcs locations (DESIGN.md
// section 23) to the ordered container that installed Cairn: for each provider, an app's
// namespace with a claim and an emptyDir is backed up through the node agent into kopia's
// Azure or GCS storage, deleted, and restored. The gcs specs leave the manager with
// STORAGE_EMULATOR_HOST set: they come last.
func describeCloudVolumes() {
	for _, provider := range []cairnv1.StorageProvider{cairnv1.StorageProviderAzure, cairnv1.StorageProviderGCS} {
		Describe("volume data on a "+string(provider)+" location", Ordered, func() {
			var store *cloudVolumeStore
			BeforeAll(func(ctx SpecContext) {
				if provider == cairnv1.StorageProviderAzure {
					store = startAzureVolumeStore()
				} else {
					store = startGCSVolumeStore(ctx)
				}
			})

			It("backs up a namespace with volume data through kopia's "+string(provider)+" storage, and restores it after the namespace is deleted", func(ctx SpecContext) {
				ns := "node-" + string(provider) + "-vol-" + rand.String(5)
				location, bucket := ns, ns
				store.newBucket(bucket)
				store.location(location, bucket)
				app := deployVoldataSized(ns, cloudLargeBytes, cloudSmallFiles)
				DeferCleanup(func() {
					_, _, _ = kubectl("delete", "restore", ns, "-n", cairnNamespace, "--ignore-not-found", "--wait", "--timeout=120s")
					_, _, _ = kubectl("delete", "backup", ns, "-n", cairnNamespace, "--ignore-not-found", "--wait", "--timeout=120s")
				})

				By("backing the namespace up, both volumes opted in by the pod's annotation")
				started := time.Now()
				apply(volumeBackupManifest(ns, ns, location, false))
				waitBackupPhase(ctx, ns, cairnv1.BackupPhaseCompleted)
				fmt.Fprintf(GinkgoWriter, "The backup took %s\n", time.Since(started).Round(time.Millisecond))
				backup := getBackup(ctx, Default, ns)
				copies := podVolumeBackups(ctx, Default, backup.UID)
				Expect(copies).To(HaveLen(2))
				for volume, p := range copies {
					Expect(p.Status.Phase).To(Equal(cairnv1.PodVolumePhaseCompleted), "volume %s: %s", volume, p.Status.Message)
					Expect(p.Spec.Repository).To(Equal(cairnv1.RepositoryReference{StorageLocation: location, Namespace: ns}))
					Expect(p.Status.BytesDone).To(Equal(app.reports[volume].Bytes), "volume %s", volume)
					Expect(p.Status.Files).To(Equal(app.reports[volume].Files), "volume %s", volume)
				}

				By("finding the repository in the " + string(provider) + " storage under the location's prefix, beside the backup")
				objects, err := store.objects(bucket)
				Expect(err).NotTo(HaveOccurred())
				var repository int
				for _, key := range objects {
					if strings.HasPrefix(key, "cluster/kopia/"+ns+"/") {
						repository++
					}
				}
				Expect(repository).To(BeNumerically(">", 1), "objects of the repository: %v", objects)
				Expect(objects).To(ContainElement(storage.Layout{Prefix: "cluster"}.Backup(cairnNamespace, ns).Metadata))

				By("deleting the namespace, as a user who lost it, and the data of its volume, as a disk that was replaced")
				kubectlOK("delete", "namespace", ns, "--wait", "--timeout=180s")
				var pv corev1.PersistentVolume
				Eventually(func(g Gomega) corev1.PersistentVolumePhase {
					g.Expect(k8s.Get(ctx, client.ObjectKey{Name: app.pv}, &pv)).To(Succeed())
					return pv.Status.Phase
				}).WithTimeout(60 * time.Second).WithPolling(time.Second).Should(Equal(corev1.VolumeReleased))
				entries, err := os.ReadDir(app.hostDir)
				Expect(err).NotTo(HaveOccurred())
				for _, e := range entries {
					Expect(os.RemoveAll(filepath.Join(app.hostDir, e.Name()))).To(Succeed())
				}

				By("restoring it: the pod starts once the node agent wrote its volumes back from the " + string(provider) + " storage")
				started = time.Now()
				apply(restoreManifest(ns, ns, ns, ""))
				waitRestoreCompleted(ctx, ns)
				fmt.Fprintf(GinkgoWriter, "The restore took %s\n", time.Since(started).Round(time.Millisecond))
				pvrs := podVolumeRestores(ctx, Default, k8s, getRestore(ctx, Default, k8s, ns).UID)
				Expect(pvrs).To(HaveLen(2))
				for volume, p := range pvrs {
					Expect(p.Status.Phase).To(Equal(cairnv1.PodVolumePhaseCompleted), "volume %s: %s", volume, p.Status.Message)
					Expect(p.Spec.Repository).To(Equal(cairnv1.RepositoryReference{StorageLocation: location, Namespace: ns}))
				}
				expectRestoredApp(ctx, ns, pvrs, app.reports)
				got, err := treeDigest(app.hostDir)
				Expect(err).NotTo(HaveOccurred())
				expectSameTree("claim", got, app.reports["claim"])
			})
		})
	}
}
