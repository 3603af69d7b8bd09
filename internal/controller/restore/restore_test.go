package restore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
	"github.com/cairn-backup/cairn/internal/restore"
	"github.com/cairn-backup/cairn/internal/storage"
)

var _ = Describe("Restore", Ordered, func() {
	var store *storage.Filesystem
	var loc *cairnv1.BackupStorageLocation
	var stop func()
	var originals map[string]*unstructured.Unstructured

	BeforeAll(func() {
		store, loc = CreateDefaultLocation("restore-default")
		stop = StartManager(controller.Config{ProgressInterval: 10 * time.Millisecond, RestoreWorkerCount: 4,
			RestoreNamespaceTimeout: 3 * time.Second})
		DeferCleanup(func() { stop() })
		EventuallyLocation(loc, cairnv1.StorageLocationPhaseAvailable, "")

		Expect(K8sClient.Create(SuiteCtx, widgetCRD())).To(Succeed())
		createShop("shop")
		originals = snapshot("shop")
		CreateBackup(OperatorNamespace, "shop-full", cairnv1.BackupSpec{IncludedNamespaces: []string{"shop"}})
		WaitPhase("shop-full", cairnv1.BackupPhaseCompleted)
	})

	AfterAll(func() {
		var list cairnv1.RestoreList
		Expect(K8sClient.List(SuiteCtx, &list)).To(Succeed())
		for i := range list.Items {
			_ = K8sClient.Delete(SuiteCtx, &list.Items[i])
		}
		DeleteAllBackups()
	})

	It("restores a namespace under another name with namespaceMapping, every object equal to its original", func() {
		CreateRestore(OperatorNamespace, "shop-copy", cairnv1.RestoreSpec{BackupName: "shop-full",
			NamespaceMapping: map[string]cairnv1.NamespaceName{"shop": "shop-copy"}})
		rs := WaitRestore(OperatorNamespace, "shop-copy", cairnv1.RestorePhaseCompleted)
		Expect(rs.Finalizers).To(ContainElement(cairnv1.RestoreDataFinalizer))
		Expect(rs.Status.BackupName).To(Equal("shop-full"))
		Expect(rs.Status.StorageLocation).To(Equal(loc.Name))
		Expect(rs.Status.Progress.TotalItems).To(BeNumerically(">", 10))
		Expect(rs.Status.Progress.ItemsRestored).To(Equal(rs.Status.Progress.TotalItems))
		Expect(rs.Status.Errors).To(BeZero())
		Expect(rs.Status.StartTimestamp).NotTo(BeNil())
		Expect(rs.Status.CompletionTimestamp).NotTo(BeNil())
		Expect(meta.IsStatusConditionTrue(rs.Status.Conditions, cairnv1.RestoreConditionFilesStored)).To(BeTrue())

		// The namespace was created from the backed-up one, under its new name.
		ns := GetUnstructured(nsGVK, "", "shop-copy")
		Expect(ns).NotTo(BeNil())
		Expect(ns.GetLabels()).To(HaveKeyWithValue(cairnv1.RestoreNameLabel, "shop-copy"))
		// The Retain PV exists already, bound to the original claim: the copy's claim gets a
		// new volume.
		expectShopRestored(originals, "shop-copy", "shop-copy", map[string][]string{"PersistentVolumeClaim/data-retain": {"spec.volumeName"}})
		vn, _, _ := unstructured.NestedString(GetUnstructured(pvcGVK, "shop-copy", "data-retain").Object, "spec", "volumeName")
		Expect(vn).To(BeEmpty())
		list := RestoredList(store, OperatorNamespace, "shop-copy")
		Expect(list[restore.Created]["configmaps"]).To(ConsistOf("shop-copy/settings"))
		Expect(list[restore.Created]["widgets.restore.example.com"]).To(ConsistOf("shop-copy/blue"))
		// A NodePort service gets a new port, a ClusterIP one a new address.
		edge := GetUnstructured(serviceGVK, "shop-copy", "edge")
		origEdge := originals["Service/edge"]
		ports, _, _ := unstructured.NestedSlice(edge.Object, "spec", "ports")
		origPorts, _, _ := unstructured.NestedSlice(origEdge.Object, "spec", "ports")
		Expect(ports[0].(map[string]any)["nodePort"]).NotTo(Equal(origPorts[0].(map[string]any)["nodePort"]))
		ip, _, _ := unstructured.NestedString(GetUnstructured(serviceGVK, "shop-copy", "web").Object, "spec", "clusterIP")
		origIP, _, _ := unstructured.NestedString(originals["Service/web"].Object, "spec", "clusterIP")
		Expect(ip).NotTo(BeEmpty())
		Expect(ip).NotTo(Equal(origIP))
		// Its files are in storage.
		keys := storage.Layout{}.Restore(OperatorNamespace, "shop-copy")
		GunzipJSON(store, keys.Results, nil)
		Expect(string(Gunzip(store, keys.Logs))).To(ContainSubstring("Restore finished"))
	})

	It("restores what was deleted in place: CRDs first, PVs only with Retain, PVC bindings as the PVs allow", func() {
		// Everything of the shop goes, as after a disaster, the CRD and PVs included.
		// (The protection finalizers of PVCs and PVs are removed by hand: this control plane
		// has no controller that would.)
		gone := func(gvk schema.GroupVersionKind, ns, name string) {
			u := GetUnstructured(gvk, ns, name)
			Expect(u).NotTo(BeNil())
			Expect(K8sClient.Delete(SuiteCtx, u)).To(Succeed())
			Eventually(func() bool {
				u := GetUnstructured(gvk, ns, name)
				if u != nil && len(u.GetFinalizers()) > 0 {
					u.SetFinalizers(nil)
					_ = K8sClient.Update(SuiteCtx, u)
				}
				return u == nil
			}).WithTimeout(30*time.Second).Should(BeTrue(), "%s %s/%s", gvk.Kind, ns, name)
		}
		for _, o := range shopObjects {
			gone(o.gvk, "shop", o.name)
		}
		gone(pvcGVK, "shop", "data-delete")
		gone(crdGVK, "", widgetsName)
		gone(pvGVK, "", "pv-shop-retain")
		gone(pvGVK, "", "pv-shop-delete")

		CreateRestore(OperatorNamespace, "shop-back", cairnv1.RestoreSpec{BackupName: "shop-full"})
		rs := WaitRestore(OperatorNamespace, "shop-back", cairnv1.RestorePhaseCompleted)
		Expect(rs.Status.Errors).To(BeZero())
		expectShopRestored(originals, "shop", "shop-back", nil)
		crd := GetUnstructured(crdGVK, "", widgetsName)
		Expect(crd).NotTo(BeNil())
		Expect(crd.GetLabels()).To(HaveKeyWithValue(cairnv1.RestoreNameLabel, "shop-back"))

		// The Retain PV is back, its claim reference pointing at the claim by name only; the
		// Delete one is not (its data went with it), and its claim will get a new volume.
		pv := GetUnstructured(pvGVK, "", "pv-shop-retain")
		Expect(pv).NotTo(BeNil())
		claimRef, _, _ := unstructured.NestedMap(pv.Object, "spec", "claimRef")
		Expect(claimRef).To(HaveKeyWithValue("namespace", "shop"))
		Expect(claimRef).To(HaveKeyWithValue("name", "data-retain"))
		Expect(claimRef).NotTo(HaveKey("uid"))
		Expect(GetUnstructured(pvGVK, "", "pv-shop-delete")).To(BeNil())
		retained := GetUnstructured(pvcGVK, "shop", "data-retain")
		Expect(retained.GetAnnotations()).NotTo(HaveKey("pv.kubernetes.io/bind-completed"))
		vn, _, _ := unstructured.NestedString(retained.Object, "spec", "volumeName")
		Expect(vn).To(Equal("pv-shop-retain"))
		fresh := GetUnstructured(pvcGVK, "shop", "data-delete")
		Expect(fresh).NotTo(BeNil())
		vn, _, _ = unstructured.NestedString(fresh.Object, "spec", "volumeName")
		Expect(vn).To(BeEmpty())

		list := RestoredList(store, OperatorNamespace, "shop-back")
		Expect(list[restore.Skipped]["persistentvolumes"]).To(ConsistOf("pv-shop-delete"))
		Expect(list[restore.Created]["customresourcedefinitions.apiextensions.k8s.io"]).To(ConsistOf(widgetsName))
		Expect(list[restore.Created]["persistentvolumes"]).To(ConsistOf("pv-shop-retain"))
		// Status is not restored unless asked.
		state, found, _ := unstructured.NestedString(GetUnstructured(widgetGVK, "shop", "blue").Object, "status", "state")
		Expect(found).To(BeFalse(), "status %q", state)
	})

	It("frees a Released PV for its restored claim, so that the claim binds to its data again", func() {
		EnsureNamespace("rel")
		CreateObject(&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-rel"}, Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/pv-rel"}},
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "rel", Name: "data"},
		}})
		CreateObject(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "rel", Name: "data"}, Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeName: "pv-rel",
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		}})
		CreateBackup(OperatorNamespace, "rel", cairnv1.BackupSpec{IncludedNamespaces: []string{"rel"}})
		WaitPhase("rel", cairnv1.BackupPhaseCompleted)

		// The claim goes (with its namespace, say); its volume is Released, still naming the
		// deleted claim's uid, as the PV controller leaves it.
		pvc := GetUnstructured(pvcGVK, "rel", "data")
		Expect(K8sClient.Delete(SuiteCtx, pvc)).To(Succeed())
		Eventually(func() bool {
			u := GetUnstructured(pvcGVK, "rel", "data")
			if u != nil && len(u.GetFinalizers()) > 0 {
				u.SetFinalizers(nil)
				_ = K8sClient.Update(SuiteCtx, u)
			}
			return u == nil
		}).Should(BeTrue())
		var pv corev1.PersistentVolume
		Expect(K8sClient.Get(SuiteCtx, client.ObjectKey{Name: "pv-rel"}, &pv)).To(Succeed())
		pv.Spec.ClaimRef.UID = "uid-of-the-deleted-claim"
		Expect(K8sClient.Update(SuiteCtx, &pv)).To(Succeed())
		pv.Status.Phase = corev1.VolumeReleased
		Expect(K8sClient.Status().Update(SuiteCtx, &pv)).To(Succeed())

		CreateRestore(OperatorNamespace, "rel-back", cairnv1.RestoreSpec{BackupName: "rel"})
		WaitRestore(OperatorNamespace, "rel-back", cairnv1.RestorePhaseCompleted)
		Expect(K8sClient.Get(SuiteCtx, client.ObjectKey{Name: "pv-rel"}, &pv)).To(Succeed())
		Expect(pv.Spec.ClaimRef.UID).To(BeEmpty())
		Expect(pv.Spec.ClaimRef.Namespace).To(Equal("rel"))
		Expect(pv.Spec.ClaimRef.Name).To(Equal("data"))
		vn, _, _ := unstructured.NestedString(GetUnstructured(pvcGVK, "rel", "data").Object, "spec", "volumeName")
		Expect(vn).To(Equal("pv-rel"))
		Expect(RestoredList(store, OperatorNamespace, "rel-back")[restore.Updated]["persistentvolumes"]).To(ConsistOf("pv-rel"))
	})

	It("restores status only for the resources restoreStatus selects", func() {
		CreateRestore(OperatorNamespace, "shop-status", cairnv1.RestoreSpec{BackupName: "shop-full",
			IncludedResources: []string{"widgets.restore.example.com", "configmaps"},
			NamespaceMapping:  map[string]cairnv1.NamespaceName{"shop": "shop-status"},
			RestoreStatus:     &cairnv1.RestoreStatusSpec{IncludedResources: []string{"widgets"}}})
		WaitRestore(OperatorNamespace, "shop-status", cairnv1.RestorePhaseCompleted)
		state, _, _ := unstructured.NestedString(GetUnstructured(widgetGVK, "shop-status", "blue").Object, "status", "state")
		Expect(state).To(Equal("ready"))
	})

	DescribeTable("applies the backup's filters to what it restores",
		func(name string, spec cairnv1.RestoreSpec, want map[string][]string) {
			spec.BackupName = "shop-full"
			spec.NamespaceMapping = map[string]cairnv1.NamespaceName{"shop": cairnv1.NamespaceName(name)}
			CreateRestore(OperatorNamespace, name, spec)
			WaitRestore(OperatorNamespace, name, cairnv1.RestorePhaseCompleted)
			created := RestoredList(store, OperatorNamespace, name)[restore.Created]
			for resource, names := range want {
				var full []string
				for _, n := range names {
					full = append(full, name+"/"+n)
				}
				Expect(created[resource]).To(ConsistOf(full), resource)
			}
			var kinds []string
			for resource := range created {
				if resource != "namespaces" {
					kinds = append(kinds, resource)
				}
			}
			var wantKinds []string
			for resource := range want {
				wantKinds = append(wantKinds, resource)
			}
			sort.Strings(kinds)
			sort.Strings(wantKinds)
			Expect(kinds).To(Equal(wantKinds))
		},
		Entry("includedResources", "f-inc", cairnv1.RestoreSpec{IncludedResources: []string{"configmaps", "secrets"}},
			map[string][]string{"configmaps": {"settings"}, "secrets": {"creds"}}),
		Entry("excludedResources", "f-exc", cairnv1.RestoreSpec{ExcludedResources: []string{"configmaps", "secrets", "serviceaccounts", "roles",
			"rolebindings", "deployments", "services", "persistentvolumeclaims", "persistentvolumes", "customresourcedefinitions"}},
			map[string][]string{"widgets.restore.example.com": {"blue"}}),
		Entry("labelSelector", "f-label", cairnv1.RestoreSpec{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "web"}}},
			map[string][]string{"configmaps": {"settings"}}),
		Entry("orLabelSelectors", "f-or", cairnv1.RestoreSpec{OrLabelSelectors: []*metav1.LabelSelector{
			{MatchLabels: map[string]string{"tier": "web"}}, {MatchLabels: map[string]string{"app": "web"}}}},
			map[string][]string{"configmaps": {"settings"}, "deployments.apps": {"web"}}),
		Entry("includedNamespaces that the backup does not hold", "f-ns", cairnv1.RestoreSpec{IncludedNamespaces: []string{"elsewhere"}},
			map[string][]string{}),
		Entry("excludedNamespaces", "f-exns", cairnv1.RestoreSpec{ExcludedNamespaces: []string{"sh*"}},
			map[string][]string{}),
	)

	It("leaves existing objects alone with existingResourcePolicy none, and updates them with update", func() {
		cm := GetUnstructured(cmGVK, "shop", "settings")
		Expect(unstructured.SetNestedField(cm.Object, "red", "data", "color")).To(Succeed())
		Expect(K8sClient.Update(SuiteCtx, cm)).To(Succeed())

		CreateRestore(OperatorNamespace, "keep", cairnv1.RestoreSpec{BackupName: "shop-full", IncludedResources: []string{"configmaps", "secrets"}})
		rs := WaitRestore(OperatorNamespace, "keep", cairnv1.RestorePhaseCompleted)
		Expect(rs.Status.Warnings).To(BeNumerically(">=", 1))
		color, _, _ := unstructured.NestedString(GetUnstructured(cmGVK, "shop", "settings").Object, "data", "color")
		Expect(color).To(Equal("red"))
		list := RestoredList(store, OperatorNamespace, "keep")
		Expect(list[restore.Skipped]["configmaps"]).To(ConsistOf("shop/settings"))
		Expect(list[restore.Skipped]["secrets"]).To(ConsistOf("shop/creds")) // identical: skipped
		var results restore.Results
		GunzipJSON(store, storage.Layout{}.Restore(OperatorNamespace, "keep").Results, &results)
		Expect(results.Warnings.Namespaces["shop"]).To(ContainElement(And(ContainSubstring("configmaps shop/settings"), ContainSubstring("data"))))
		Expect(results.Warnings.Namespaces["shop"]).NotTo(ContainElement(ContainSubstring("creds")))

		CreateRestore(OperatorNamespace, "overwrite", cairnv1.RestoreSpec{BackupName: "shop-full", IncludedResources: []string{"configmaps"},
			ExistingResourcePolicy: cairnv1.ExistingResourcePolicyUpdate})
		WaitRestore(OperatorNamespace, "overwrite", cairnv1.RestorePhaseCompleted)
		updated := GetUnstructured(cmGVK, "shop", "settings")
		color, _, _ = unstructured.NestedString(updated.Object, "data", "color")
		Expect(color).To(Equal("blue"))
		Expect(updated.GetLabels()).To(HaveKeyWithValue(cairnv1.RestoreNameLabel, "overwrite"))
		Expect(RestoredList(store, OperatorNamespace, "overwrite")[restore.Updated]["configmaps"]).To(ConsistOf("shop/settings"))
	})

	It("fails validation with a clear message", func() {
		CreateBackup(OperatorNamespace, "never-done", cairnv1.BackupSpec{IncludedNamespaces: []string{"nowhere"}, StorageLocation: "missing-location"})
		WaitPhase("never-done", cairnv1.BackupPhaseFailedValidation)
		EnsureNamespace("team-r")
		for _, tc := range []struct {
			namespace, name string
			spec            cairnv1.RestoreSpec
			want            string
		}{
			{OperatorNamespace, "v-missing", cairnv1.RestoreSpec{BackupName: "no-such"}, "backup no-such not found in namespace cairn-system"},
			{OperatorNamespace, "v-failed", cairnv1.RestoreSpec{BackupName: "never-done"}, "backup never-done is FailedValidation: only Completed or PartiallyFailed backups can be restored"},
			{OperatorNamespace, "v-schedule", cairnv1.RestoreSpec{ScheduleName: "nightly"}, "schedule nightly has no Completed backup"},
			{"team-r", "v-other-ns", cairnv1.RestoreSpec{BackupName: "shop-full"}, "backup shop-full not found in namespace team-r"},
			{"team-r", "v-map", cairnv1.RestoreSpec{BackupName: "x", NamespaceMapping: map[string]cairnv1.NamespaceName{"team-r": "shop"}}, "may only restore its own namespace into itself"},
			{"team-r", "v-ns", cairnv1.RestoreSpec{BackupName: "x", IncludedNamespaces: []string{"shop"}}, `may only restore its own namespace, not "shop"`},
			{"team-r", "v-cluster", cairnv1.RestoreSpec{BackupName: "x", IncludeClusterResources: ptr.To(true)}, "cannot include cluster-scoped resources"},
		} {
			CreateRestore(tc.namespace, tc.name, tc.spec)
			rs := WaitRestore(tc.namespace, tc.name, cairnv1.RestorePhaseFailedValidation)
			Expect(rs.Status.ValidationErrors).To(ContainElement(ContainSubstring(tc.want)), tc.name)
		}
	})

	It("restores a team's backup into the team's namespace as its requester, never cluster-scoped items", func() {
		createShop("team-shop")
		CreateBackup("team-shop", "mine", cairnv1.BackupSpec{})
		Eventually(func(g Gomega) {
			g.Expect(GetBackup("team-shop", "mine").Status.Phase).To(Equal(cairnv1.BackupPhaseCompleted))
		}).WithTimeout(60 * time.Second).Should(Succeed())
		for _, name := range []string{"settings"} {
			Expect(K8sClient.Delete(SuiteCtx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-shop", Name: name}})).To(Succeed())
		}
		Expect(K8sClient.Delete(SuiteCtx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-shop", Name: "reader-app"}})).To(Succeed())
		CreateRestore("team-shop", "mine-back", cairnv1.RestoreSpec{BackupName: "mine"})
		rs := WaitRestore("team-shop", "mine-back", cairnv1.RestorePhaseCompleted)
		Expect(rs.Status.Errors).To(BeZero())
		Expect(GetUnstructured(cmGVK, "team-shop", "settings")).NotTo(BeNil())
		// The requester (the suite's administrator) may create role bindings: the API server,
		// not a blanket rule of Cairn's, decides (a tenant's refusal is in test/e2e/tenancy_test.go).
		Expect(GetUnstructured(rbGVK, "team-shop", "reader-app")).NotTo(BeNil())
		list := RestoredList(store, "team-shop", "mine-back")
		Expect(list[restore.Created]["rolebindings.rbac.authorization.k8s.io"]).To(ConsistOf("team-shop/reader-app"))
		for resource := range list[restore.Created] {
			Expect(resource).NotTo(BeElementOf("persistentvolumes", "namespaces", "customresourcedefinitions.apiextensions.k8s.io"))
		}
	})

	It("fails a restore whose archive does not match its commit marker, having created nothing", func() {
		EnsureNamespace("small")
		CreateObject(ConfigMap("small", "only", nil))
		CreateBackup(OperatorNamespace, "small", cairnv1.BackupSpec{IncludedNamespaces: []string{"small"}})
		WaitPhase("small", cairnv1.BackupPhaseCompleted)
		path := filepath.Join(loc.Spec.Config[cairnv1.ConfigKeyPath], storage.Layout{}.Backup(OperatorNamespace, "small").Archive)
		data, err := os.ReadFile(path)
		Expect(err).NotTo(HaveOccurred())
		data[len(data)/2] ^= 0x01
		Expect(os.WriteFile(path, data, 0o600)).To(Succeed())

		CreateRestore(OperatorNamespace, "small-corrupt", cairnv1.RestoreSpec{BackupName: "small", NamespaceMapping: map[string]cairnv1.NamespaceName{"small": "small-corrupt"}})
		rs := WaitRestore(OperatorNamespace, "small-corrupt", cairnv1.RestorePhaseFailed)
		Expect(rs.Status.FailureReason).To(ContainSubstring("archive checksum mismatch"))
		Expect(GetUnstructured(nsGVK, "", "small-corrupt")).To(BeNil())
		Expect(string(Gunzip(store, storage.Layout{}.Restore(OperatorNamespace, "small-corrupt").Logs))).To(ContainSubstring("archive checksum mismatch"))
	})

	It("fails validation when the backup's commit marker is gone", func() {
		CreateBackup(OperatorNamespace, "uncommitted", cairnv1.BackupSpec{IncludedNamespaces: []string{"small"}})
		WaitPhase("uncommitted", cairnv1.BackupPhaseCompleted)
		Expect(store.Delete(context.Background(), storage.Layout{}.Backup(OperatorNamespace, "uncommitted").Metadata)).To(Succeed())
		CreateRestore(OperatorNamespace, "from-uncommitted", cairnv1.RestoreSpec{BackupName: "uncommitted"})
		rs := WaitRestore(OperatorNamespace, "from-uncommitted", cairnv1.RestorePhaseFailedValidation)
		Expect(rs.Status.ValidationErrors).To(ContainElement(ContainSubstring("has no commit marker")))
	})

	It("waits for a terminating target namespace, saying so, and fails when it does not go", func() {
		// Without kube-controller-manager a deleted namespace stays Terminating.
		EnsureNamespace("held")
		Expect(K8sClient.Delete(SuiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "held"}})).To(Succeed())
		CreateRestore(OperatorNamespace, "into-held", cairnv1.RestoreSpec{BackupName: "shop-full", IncludedResources: []string{"configmaps"},
			NamespaceMapping: map[string]cairnv1.NamespaceName{"shop": "held"}})
		Eventually(func(g Gomega) {
			rs := GetRestore(OperatorNamespace, "into-held")
			c := meta.FindStatusCondition(rs.Status.Conditions, cairnv1.RestoreConditionNamespacesReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Message).To(ContainSubstring("waiting for namespace held to finish terminating"))
		}).Should(Succeed())
		rs := WaitRestore(OperatorNamespace, "into-held", cairnv1.RestorePhaseFailed)
		Expect(rs.Status.FailureReason).To(ContainSubstring("namespace held was still terminating after 3s"))
		Expect(meta.IsStatusConditionFalse(rs.Status.Conditions, cairnv1.RestoreConditionNamespacesReady)).To(BeTrue())
	})

	It("fails a restore that was InProgress when the operator restarted", func() {
		stop()
		stop = StartManager(controller.Config{RestoreNamespaceTimeout: time.Hour})
		CreateRestore(OperatorNamespace, "interrupted", cairnv1.RestoreSpec{BackupName: "shop-full", IncludedResources: []string{"configmaps"},
			NamespaceMapping: map[string]cairnv1.NamespaceName{"shop": "held"}})
		Eventually(func() cairnv1.RestorePhase { return GetRestore(OperatorNamespace, "interrupted").Status.Phase }).Should(Equal(cairnv1.RestorePhaseInProgress))
		stop()
		Expect(GetRestore(OperatorNamespace, "interrupted").Status.Phase).To(Equal(cairnv1.RestorePhaseInProgress))
		stop = StartManager(controller.Config{RestoreNamespaceTimeout: time.Hour})
		rs := WaitRestore(OperatorNamespace, "interrupted", cairnv1.RestorePhaseFailed)
		Expect(rs.Status.FailureReason).To(Equal(lifecycle.FailureReasonRestoreRestarted))
	})

	It("restores from a ReadOnly location, its own files going to the default location", func() {
		spec := FilesystemSpec(GinkgoT().TempDir())
		spec.ValidationFrequency = &metav1.Duration{Duration: time.Second}
		archiveLoc := CreateLocation(spec)
		EventuallyLocation(archiveLoc, cairnv1.StorageLocationPhaseAvailable, "")
		CreateBackup(OperatorNamespace, "on-archive", cairnv1.BackupSpec{IncludedNamespaces: []string{"shop"}, IncludedResources: []string{"configmaps"},
			StorageLocation: archiveLoc.Name})
		WaitPhase("on-archive", cairnv1.BackupPhaseCompleted)
		Expect(K8sClient.Get(SuiteCtx, client.ObjectKeyFromObject(archiveLoc), archiveLoc)).To(Succeed())
		archiveLoc.Spec.AccessMode = cairnv1.AccessModeReadOnly
		Expect(K8sClient.Update(SuiteCtx, archiveLoc)).To(Succeed())

		CreateRestore(OperatorNamespace, "from-archive", cairnv1.RestoreSpec{BackupName: "on-archive",
			NamespaceMapping: map[string]cairnv1.NamespaceName{"shop": "from-archive"}})
		rs := WaitRestore(OperatorNamespace, "from-archive", cairnv1.RestorePhaseCompleted)
		Expect(rs.Status.StorageLocation).To(Equal(loc.Name))
		Expect(meta.IsStatusConditionTrue(rs.Status.Conditions, cairnv1.RestoreConditionFilesStored)).To(BeTrue())
		Expect(GetUnstructured(cmGVK, "from-archive", "settings")).NotTo(BeNil())
		Expect(RestoredList(store, OperatorNamespace, "from-archive")[restore.Created]["configmaps"]).To(ConsistOf("from-archive/settings"))
	})

	It("fails validation when the backup's location is Unavailable", func() {
		dir := GinkgoT().TempDir()
		spec := FilesystemSpec(dir)
		spec.ValidationFrequency = &metav1.Duration{Duration: time.Second}
		second := CreateLocation(spec)
		EventuallyLocation(second, cairnv1.StorageLocationPhaseAvailable, "")
		CreateBackup(OperatorNamespace, "on-second", cairnv1.BackupSpec{IncludedNamespaces: []string{"small"}, StorageLocation: second.Name})
		WaitPhase("on-second", cairnv1.BackupPhaseCompleted)
		Expect(os.RemoveAll(dir)).To(Succeed())
		Expect(os.WriteFile(dir, []byte("not a directory"), 0o600)).To(Succeed())
		EventuallyLocation(second, cairnv1.StorageLocationPhaseUnavailable, "")
		CreateRestore(OperatorNamespace, "from-unavailable", cairnv1.RestoreSpec{BackupName: "on-second"})
		rs := WaitRestore(OperatorNamespace, "from-unavailable", cairnv1.RestorePhaseFailedValidation)
		Expect(rs.Status.ValidationErrors).To(ContainElement(ContainSubstring(fmt.Sprintf("storage location %s of backup on-second is Unavailable", second.Name))))
	})

	It("ends PartiallyFailed when items fail, and says which", func() {
		// The widgets' CRD is gone and this restore does not bring it back: the widget cannot
		// be created, the ConfigMap can.
		crd := GetUnstructured(crdGVK, "", widgetsName)
		Expect(K8sClient.Delete(SuiteCtx, crd)).To(Succeed())
		Eventually(func() bool { return GetUnstructured(crdGVK, "", widgetsName) == nil }).WithTimeout(30 * time.Second).Should(BeTrue())
		CreateRestore(OperatorNamespace, "no-crd", cairnv1.RestoreSpec{BackupName: "shop-full", IncludeClusterResources: ptr.To(false),
			IncludedResources: []string{"widgets.restore.example.com", "configmaps"}, NamespaceMapping: map[string]cairnv1.NamespaceName{"shop": "no-crd"}})
		rs := WaitRestore(OperatorNamespace, "no-crd", cairnv1.RestorePhasePartiallyFailed)
		Expect(rs.Status.Errors).To(BeNumerically("==", 1))
		Expect(rs.Status.Progress.ItemsRestored).To(Equal(rs.Status.Progress.TotalItems))
		Expect(GetUnstructured(cmGVK, "no-crd", "settings")).NotTo(BeNil())
		var results restore.Results
		GunzipJSON(store, storage.Layout{}.Restore(OperatorNamespace, "no-crd").Results, &results)
		Expect(results.Errors.Namespaces["no-crd"]).To(ConsistOf(ContainSubstring("widgets.restore.example.com no-crd/blue")))
		list := RestoredList(store, OperatorNamespace, "no-crd")
		Expect(list[restore.FailedItem]["widgets.restore.example.com"]).To(ConsistOf("no-crd/blue"))
	})

	It("removes a deleted restore's files, never what it restored", func() {
		keys := storage.Layout{}.Restore(OperatorNamespace, "shop-copy")
		Expect(store.Exists(context.Background(), keys.Logs)).To(BeTrue())
		rs := GetRestore(OperatorNamespace, "shop-copy")
		Expect(K8sClient.Delete(SuiteCtx, rs)).To(Succeed())
		Eventually(func() bool {
			err := K8sClient.Get(SuiteCtx, client.ObjectKeyFromObject(rs), &cairnv1.Restore{})
			return apierrors.IsNotFound(err)
		}).Should(BeTrue())
		left, err := store.List(context.Background(), keys.Dir)
		Expect(err).NotTo(HaveOccurred())
		Expect(left).To(BeEmpty())
		Expect(GetUnstructured(cmGVK, "shop-copy", "settings")).NotTo(BeNil())
		// Another restore's files are untouched.
		Expect(store.Exists(context.Background(), storage.Layout{}.Restore(OperatorNamespace, "shop-back").Logs)).To(BeTrue())
	})
})
