package restore_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// The Velero fixtures (testdata/velero, made by hack/velero-fixtures.sh with Velero itself):
// bucket/ is the bucket Velero wrote, under its BSL prefix "velero"; source/ holds the objects
// as the API server returned them before Velero backed them up.
var veleroFixtures = filepath.Join(testenv.RepoRoot(), "testdata", "velero")

// copyVeleroBucket copies the fixture bucket into a new directory (the tests never touch the
// committed tree) and returns it, with mutate applied to the copy's velero/backups/ directory.
func copyVeleroBucket(mutate func(backups string)) string {
	GinkgoHelper()
	dir := GinkgoT().TempDir()
	src := filepath.Join(veleroFixtures, "bucket")
	Expect(filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dir, rel), 0o750)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), data, 0o600)
	})).To(Succeed())
	if mutate != nil {
		mutate(filepath.Join(dir, "velero", "backups"))
	}
	return dir
}

// veleroLocation is a ReadOnly location of format velero over dir, with Velero's prefix.
func veleroLocation(name, dir string) *cairnv1.BackupStorageLocation {
	GinkgoHelper()
	spec := FilesystemSpec(dir)
	spec.Format, spec.AccessMode = cairnv1.LocationFormatVelero, cairnv1.AccessModeReadOnly
	spec.ObjectStorage = &cairnv1.ObjectStorage{Prefix: "velero"}
	spec.BackupSyncPeriod = &metav1.Duration{Duration: time.Second}
	bsl := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: OperatorNamespace}, Spec: spec}
	Expect(K8sClient.Create(SuiteCtx, bsl)).To(Succeed())
	DeferCleanup(func() { _ = K8sClient.Delete(SuiteCtx, bsl) })
	return bsl
}

// veleroSource is an object Velero backed up, as the API server returned it before.
func veleroSource(file, kind, name string) *unstructured.Unstructured {
	GinkgoHelper()
	data, err := os.ReadFile(filepath.Join(veleroFixtures, "source", file))
	Expect(err).NotTo(HaveOccurred())
	var list unstructured.UnstructuredList
	Expect(json.Unmarshal(data, &list.Object)).To(Succeed())
	Expect(list.UnmarshalJSON(data)).To(Succeed())
	for i := range list.Items {
		if list.Items[i].GetKind() == kind && list.Items[i].GetName() == name {
			return &list.Items[i]
		}
	}
	Fail("no " + kind + " " + name + " in " + file)
	return nil
}

// veleroBackupFiles is every file under the copy's velero/ with its content, to show that
// nothing Cairn does changes the bucket.
func veleroBackupFiles(dir string) map[string]string {
	GinkgoHelper()
	files := map[string]string{}
	Expect(filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		files[path] = string(data)
		return err
	})).To(Succeed())
	return files
}

// mapped is a backed-up object as a restore under namespaceMapping from → to makes it: the
// namespaces its RoleBinding subjects name are mapped too.
func mapped(u *unstructured.Unstructured, from, to string) *unstructured.Unstructured {
	u = u.DeepCopy()
	subjects, found, _ := unstructured.NestedSlice(u.Object, "subjects")
	if !found {
		return u
	}
	for _, s := range subjects {
		if m, ok := s.(map[string]any); ok && m["namespace"] == from {
			m["namespace"] = to
		}
	}
	Expect(unstructured.SetNestedSlice(u.Object, subjects, "subjects")).To(Succeed())
	return u
}

var (
	fixtureWidgetGVK = schema.GroupVersionKind{Group: "fixtures.cairn.dev", Version: "v1", Kind: "Widget"}
	fixtureWidgets   = "widgets.fixtures.cairn.dev"
)

// veleroShopObjects are the objects of namespace shop Velero backed up in shop-full, and the
// fields a restore resets or the cluster assigns, left out of the comparison.
var veleroShopObjects = []struct {
	gvk  schema.GroupVersionKind
	name string
	drop []string
}{
	{cmGVK, "web-settings", nil},
	{cmGVK, "db-settings", nil},
	{secretGVK, "web-token", nil},
	{secretGVK, "db-password", nil},
	{saGVK, "web", nil},
	{roleGVK, "web-reader", nil},
	{rbGVK, "web-reader", nil},
	{deployGVK, "web", []string{"metadata.annotations"}},
	{serviceGVK, "web", []string{"spec.clusterIP", "spec.clusterIPs"}},
	{fixtureWidgetGVK, "blue", nil},
	{fixtureWidgetGVK, "red", nil},
}

var _ = Describe("Velero's backups", Ordered, func() {
	var (
		bucket string
		bsl    *cairnv1.BackupStorageLocation
		before map[string]string
		daily  string
	)

	BeforeAll(func() {
		_, def := CreateDefaultLocation("velero-restore-files")
		bucket = copyVeleroBucket(func(backups string) {
			// One backup in each phase Cairn skips, made from a real one's velero-backup.json
			// (Velero writes no bucket files of a backup that fails validation, and this machine
			// could not make one fail): the sync must leave them out.
			for name, phase := range map[string]string{"never-ran": "InProgress", "gave-up": "Failed"} {
				data, err := os.ReadFile(filepath.Join(backups, "shop-full", "velero-backup.json"))
				Expect(err).NotTo(HaveOccurred())
				var vb map[string]any
				Expect(json.Unmarshal(data, &vb)).To(Succeed())
				Expect(unstructured.SetNestedField(vb, name, "metadata", "name")).To(Succeed())
				Expect(unstructured.SetNestedField(vb, phase, "status", "phase")).To(Succeed())
				out, err := json.Marshal(vb)
				Expect(err).NotTo(HaveOccurred())
				Expect(os.MkdirAll(filepath.Join(backups, name), 0o750)).To(Succeed())
				Expect(os.WriteFile(filepath.Join(backups, name, "velero-backup.json"), out, 0o600)).To(Succeed())
			}
		})
		before = veleroBackupFiles(bucket)
		stop := StartManager(controller.Config{ProgressInterval: 10 * time.Millisecond, RestoreWorkerCount: 4})
		DeferCleanup(func() { stop() })
		EventuallyLocation(def, cairnv1.StorageLocationPhaseAvailable, "")
		bsl = veleroLocation("from-velero", bucket)
		EventuallyLocation(bsl, cairnv1.StorageLocationPhaseAvailable, "")
	})

	AfterAll(func() {
		// The locations go first: while one exists, its sync makes its backups again.
		var locations cairnv1.BackupStorageLocationList
		Expect(K8sClient.List(SuiteCtx, &locations, client.InNamespace(OperatorNamespace))).To(Succeed())
		for i := range locations.Items {
			if locations.Items[i].Spec.Format == cairnv1.LocationFormatVelero {
				Expect(K8sClient.Delete(SuiteCtx, &locations.Items[i])).To(Succeed())
			}
		}
		var list cairnv1.RestoreList
		Expect(K8sClient.List(SuiteCtx, &list)).To(Succeed())
		for i := range list.Items {
			_ = K8sClient.Delete(SuiteCtx, &list.Items[i])
		}
		DeleteAllBackups()
		Expect(veleroBackupFiles(bucket)).To(Equal(before), "Cairn changed nothing in Velero's bucket")
	})

	It("syncs exactly the Completed and PartiallyFailed ones, with their origin, labels, times and counts, and names the others in one event", func() {
		for name, phase := range map[string]cairnv1.BackupPhase{
			"shop-full": cairnv1.BackupPhaseCompleted, "shop-labelled": cairnv1.BackupPhaseCompleted, "shop-broken": cairnv1.BackupPhasePartiallyFailed,
		} {
			b := EventuallySynced(OperatorNamespace, name)
			Expect(b.Status.Phase).To(Equal(phase), name)
			Expect(b.Annotations).To(HaveKeyWithValue(cairnv1.SyncedFromAnnotation, bsl.Name))
			Expect(b.Annotations).To(HaveKeyWithValue(cairnv1.VeleroBackupNameAnnotation, name))
			Expect(b.Annotations[cairnv1.VeleroBackupUIDAnnotation]).NotTo(BeEmpty())
			Expect(b.Status.OriginUID).To(Equal(b.Annotations[cairnv1.VeleroBackupUIDAnnotation]))
			Expect(b.Labels).To(HaveKeyWithValue("velero.io/storage-location", "default"))
			Expect(b.Status.StartTimestamp).NotTo(BeNil())
			Expect(b.Status.CompletionTimestamp).NotTo(BeNil())
			Expect(b.Status.Expiration).NotTo(BeNil())
			Expect(b.Status.Progress.TotalItems).To(BeNumerically(">", 0))
			Expect(b.Status.FormatVersion).To(Equal("1.1.0"))
			Expect(b.Status.ArchiveSHA256).To(BeEmpty(), "Velero records no digest")
			Expect(b.Spec.StorageLocation).To(Equal(bsl.Name))
		}
		broken := GetBackup(OperatorNamespace, "shop-broken")
		Expect(broken.Status.Errors).To(BeNumerically(">", 0), "Velero's listing of gadgets failed")
		labelled := GetBackup(OperatorNamespace, "shop-labelled")
		Expect(labelled.Spec.LabelSelector).To(Equal(&metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}))
		full := GetBackup(OperatorNamespace, "shop-full")
		Expect(full.Spec.IncludedNamespaces).To(Equal([]string{"shop"}))
		Expect(full.Status.Expiration.Sub(full.Status.StartTimestamp.Time)).To(BeNumerically("~", 720*time.Hour, time.Minute))

		var backups cairnv1.BackupList
		Eventually(func(g Gomega) {
			g.Expect(K8sClient.List(SuiteCtx, &backups, client.InNamespace(OperatorNamespace), client.MatchingLabels{"velero.io/schedule-name": "daily"})).To(Succeed())
			g.Expect(backups.Items).To(HaveLen(1))
		}).Should(Succeed())
		daily = backups.Items[0].Name
		Expect(daily).To(HavePrefix("daily-"))

		Expect(K8sClient.List(SuiteCtx, &backups, client.InNamespace(OperatorNamespace), client.MatchingLabels{cairnv1.StorageLocationLabel: bsl.Name})).To(Succeed())
		var names []string
		for _, b := range backups.Items {
			names = append(names, b.Name)
		}
		Expect(names).To(ConsistOf("shop-full", "shop-labelled", "shop-broken", daily))

		var skipped []string
		Eventually(func(g Gomega) {
			skipped = nil
			for _, e := range EventsFor(bsl) {
				if e.Reason == "SyncSkipped" {
					skipped = append(skipped, e.Note)
				}
			}
			g.Expect(skipped).To(HaveLen(1))
		}).Should(Succeed())
		Expect(skipped[0]).To(ContainSubstring("Velero backup gave-up has phase Failed"))
		Expect(skipped[0]).To(ContainSubstring("Velero backup never-ran has phase InProgress"))
		Consistently(func() int {
			n := 0
			for _, e := range EventsFor(bsl) {
				if e.Reason == "SyncSkipped" {
					n++
				}
			}
			return n
		}).WithTimeout(3*time.Second).Should(Equal(1), "the skipped backups are named once, not at every pass")
	})

	It("restores a Velero backup under a namespace mapping, CRDs first, every object equal to what Velero backed up", func() {
		Expect(GetUnstructured(crdGVK, "", fixtureWidgets)).To(BeNil(), "the CRD comes from the backup")
		CreateRestore(OperatorNamespace, "velero-shop-copy", cairnv1.RestoreSpec{BackupName: "shop-full",
			NamespaceMapping: map[string]cairnv1.NamespaceName{"shop": "velero-shop-copy"}})
		rs := WaitRestore(OperatorNamespace, "velero-shop-copy", cairnv1.RestorePhaseCompleted)
		Expect(rs.Status.Errors).To(BeZero())
		c := meta.FindStatusCondition(rs.Status.Conditions, cairnv1.RestoreConditionArchiveVerified)
		Expect(c).NotTo(BeNil())
		Expect(c.Status).To(Equal(metav1.ConditionFalse))
		Expect(c.Reason).To(Equal(cairnv1.ReasonNoRecordedDigest))
		Expect(c.Message).To(ContainSubstring("Velero records no digest"))

		Expect(GetUnstructured(crdGVK, "", fixtureWidgets)).NotTo(BeNil())
		for _, o := range veleroShopObjects {
			restored := GetUnstructured(o.gvk, "velero-shop-copy", o.name)
			Expect(restored).NotTo(BeNil(), "%s %s", o.gvk.Kind, o.name)
			Expect(comparable(restored, o.drop...)).To(Equal(comparable(mapped(veleroSource("shop.json", o.gvk.Kind, o.name), "shop", "velero-shop-copy"), o.drop...)), "%s %s", o.gvk.Kind, o.name)
		}
		ns := GetUnstructured(nsGVK, "", "velero-shop-copy")
		Expect(ns.GetLabels()).To(HaveKeyWithValue("team", "shop"), "the namespace from the backup")
	})

	It("restores with filters and the update policy: only the selected objects, existing ones brought back to the backup's", func() {
		Expect(K8sClient.Create(SuiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "velero-filtered"}})).To(Succeed())
		Expect(K8sClient.Create(SuiteCtx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "web-settings", Namespace: "velero-filtered", Labels: map[string]string{"app": "web"}},
			Data: map[string]string{"greeting": "changed since"}})).To(Succeed())
		CreateRestore(OperatorNamespace, "velero-filtered", cairnv1.RestoreSpec{BackupName: "shop-broken",
			IncludedNamespaces: []string{"shop"}, IncludedResources: []string{"configmaps", "secrets"},
			LabelSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			NamespaceMapping:       map[string]cairnv1.NamespaceName{"shop": "velero-filtered"},
			ExistingResourcePolicy: cairnv1.ExistingResourcePolicyUpdate, IncludeClusterResources: ptr.To(false)})
		WaitRestore(OperatorNamespace, "velero-filtered", cairnv1.RestorePhaseCompleted)
		cm := GetUnstructured(cmGVK, "velero-filtered", "web-settings")
		Expect(cm.Object["data"]).To(HaveKeyWithValue("greeting", "hello from velero"))
		Expect(GetUnstructured(secretGVK, "velero-filtered", "web-token")).NotTo(BeNil())
		for _, left := range []struct {
			gvk  schema.GroupVersionKind
			name string
		}{{cmGVK, "db-settings"}, {secretGVK, "db-password"}, {deployGVK, "web"}, {serviceGVK, "web"}} {
			Expect(GetUnstructured(left.gvk, "velero-filtered", left.name)).To(BeNil(), "%s %s is filtered out", left.gvk.Kind, left.name)
		}
	})

	It("restores the label-selected backup: exactly what Velero selected", func() {
		CreateRestore(OperatorNamespace, "velero-labelled", cairnv1.RestoreSpec{BackupName: "shop-labelled",
			NamespaceMapping: map[string]cairnv1.NamespaceName{"shop": "velero-labelled"}})
		WaitRestore(OperatorNamespace, "velero-labelled", cairnv1.RestorePhaseCompleted)
		for _, o := range veleroShopObjects {
			restored := GetUnstructured(o.gvk, "velero-labelled", o.name)
			source := veleroSource("shop.json", o.gvk.Kind, o.name)
			if source.GetLabels()["app"] != "web" {
				Expect(restored).To(BeNil(), "%s %s is not app=web", o.gvk.Kind, o.name)
				continue
			}
			Expect(restored).NotTo(BeNil(), "%s %s", o.gvk.Kind, o.name)
			Expect(comparable(restored, o.drop...)).To(Equal(comparable(mapped(source, "shop", "velero-labelled"), o.drop...)), "%s %s", o.gvk.Kind, o.name)
		}
	})

	It("refuses a backup to the location, and deletes a synced backup without touching the bucket", func() {
		CreateBackup(OperatorNamespace, "into-velero", cairnv1.BackupSpec{StorageLocation: bsl.Name})
		b := WaitPhase("into-velero", cairnv1.BackupPhaseFailedValidation)
		Expect(strings.Join(b.Status.ValidationErrors, "\n")).To(ContainSubstring("holds Velero's backups, which Cairn reads and never writes"))

		synced := GetBackup(OperatorNamespace, daily)
		Expect(K8sClient.Delete(SuiteCtx, synced)).To(Succeed())
		// The object goes (its finalizer does not wait on the bucket); the location's sync, every
		// second here, may show the Velero backup again at once, as a new object.
		Eventually(func() bool {
			b := FindBackup(OperatorNamespace, daily)
			return b == nil || b.UID != synced.UID
		}).Should(BeTrue(), "the deleted Backup is gone")
		Expect(veleroBackupFiles(bucket)).To(Equal(before))
	})

	It("fails the restore of a damaged Velero archive before creating anything", func() {
		damaged := copyVeleroBucket(func(backups string) {
			archive := filepath.Join(backups, "shop-full", "shop-full.tar.gz")
			data, err := os.ReadFile(archive)
			Expect(err).NotTo(HaveOccurred())
			data[len(data)/2] ^= 0x5a
			Expect(os.WriteFile(archive, data, 0o600)).To(Succeed())
		})
		// Another location over the damaged copy: its backups clash with the first one's
		// names, so they are synced as velero-<name>.
		other := veleroLocation("from-velero-damaged", damaged)
		EventuallyLocation(other, cairnv1.StorageLocationPhaseAvailable, "")
		b := EventuallySynced(OperatorNamespace, "velero-shop-full")
		Expect(b.Annotations).To(HaveKeyWithValue(cairnv1.VeleroBackupNameAnnotation, "shop-full"))
		Expect(b.Status.StorageLocation).To(Equal(other.Name))

		CreateRestore(OperatorNamespace, "velero-damaged", cairnv1.RestoreSpec{BackupName: "velero-shop-full",
			NamespaceMapping: map[string]cairnv1.NamespaceName{"shop": "velero-damaged"}})
		rs := WaitRestore(OperatorNamespace, "velero-damaged", cairnv1.RestorePhaseFailed)
		Expect(rs.Status.FailureReason).To(ContainSubstring("damaged or not a gzip-compressed tar, nothing was restored"))
		Expect(GetUnstructured(nsGVK, "", "velero-damaged")).To(BeNil(), "nothing was created")
	})
})
