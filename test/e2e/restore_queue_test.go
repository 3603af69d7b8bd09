package e2e

import (
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// One queue for backups and restores, seen with kubectl: a restore into a namespace that a
// running backup reads waits in the same line, says why, and runs once the backup is done.
var _ = Describe("A restore queued behind a backup, with kubectl", func() {
	It("shows its position and reason while a backup of its namespace runs, then completes", func() {
		ns := "e2e-rqueue"
		namespaceWithConfigMap(ns)
		DeferCleanup(func() { _, _, _ = kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found") })
		_, proxy := proxiedS3Location(ns)
		createBackup(ns, "first", ns)
		waitBackupPhase(ns, "first", "Completed")

		// A second backup of the namespace runs, its archive upload held by the proxy.
		hold := proxy.holdBefore(request(http.MethodPut, ns, keysOf(ns, "blocker").Archive))
		createBackup(ns, "blocker", ns)
		hold.waitHeld()
		waitBackupPhase(ns, "blocker", "InProgress")

		stderr, err := kubectlStdin(`apiVersion: cairn.dev/v1alpha1
kind: Restore
metadata:
  name: back
  namespace: e2e-rqueue
spec:
  backupName: first
`, "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred(), stderr)
		Eventually(func(g Gomega) {
			g.Expect(kubectlOK("get", "restore", "back", "-n", ns, "-o", "jsonpath={.status.phase}/{.status.queuePosition}")).To(Equal("Queued/1"))
			g.Expect(kubectlOK("get", "restore", "back", "-n", ns, "-o", `jsonpath={.status.conditions[?(@.type=="Queued")].message}`)).
				To(Equal("namespace e2e-rqueue overlaps running backup blocker"))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		header, rows := table(kubectlOK("get", "restores", "-n", ns))
		Expect(header).To(ContainElement("QUEUE"))
		Expect(rowNamed(rows, "back")).To(And(HaveKeyWithValue("PHASE", "Queued"), HaveKeyWithValue("QUEUE", "1")))

		// The backup ends (its held upload is dropped: it fails), and the restore runs.
		hold.end()
		Eventually(func() string { return backupField(ns, "blocker", "{.status.phase}") }).WithTimeout(60 * time.Second).
			Should(BeElementOf("Completed", "Failed"))
		waitRestorePhase(ns, "back", "Completed")
		Expect(kubectlOK("get", "restore", "back", "-n", ns, "-o", "jsonpath={.status.queuePosition}")).To(BeEmpty())
	})
})
