package queue_test

import (
	"strings"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
)

// A location's teamLimits (DESIGN.md section 21), through the real reconcilers: a team backup
// from a namespace the location leaves out, or asking a longer ttl than it allows, ends
// FailedValidation naming the limit; the same backup of an administrator's runs.
var _ = Describe("A location's limits for teams", Ordered, func() {
	const (
		prod = "limits-prod"
		dev  = "limits-dev"
	)
	var loc *cairnv1.BackupStorageLocation

	BeforeAll(func() {
		_, loc = CreateDefaultLocation("limited")
		patch := client.MergeFrom(loc.DeepCopy())
		loc.Spec.TeamLimits = &cairnv1.LocationTeamLimits{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "prod"}},
			MaxTTL:            &metav1.Duration{Duration: 24 * time.Hour},
		}
		Expect(K8sClient.Patch(SuiteCtx, loc, patch)).To(Succeed())
		for name, tier := range map[string]string{prod: "prod", dev: "dev"} {
			Expect(K8sClient.Create(SuiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"tier": tier}}})).To(Succeed())
			CreateObject(ConfigMap(name, "settings", nil))
		}
		DeferCleanup(StartManager(controller.Config{ConcurrentBackups: 1, DefaultBackupTTL: 48 * time.Hour}))
		EventuallyLocation(loc, cairnv1.StorageLocationPhaseAvailable, "")
	})
	AfterAll(func() { DeleteAllBackups() })

	hours := func(h int) *metav1.Duration { return &metav1.Duration{Duration: time.Duration(h) * time.Hour} }
	failed := func(namespace, name string) string {
		GinkgoHelper()
		var b *cairnv1.Backup
		Eventually(func() cairnv1.BackupPhase {
			b = GetBackup(namespace, name)
			return b.Status.Phase
		}).Should(Equal(cairnv1.BackupPhaseFailedValidation))
		return strings.Join(b.Status.ValidationErrors, "\n")
	}

	It("refuses a team backup from a namespace the location leaves out, naming its selector", func() {
		CreateBackup(dev, "excluded", cairnv1.BackupSpec{TTL: hours(1)})
		Expect(failed(dev, "excluded")).To(Equal("spec.storageLocation: storage location limited takes backups only from the namespaces " +
			"its teamLimits.namespaceSelector selects (tier=prod), and namespace limits-dev is not one of them"))
	})

	It("refuses a team backup whose ttl, its own or the manager's default, is over maxTTL", func() {
		CreateBackup(prod, "too-long", cairnv1.BackupSpec{TTL: hours(25)})
		Expect(failed(prod, "too-long")).To(Equal("spec.ttl: 25h0m0s is longer than storage location limited allows a backup in a team namespace (teamLimits.maxTTL 24h0m0s)"))
		CreateBackup(prod, "default-ttl", cairnv1.BackupSpec{})
		Expect(failed(prod, "default-ttl")).To(ContainSubstring("spec.ttl: unset, so the manager's default 48h0m0s, is longer than storage location limited allows"))
	})

	It("runs a team backup within the limits, and an administrator's over them", func() {
		CreateBackup(prod, "within", cairnv1.BackupSpec{TTL: hours(24)})
		CreateBackup(OperatorNamespace, "admin-forever", cairnv1.BackupSpec{TTL: hours(0), IncludedNamespaces: []string{dev}})
		for _, b := range []struct{ namespace, name string }{{prod, "within"}, {OperatorNamespace, "admin-forever"}} {
			Eventually(func(g Gomega) {
				got := GetBackup(b.namespace, b.name)
				g.Expect(got.Status.Phase).To(Equal(cairnv1.BackupPhaseCompleted), "validationErrors %v", got.Status.ValidationErrors)
			}).WithTimeout(60 * time.Second).Should(Succeed())
		}
	})
})
