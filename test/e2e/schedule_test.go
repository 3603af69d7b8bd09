package e2e

import (
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("Schedules with kubectl", func() {
	It("makes backups every 5s that complete, and stops when paused", func() {
		const ns = "e2e-schedule"
		namespaceWithConfigMap(ns)
		stderr, err := kubectlStdin(`apiVersion: cairn.dev/v1alpha1
kind: Schedule
metadata:
  name: often
  labels:
    app.kubernetes.io/managed-by: gitops
spec:
  schedule: "@every 5s"
  template:
    includedResources: [configmaps]
`, "apply", "-n", ns, "-f", "-")
		Expect(err).NotTo(HaveOccurred(), stderr)
		DeferCleanup(func() { kubectlOK("delete", "schedule", "often", "-n", ns, "--ignore-not-found") })

		// phases lists the phases of the schedule's backups, by their label.
		phases := func() []string {
			return strings.Fields(kubectlOK("get", "backups", "-n", ns, "-l", "cairn.dev/schedule-name=often",
				"-o", "jsonpath={range .items[*]}{.status.phase}{\" \"}{end}"))
		}
		Eventually(func(g Gomega) {
			completed := 0
			for _, p := range phases() {
				if p == "Completed" {
					completed++
				}
			}
			g.Expect(completed).To(BeNumerically(">=", 2))
		}).WithTimeout(90*time.Second).WithPolling(time.Second).Should(Succeed(), managerLog)

		names := strings.Fields(kubectlOK("get", "backups", "-n", ns, "-l", "cairn.dev/schedule-name=often", "-o", "jsonpath={.items[*].metadata.name}"))
		for _, n := range names {
			Expect(n).To(MatchRegexp(`^often-\d{14}$`))
		}
		labels := kubectlOK("get", "backup", names[0], "-n", ns, "-o", "jsonpath={.metadata.labels}")
		Expect(labels).NotTo(ContainSubstring("gitops"), "the schedule's own labels are not copied")

		out := kubectlOK("get", "schedules", "-n", ns)
		Expect(strings.Fields(strings.SplitN(out, "\n", 2)[0])).To(Equal([]string{"NAME", "SCHEDULE", "PAUSED", "LAST", "BACKUP", "NEXT", "BACKUP", "AGE"}))
		Expect(out).To(ContainSubstring("@every 5s"))

		By("pausing it")
		kubectlOK("patch", "schedule", "often", "-n", ns, "--type=merge", "-p", `{"spec":{"paused":true}}`)
		kubectlOK("wait", "schedule/often", "-n", ns, "--for=jsonpath={.status.phase}=Paused", "--timeout=30s")
		count := len(phases())
		Consistently(func() int { return len(phases()) }).WithTimeout(12 * time.Second).WithPolling(time.Second).Should(Equal(count))
		Expect(kubectlOK("get", "schedule", "often", "-n", ns, "-o", "jsonpath={.status.nextBackup}")).To(BeEmpty())
	})
})
