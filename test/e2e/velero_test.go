package e2e

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cairn-backup/cairn/internal/testenv"
)

// Coming from Velero as docs/migrating-from-velero.md tells it: Velero's bucket (the fixtures
// hack/velero-fixtures.sh made with Velero itself, uploaded to an S3 server) is read by a fresh
// control plane through a location of format velero made with the CLI; its Completed and
// PartiallyFailed backups appear, and one restores object by object as Velero backed it up.
var _ = Describe("Velero's bucket read by a fresh cluster", func() {
	It("shows exactly Velero's Completed and PartiallyFailed backups with their origin, restores one, and refuses writes", func() {
		const location, bucket = "from-velero", "velero"
		fixtures := filepath.Join(testenv.RepoRoot(), "testdata", "velero")
		server := testenv.StartS3Server(GinkgoT())
		server.CreateBucket(bucket)
		upload := bucketClient(server, bucket)
		root := filepath.Join(fixtures, "bucket")
		Expect(filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			rel, _ := filepath.Rel(root, path)
			return upload.Put(context.Background(), filepath.ToSlash(rel), f)
		})).To(Succeed())
		b := startSecondCluster()

		By("creating the location with cairn location create --format velero")
		credentials := filepath.Join(GinkgoT().TempDir(), "cloud")
		Expect(os.WriteFile(credentials, []byte(server.CredentialsFile()), 0o600)).To(Succeed())
		b.kubectlOK("create", "secret", "generic", "velero-s3", "-n", "cairn-system", "--from-file=cloud="+credentials)
		r := cairnWith(b.kubeconfig, "location", "create", location, "--format", "velero", "--provider", "s3",
			"--bucket", bucket, "--prefix", "velero", "--credential", "velero-s3=cloud",
			"--config", "endpoint="+server.Endpoint()+",region=us-east-1,forcePathStyle=true")
		Expect(r.code).To(BeZero(), r.stderr)
		b.kubectlOK("patch", "backupstoragelocation", location, "-n", "cairn-system", "--type", "merge", "-p", `{"spec":{"backupSyncPeriod":"2s"}}`)
		Expect(b.kubectlOK("get", "backupstoragelocation", location, "-n", "cairn-system", "-o", "jsonpath={.spec.format} {.spec.accessMode}")).
			To(Equal("velero ReadOnly"))

		By("syncing Velero's backups")
		for name, phase := range map[string]string{"shop-full": "Completed", "shop-labelled": "Completed", "shop-broken": "PartiallyFailed"} {
			b.wait("backup/"+name, "cairn-system", "jsonpath={.status.phase}="+phase, "60s")
		}
		out := b.kubectlOK("get", "backups", "-n", "cairn-system", "-l", "cairn.dev/storage-location="+location, "-o", "jsonpath={.items[*].metadata.name}")
		names := strings.Fields(out)
		Expect(names).To(HaveLen(4), "exactly Velero's four Completed and PartiallyFailed backups: %v", names)
		res := cairnWith(b.kubeconfig, "backup", "get", "-n", "cairn-system")
		Expect(res.code).To(BeZero(), res.stderr)
		header, rows := table(res.stdout)
		Expect(header).To(ContainElement("ORIGIN"))
		origins := map[string]string{}
		for _, row := range rows {
			origins[row["NAME"]] = row["ORIGIN"]
		}
		Expect(origins).To(HaveKeyWithValue("shop-full", "velero "+location+"/shop-full"))
		Expect(origins).To(HaveKeyWithValue("shop-broken", "velero "+location+"/shop-broken"))

		By("restoring shop-full into another namespace")
		b.apply(`apiVersion: cairn.dev/v1alpha1
kind: Restore
metadata: {name: from-velero, namespace: cairn-system}
spec:
  backupName: shop-full
  namespaceMapping: {shop: shop-from-velero}
`)
		b.wait("restore/from-velero", "cairn-system", "jsonpath={.status.phase}=Completed", "120s")
		Expect(b.kubectlOK("get", "restore", "from-velero", "-n", "cairn-system", "-o",
			`jsonpath={.status.conditions[?(@.type=="ArchiveVerified")].status} {.status.conditions[?(@.type=="ArchiveVerified")].reason}`)).
			To(Equal("False NoRecordedDigest"))
		b.wait("configmap/web-settings", "shop-from-velero", "jsonpath={.data.greeting}=hello from velero", "10s")
		data, err := os.ReadFile(filepath.Join(fixtures, "source", "shop.json"))
		Expect(err).NotTo(HaveOccurred())
		var source unstructured.UnstructuredList
		Expect(source.UnmarshalJSON(data)).To(Succeed())
		compared := 0
		for _, item := range source.Items {
			if item.GetKind() == "ServiceAccount" && item.GetName() == "default" {
				continue // made by the cluster in every namespace
			}
			kind := strings.ToLower(item.GetKind()) + "." + item.GroupVersionKind().Group
			if item.GroupVersionKind().Group == "" {
				kind = strings.ToLower(item.GetKind())
			}
			restored := b.kubectlOK("get", kind, item.GetName(), "-n", "shop-from-velero", "-o", "json")
			var got unstructured.Unstructured
			Expect(got.UnmarshalJSON([]byte(restored))).To(Succeed())
			Expect(comparableE2E(&got)).To(Equal(comparableE2E(mappedE2E(&item, "shop", "shop-from-velero"))), "%s %s", kind, item.GetName())
			compared++
		}
		Expect(compared).To(Equal(11), "ConfigMaps, Secrets, ServiceAccount, Role, RoleBinding, Deployment, Service, Widgets")

		By("refusing a backup into the location")
		b.apply(`apiVersion: cairn.dev/v1alpha1
kind: Backup
metadata: {name: into-velero, namespace: cairn-system}
spec: {storageLocation: from-velero}
`)
		b.wait("backup/into-velero", "cairn-system", "jsonpath={.status.phase}=FailedValidation", "60s")
		Expect(b.kubectlOK("get", "backup", "into-velero", "-n", "cairn-system", "-o", "jsonpath={.status.validationErrors[0]}")).
			To(ContainSubstring("holds Velero's backups, which Cairn reads and never writes"))

		By("deleting a synced backup: the object goes, the bucket stays as Velero wrote it")
		b.kubectlOK("delete", "backup", "shop-labelled", "-n", "cairn-system", "--timeout=60s")
		keys, err := upload.List(context.Background(), "velero/backups/shop-labelled/")
		Expect(err).NotTo(HaveOccurred())
		Expect(keys).To(ContainElement("velero/backups/shop-labelled/shop-labelled.tar.gz"))
		Expect(keys).To(HaveLen(9))
	})
})

// comparableE2E is an object without what the API server, the restore or the cluster set, as
// the restore specs compare them.
func comparableE2E(u *unstructured.Unstructured) map[string]any {
	obj := u.DeepCopy().Object
	for _, f := range []string{"uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "namespace"} {
		unstructured.RemoveNestedField(obj, "metadata", f)
	}
	labels, _, _ := unstructured.NestedStringMap(obj, "metadata", "labels")
	for k := range labels {
		if strings.HasPrefix(k, "cairn.dev/") {
			delete(labels, k)
		}
	}
	if len(labels) == 0 {
		unstructured.RemoveNestedField(obj, "metadata", "labels")
	} else {
		_ = unstructured.SetNestedStringMap(obj, labels, "metadata", "labels")
	}
	unstructured.RemoveNestedField(obj, "status")
	if u.GetKind() == "Deployment" {
		unstructured.RemoveNestedField(obj, "metadata", "annotations", "deployment.kubernetes.io/revision")
	}
	if u.GetKind() == "Service" {
		unstructured.RemoveNestedField(obj, "spec", "clusterIP")
		unstructured.RemoveNestedField(obj, "spec", "clusterIPs")
	}
	data, _ := json.Marshal(obj)
	var out map[string]any
	_ = json.Unmarshal(data, &out)
	return out
}

// mappedE2E is a backed-up object as a restore under namespaceMapping from → to makes it.
func mappedE2E(u *unstructured.Unstructured, from, to string) *unstructured.Unstructured {
	u = u.DeepCopy()
	subjects, found, _ := unstructured.NestedSlice(u.Object, "subjects")
	if found {
		for _, s := range subjects {
			if m, ok := s.(map[string]any); ok && m["namespace"] == from {
				m["namespace"] = to
			}
		}
		_ = unstructured.SetNestedSlice(u.Object, subjects, "subjects")
	}
	return u
}
