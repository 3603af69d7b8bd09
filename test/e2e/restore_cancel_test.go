package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// holdNamespace makes a namespace that stays Terminating: an object in it holds a finalizer,
// removed when the spec ends.
func holdNamespace(ns string) {
	GinkgoHelper()
	kubectlOK("create", "namespace", ns)
	stderr, err := kubectlStdin(`apiVersion: v1
kind: ConfigMap
metadata:
  name: hold
  namespace: `+ns+`
  finalizers: [example.com/hold]
`, "apply", "-f", "-")
	Expect(err).NotTo(HaveOccurred(), stderr)
	kubectlOK("delete", "namespace", ns, "--wait=false")
	DeferCleanup(func() {
		_, _, _ = kubectl("patch", "configmap", "hold", "-n", ns, "--type", "merge", "-p", `{"metadata":{"finalizers":null}}`)
	})
}

// backupNamespace backs up a namespace with one ConfigMap, as an admin backup named name.
func backupNamespace(name, ns string) {
	GinkgoHelper()
	kubectlOK("create", "namespace", ns)
	kubectlOK("create", "configmap", "settings", "-n", ns, "--from-literal=color=blue")
	stderr, err := kubectlStdin(`apiVersion: cairn.dev/v1alpha1
kind: Backup
metadata:
  name: `+name+`
  namespace: cairn-system
spec:
  includedNamespaces: [`+ns+`]
`, "apply", "-f", "-")
	Expect(err).NotTo(HaveOccurred(), stderr)
	waitBackupPhase("cairn-system", name, "Completed")
}

// Cancelling a running restore with kubectl, which Velero cannot do: the restore waits for a
// namespace that stays Terminating (an object in it holds a finalizer), and a patch of
// spec.cancel stops it.
var _ = Describe("Cancelling a restore with kubectl", func() {
	It("stops a running restore with kubectl patch spec.cancel=true", func() {
		const src, held = "e2e-rcancel-src", "e2e-rcancel-held"
		DeferCleanup(func() {
			for _, n := range []string{src, held} {
				_, _, _ = kubectl("delete", "namespace", n, "--wait=false", "--ignore-not-found")
			}
			_, _, _ = kubectl("delete", "restore", "e2e-rcancel", "-n", "cairn-system", "--wait=false", "--ignore-not-found")
			_, _, _ = kubectl("delete", "backup", "e2e-rcancel", "-n", "cairn-system", "--wait=false", "--ignore-not-found")
		})
		backupNamespace("e2e-rcancel", src)
		holdNamespace(held)

		stderr, err := kubectlStdin(`apiVersion: cairn.dev/v1alpha1
kind: Restore
metadata:
  name: e2e-rcancel
  namespace: cairn-system
spec:
  backupName: e2e-rcancel
  namespaceMapping:
    e2e-rcancel-src: e2e-rcancel-held
`, "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred(), stderr)
		kubectlOK("wait", "restore/e2e-rcancel", "-n", "cairn-system", "--for=condition=NamespacesReady=false", "--timeout=60s")
		Expect(kubectlOK("get", "restore", "e2e-rcancel", "-n", "cairn-system", "-o", "jsonpath={.status.phase}")).To(Equal("InProgress"))

		kubectlOK("patch", "restore", "e2e-rcancel", "-n", "cairn-system", "--type", "merge", "-p", `{"spec":{"cancel":true}}`)
		waitRestorePhase("cairn-system", "e2e-rcancel", "Failed")
		Expect(kubectlOK("get", "restore", "e2e-rcancel", "-n", "cairn-system", "-o", "jsonpath={.status.failureReason}")).To(Equal("Restore cancelled by user"))
		Expect(kubectlOK("get", "restore", "e2e-rcancel", "-n", "cairn-system",
			"-o", `jsonpath={.status.conditions[?(@.type=="Cancelled")].status}`)).To(Equal("True"))

		// Cancelling it again changes nothing, and says so.
		_, stderr, err = kubectl("patch", "restore", "e2e-rcancel", "-n", "cairn-system", "--type", "merge", "-p", `{"spec":{"cancel":false}}`)
		Expect(err).To(HaveOccurred())
		Expect(stderr).To(ContainSubstring("a cancelled restore stays cancelled"))
	})
})

var _ = Describe("Restart recovery of a restore after kill -9", func() {
	It("InProgress: a restore that was running when the manager died ends Failed", func() {
		const src, held = "e2e-rrestart-src", "e2e-rrestart-held"
		DeferCleanup(func() {
			for _, n := range []string{src, held} {
				_, _, _ = kubectl("delete", "namespace", n, "--wait=false", "--ignore-not-found")
			}
			_, _, _ = kubectl("delete", "restore", "e2e-rrestart", "-n", "cairn-system", "--wait=false", "--ignore-not-found")
			_, _, _ = kubectl("delete", "backup", "e2e-rrestart", "-n", "cairn-system", "--wait=false", "--ignore-not-found")
		})
		backupNamespace("e2e-rrestart", src)
		holdNamespace(held)
		stderr, err := kubectlStdin(`apiVersion: cairn.dev/v1alpha1
kind: Restore
metadata:
  name: e2e-rrestart
  namespace: cairn-system
spec:
  backupName: e2e-rrestart
  namespaceMapping:
    e2e-rrestart-src: e2e-rrestart-held
`, "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred(), stderr)
		kubectlOK("wait", "restore/e2e-rrestart", "-n", "cairn-system", "--for=condition=NamespacesReady=false", "--timeout=60s")

		killManager()
		Expect(kubectlOK("get", "restore", "e2e-rrestart", "-n", "cairn-system", "-o", "jsonpath={.status.phase}")).To(Equal("InProgress"))
		restartManager()
		waitRestorePhase("cairn-system", "e2e-rrestart", "Failed")
		Expect(kubectlOK("get", "restore", "e2e-rrestart", "-n", "cairn-system", "-o", "jsonpath={.status.failureReason}")).
			To(Equal("the operator restarted during the restore"))
	})
})
