package queue_test

import (
	"fmt"
	"strings"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// How the specs read the line and play the runners: they move ReadyToStart backups and
// restores on by patching their status.

// queueOnly runs the queue alone (and the phase events): the test plays the backup runner.
var queueOnly = []string{"queue", "phaseevents"}

func adminBackup(name string, namespaces ...string) {
	GinkgoHelper()
	CreateBackup(OperatorNamespace, name, cairnv1.BackupSpec{IncludedNamespaces: namespaces})
}

// expectQueue waits until the named admin backups have these phases and positions
// ("Queued:2", "ReadyToStart").
func expectQueue(want map[string]string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		got := map[string]string{}
		for name := range want {
			b := GetBackup(OperatorNamespace, name)
			s := string(b.Status.Phase)
			if b.Status.Phase == cairnv1.BackupPhaseQueued {
				s = fmt.Sprintf("Queued:%d", b.Status.QueuePosition)
			}
			got[name] = s
		}
		g.Expect(got).To(Equal(want))
	}).WithTimeout(15 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
}

// expectLine waits until the named admin backups and restores ("backup/b1", "restore/r1") have
// these phases and positions ("Queued:2", "ReadyToStart").
func expectLine(want map[string]string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		got := map[string]string{}
		for key := range want {
			kind, name, _ := strings.Cut(key, "/")
			var phase string
			var position int32
			if kind == "restore" {
				rs := GetRestore(OperatorNamespace, name)
				phase, position = string(rs.Status.Phase), rs.Status.QueuePosition
			} else {
				b := GetBackup(OperatorNamespace, name)
				phase, position = string(b.Status.Phase), b.Status.QueuePosition
			}
			if phase == "Queued" {
				phase = fmt.Sprintf("Queued:%d", position)
			}
			got[key] = phase
		}
		g.Expect(got).To(Equal(want))
	}).WithTimeout(15 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
}

// runnerSetPhase moves a backup on, as the backup runner would.
func runnerSetPhase(name string, phase cairnv1.BackupPhase) {
	GinkgoHelper()
	Eventually(func() error {
		b := GetBackup(OperatorNamespace, name)
		patch := client.MergeFromWithOptions(b.DeepCopy(), client.MergeFromWithOptimisticLock{})
		b.Status.Phase = phase
		return K8sClient.Status().Patch(SuiteCtx, b, patch)
	}).WithTimeout(5 * time.Second).Should(Succeed())
}

// restoreSetPhase moves a restore on, as the restore reconciler would.
func restoreSetPhase(name string, phase cairnv1.RestorePhase) {
	GinkgoHelper()
	Eventually(func() error {
		rs := GetRestore(OperatorNamespace, name)
		patch := client.MergeFromWithOptions(rs.DeepCopy(), client.MergeFromWithOptimisticLock{})
		rs.Status.Phase = phase
		return K8sClient.Status().Patch(SuiteCtx, rs, patch)
	}).WithTimeout(5 * time.Second).Should(Succeed())
}

func restoreQueuedMessage(name string) string {
	GinkgoHelper()
	c := meta.FindStatusCondition(GetRestore(OperatorNamespace, name).Status.Conditions, cairnv1.RestoreConditionQueued)
	if c == nil {
		return ""
	}
	return c.Message
}
