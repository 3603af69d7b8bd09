package chartobjects_test

import (
	"fmt"
	"strings"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/controller/chartobjects"
)

// The chart's storage locations and schedules, declared in a ConfigMap as the chart renders them
// and applied by the manager (--chart-objects).
var _ = Describe("Chart objects reconciler", Ordered, func() {
	const ConfigMap = "test-chart-objects"
	var dir string
	var stopManager func()

	// objects declares a location of dir (with extra spec lines) and a schedule.
	objects := func(locationSpec, cron string) string {
		return fmt.Sprintf(`---
apiVersion: cairn.dev/v1alpha1
kind: BackupStorageLocation
metadata:
  name: chart-location
  labels: {app.kubernetes.io/managed-by: cairn}
spec:
  provider: filesystem
  default: false
  accessMode: ReadWrite
  config: {path: %q}
%s---
apiVersion: cairn.dev/v1alpha1
kind: Schedule
metadata: {name: chart-schedule}
spec:
  schedule: %q
  paused: true
  template: {includedNamespaces: [chart-app]}
`, dir, locationSpec, cron)
	}
	setObjects := func(data string) {
		GinkgoHelper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ConfigMap, Namespace: OperatorNamespace}}
		err := K8sClient.Get(SuiteCtx, client.ObjectKeyFromObject(cm), cm)
		cm.Data = map[string]string{chartobjects.ConfigMapKey: data}
		if err == nil {
			Expect(K8sClient.Update(SuiteCtx, cm)).To(Succeed())
			return
		}
		Expect(client.IgnoreNotFound(err)).To(Succeed())
		Expect(K8sClient.Create(SuiteCtx, cm)).To(Succeed())
	}
	location := func() *cairnv1.BackupStorageLocation {
		GinkgoHelper()
		var l cairnv1.BackupStorageLocation
		Expect(K8sClient.Get(SuiteCtx, types.NamespacedName{Namespace: OperatorNamespace, Name: "chart-location"}, &l)).To(Succeed())
		return &l
	}
	configMapEvents := func() []string {
		GinkgoHelper()
		var list eventsv1.EventList
		Expect(K8sClient.List(SuiteCtx, &list, client.InNamespace(OperatorNamespace))).To(Succeed())
		var out []string
		for _, e := range list.Items {
			if e.Regarding.Kind == "ConfigMap" && e.Regarding.Name == ConfigMap {
				out = append(out, e.Type+" "+e.Reason+": "+e.Note)
			}
		}
		return out
	}

	BeforeAll(func() {
		dir = GinkgoT().TempDir()
		setObjects(objects("", "0 2 * * *"))
		DeferCleanup(func() {
			for _, o := range []client.Object{
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ConfigMap, Namespace: OperatorNamespace}},
				&cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "chart-location", Namespace: OperatorNamespace}},
				&cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Name: "chart-schedule", Namespace: OperatorNamespace}},
			} {
				Expect(client.IgnoreNotFound(K8sClient.Delete(SuiteCtx, o))).To(Succeed())
			}
		})
		stopManager = StartManager(controller.Config{ChartObjects: ConfigMap, Controllers: []string{"chartobjects"}})
		DeferCleanup(func() { stopManager() })
	})

	It("creates what the ConfigMap declares when the manager starts, with the declaration's hash, as field manager cairn-chart", func() {
		Eventually(func() error {
			return K8sClient.Get(SuiteCtx, types.NamespacedName{Namespace: OperatorNamespace, Name: "chart-schedule"}, &cairnv1.Schedule{})
		}).Should(Succeed())
		l := location()
		Expect(l.Spec.Config["path"]).To(Equal(dir))
		Expect(l.Labels).To(HaveKeyWithValue("app.kubernetes.io/managed-by", "cairn"))
		Expect(l.Annotations).To(HaveKey(chartobjects.HashAnnotation))
		var managers []string
		for _, f := range l.ManagedFields {
			managers = append(managers, f.Manager+"/"+string(f.Operation))
		}
		Expect(managers).To(ContainElement(chartobjects.FieldOwner + "/Apply"))
		Eventually(configMapEvents).Should(ContainElements(
			"Normal ChartObjectApplied: Applied BackupStorageLocation chart-location",
			"Normal ChartObjectApplied: Applied Schedule chart-schedule"))
	})

	It("updates in place only the objects whose declaration changed, keeping a change made with kubectl to the others", func() {
		l := location()
		uid := l.UID
		patch := client.MergeFrom(l.DeepCopy())
		l.Spec.AccessMode = cairnv1.AccessModeReadOnly
		Expect(K8sClient.Patch(SuiteCtx, l, patch)).To(Succeed())

		setObjects(objects("", "0 3 * * *"))
		Eventually(func() string {
			var s cairnv1.Schedule
			Expect(K8sClient.Get(SuiteCtx, types.NamespacedName{Namespace: OperatorNamespace, Name: "chart-schedule"}, &s)).To(Succeed())
			return s.Spec.Schedule
		}).Should(Equal("0 3 * * *"))
		Expect(location().Spec.AccessMode).To(Equal(cairnv1.AccessModeReadOnly), "the location's declaration did not change")

		By("changing the location's declaration: its declared fields are the chart's again")
		setObjects(objects("  validationFrequency: 2m\n", "0 3 * * *"))
		Eventually(func() string {
			if f := location().Spec.ValidationFrequency; f != nil {
				return f.Duration.String()
			}
			return ""
		}).Should(Equal("2m0s"))
		l = location()
		Expect(l.Spec.AccessMode).To(Equal(cairnv1.AccessModeReadWrite))
		Expect(l.UID).To(Equal(uid))
	})

	It("says, with a Warning event on the ConfigMap, which declaration it cannot apply, and applies the others", func() {
		// The refused declaration first: those after it are applied all the same.
		bad := `---
apiVersion: cairn.dev/v1alpha1
kind: BackupStorageLocation
metadata: {name: chart-nfs}
spec: {provider: nfs}
` + objects("", "0 4 * * *")
		setObjects(bad)
		Eventually(configMapEvents).Should(ContainElement(And(
			HavePrefix("Warning ChartObjectFailed: BackupStorageLocation chart-nfs:"), ContainSubstring("Unsupported value: \"nfs\""))))
		Eventually(func() string {
			var s cairnv1.Schedule
			Expect(K8sClient.Get(SuiteCtx, types.NamespacedName{Namespace: OperatorNamespace, Name: "chart-schedule"}, &s)).To(Succeed())
			return s.Spec.Schedule
		}).Should(Equal("0 4 * * *"))
	})

	It("refuses a ConfigMap that declares a kind the chart does not, applying nothing of it", func() {
		setObjects(objects("", "0 5 * * *") + "---\napiVersion: cairn.dev/v1alpha1\nkind: Backup\nmetadata: {name: sneaky}\nspec: {}\n")
		Eventually(configMapEvents).Should(ContainElement(ContainSubstring("Warning InvalidChartObjects: objects.yaml: document 3: cairn.dev/v1alpha1 Backup is not a kind the chart declares")))
		Consistently(func() string {
			var s cairnv1.Schedule
			Expect(K8sClient.Get(SuiteCtx, types.NamespacedName{Namespace: OperatorNamespace, Name: "chart-schedule"}, &s)).To(Succeed())
			return s.Spec.Schedule
		}).WithTimeout(2 * time.Second).Should(Equal("0 4 * * *"))
		var backups cairnv1.BackupList
		Expect(K8sClient.List(SuiteCtx, &backups, client.InNamespace(OperatorNamespace))).To(Succeed())
		for _, b := range backups.Items {
			Expect(strings.HasPrefix(b.Name, "sneaky")).To(BeFalse())
		}
	})

	It("at a restart, creates again a deleted object the ConfigMap declares, and keeps a kubectl change to one it did not change", func() {
		setObjects(objects("", "0 6 * * *"))
		schedule := func() (*cairnv1.Schedule, error) {
			var s cairnv1.Schedule
			err := K8sClient.Get(SuiteCtx, types.NamespacedName{Namespace: OperatorNamespace, Name: "chart-schedule"}, &s)
			return &s, err
		}
		Eventually(func() string {
			s, err := schedule()
			Expect(err).NotTo(HaveOccurred())
			return s.Spec.Schedule
		}).Should(Equal("0 6 * * *"))
		stopManager()

		s, err := schedule()
		Expect(err).NotTo(HaveOccurred())
		Expect(K8sClient.Delete(SuiteCtx, s)).To(Succeed())
		l := location()
		patch := client.MergeFrom(l.DeepCopy())
		l.Labels["app.kubernetes.io/managed-by"] = "someone"
		Expect(K8sClient.Patch(SuiteCtx, l, patch)).To(Succeed())

		stopManager = StartManager(controller.Config{ChartObjects: ConfigMap, Controllers: []string{"chartobjects"}})
		Eventually(func() error { _, err := schedule(); return err }).Should(Succeed())
		Consistently(func() string { return location().Labels["app.kubernetes.io/managed-by"] }).
			WithTimeout(2 * time.Second).Should(Equal("someone"))
	})

	It("ignores a ConfigMap of the same name in a team's namespace", func() {
		EnsureNamespace("chart-tenant")
		tenant := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ConfigMap, Namespace: "chart-tenant"},
			Data: map[string]string{chartobjects.ConfigMapKey: strings.ReplaceAll(objects("", "0 1 * * *"), "chart-schedule", "tenant-schedule")}}
		Expect(K8sClient.Create(SuiteCtx, tenant)).To(Succeed())
		DeferCleanup(func() { Expect(K8sClient.Delete(SuiteCtx, tenant)).To(Succeed()) })
		// A change of ours afterwards is applied: the tenant's, before it, was seen and ignored.
		setObjects(objects("", "0 7 * * *"))
		Eventually(func() string {
			var s cairnv1.Schedule
			Expect(K8sClient.Get(SuiteCtx, types.NamespacedName{Namespace: OperatorNamespace, Name: "chart-schedule"}, &s)).To(Succeed())
			return s.Spec.Schedule
		}).Should(Equal("0 7 * * *"))
		var schedules cairnv1.ScheduleList
		Expect(K8sClient.List(SuiteCtx, &schedules)).To(Succeed())
		for _, sc := range schedules.Items {
			Expect(sc.Name).NotTo(Equal("tenant-schedule"), "in %s", sc.Namespace)
		}
	})
})
