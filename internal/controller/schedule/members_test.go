package schedule_test

import (
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// member is a client that acts as user (impersonated by the suite's administrator), bound in
// namespace to a Role with rules.
func member(namespace, user string, rules ...rbacv1.PolicyRule) client.Client {
	GinkgoHelper()
	Expect(K8sClient.Create(SuiteCtx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: user}, Rules: rules})).To(Succeed())
	Expect(K8sClient.Create(SuiteCtx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: user, APIGroup: rbacv1.GroupName}}})).To(Succeed())
	cfg := rest.CopyConfig(RestCfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// A Schedule acts as whoever last defined it (DESIGN.md section 21), through the admission
// policies and every reconciler: the junior who edits the lead's Schedule gets backups with the
// junior's rights, and the status says whom it acts as, since when.
var _ = Describe("A Schedule edited by another member", Ordered, func() {
	const ns = "sched-members"
	var store *storage.Filesystem
	var loc *cairnv1.BackupStorageLocation
	var lead, junior client.Client
	key := types.NamespacedName{Namespace: ns, Name: "nightly"}

	BeforeAll(func() {
		store, loc = CreateDefaultLocation("members")
		EnsureNamespace(ns)
		CreateObject(ConfigMap(ns, "settings", nil))
		CreateObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "password"}, StringData: map[string]string{"p": "hunter2"}})
		editor := rbacv1.PolicyRule{APIGroups: []string{cairnv1.GroupVersion.Group}, Resources: []string{"schedules", "backups"},
			Verbs: []string{"get", "list", "create", "update", "patch"}}
		reads := func(resources ...string) rbacv1.PolicyRule {
			return rbacv1.PolicyRule{APIGroups: []string{""}, Resources: resources, Verbs: []string{"get", "list"}}
		}
		lead = member(ns, "lead", editor, reads("configmaps", "secrets"))
		junior = member(ns, "junior", editor, reads("configmaps"))
		DeferCleanup(StartManager(controller.Config{}))
		DeferCleanup(func() {
			Expect(K8sClient.DeleteAllOf(SuiteCtx, &cairnv1.Schedule{}, client.InNamespace(ns))).To(Succeed())
			DeleteAllBackups()
		})
	})

	actingAs := func() *cairnv1.ScheduleRequester {
		GinkgoHelper()
		return getSchedule(ns, key.Name).Status.ActingAs
	}
	patch := func(c client.Client, spec string) {
		GinkgoHelper()
		s := &cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}}
		Expect(c.Patch(SuiteCtx, s, client.RawPatch(types.MergePatchType, []byte(`{"spec":`+spec+`}`)))).To(Succeed())
	}

	It("acts as the lead who created it, and still after the junior pauses and unpauses it", func() {
		Expect(lead.Create(SuiteCtx, &cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name},
			Spec: cairnv1.ScheduleSpec{Schedule: "@every 1h", Template: cairnv1.BackupSpec{IncludedResources: []string{"configmaps"}}}})).To(Succeed())
		Eventually(actingAs).Should(HaveField("Username", "lead"))
		since := actingAs().Since

		patch(junior, `{"paused":true}`)
		Eventually(func() cairnv1.SchedulePhase { return getSchedule(ns, key.Name).Status.Phase }).Should(Equal(cairnv1.SchedulePhasePaused))
		patch(junior, `{"paused":false}`)
		Eventually(func() cairnv1.SchedulePhase { return getSchedule(ns, key.Name).Status.Phase }).Should(Equal(cairnv1.SchedulePhaseEnabled))
		Expect(actingAs()).To(Equal(&cairnv1.ScheduleRequester{Username: "lead", Since: since}))
	})

	It("acts as the junior once the junior adds secrets to it: its next backup holds none", func() {
		before := time.Now().Add(-time.Second)
		patch(junior, `{"schedule":"@every 2s","template":{"includedResources":["configmaps","secrets"]}}`)
		Eventually(actingAs).Should(HaveField("Username", "junior"))
		Expect(actingAs().Since.Time).To(BeTemporally(">=", before.Truncate(time.Second)))

		var backup *cairnv1.Backup
		Eventually(func(g Gomega) {
			backups := scheduleBackups(ns, key.Name)
			g.Expect(backups).NotTo(BeEmpty())
			backup = &backups[0]
			g.Expect(backup.Status.Phase).To(BeElementOf(cairnv1.BackupPhaseCompleted, cairnv1.BackupPhasePartiallyFailed))
		}).WithTimeout(60 * time.Second).Should(Succeed())
		patch(lead, `{"paused":true}`)
		Expect(backup.Annotations).To(HaveKeyWithValue(cairnv1.RequesterAnnotation, "junior"))
		var names []string
		for _, e := range CommittedEntries(store, ns, backup.Name) {
			names = append(names, e.Name)
		}
		Expect(names).To(ContainElement(ContainSubstring("configmaps")))
		Expect(names).NotTo(ContainElement(ContainSubstring("secrets")), "the junior may not list Secrets")
	})

	It("fails validation, naming the limit, when its location allows a team a shorter ttl", func() {
		update := client.MergeFrom(loc.DeepCopy())
		loc.Spec.TeamLimits = &cairnv1.LocationTeamLimits{MaxTTL: &metav1.Duration{Duration: time.Hour}}
		Expect(K8sClient.Patch(SuiteCtx, loc, update)).To(Succeed())
		Expect(lead.Create(SuiteCtx, &cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "long"},
			Spec: cairnv1.ScheduleSpec{Schedule: "@every 1h", Template: cairnv1.BackupSpec{TTL: &metav1.Duration{Duration: 2 * time.Hour}}}})).To(Succeed())
		Eventually(func(g Gomega) {
			s := getSchedule(ns, "long")
			g.Expect(s.Status.Phase).To(Equal(cairnv1.SchedulePhaseFailedValidation))
			g.Expect(s.Status.ValidationErrors).To(ConsistOf(
				"spec.template.ttl: 2h0m0s is longer than storage location members allows a backup in a team namespace (teamLimits.maxTTL 1h0m0s)"))
		}).Should(Succeed())
	})
})
