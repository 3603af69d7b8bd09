package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// The suite's control plane runs kube-controller-manager (testenv.StartControllerManager), so
// deleting works as in a cluster: a user can delete a namespace, wait for it to be gone, and
// create (or restore) it again.
var _ = Describe("Deleting with kubectl", func() {
	It("deletes a namespace with its objects: kubectl delete namespace --wait returns and the namespace is gone", func() {
		const ns = "e2e-deleted-namespace"
		kubectlOK("create", "namespace", ns)
		kubectlOK("create", "configmap", "data", "-n", ns, "--from-literal=k=v")
		kubectlOK("create", "secret", "generic", "credentials", "-n", ns, "--from-literal=password=p")
		// The serviceaccount controller gives the namespace its default ServiceAccount.
		Eventually(func() error {
			_, _, err := kubectl("get", "serviceaccount", "default", "-n", ns)
			return err
		}).WithTimeout(30 * time.Second).Should(Succeed())

		kubectlOK("delete", "namespace", ns, "--wait", "--timeout=60s")

		_, stderr, err := kubectl("get", "namespace", ns)
		Expect(err).To(HaveOccurred())
		Expect(stderr).To(ContainSubstring(`namespaces "` + ns + `" not found`))
		// The name is free: the namespace can be made again, empty.
		kubectlOK("create", "namespace", ns)
		DeferCleanup(func() { kubectlOK("delete", "namespace", ns, "--wait=false") })
		Expect(kubectlOK("get", "configmap,secret", "-n", ns, "-o", "name")).To(BeEmpty())
	})

	It("garbage-collects the dependents of a deleted owner: kubectl delete --cascade=foreground returns once they are gone", func() {
		const ns = "e2e-garbage"
		kubectlOK("create", "namespace", ns)
		DeferCleanup(func() { kubectlOK("delete", "namespace", ns, "--wait=false") })
		kubectlOK("create", "configmap", "owner", "-n", ns)
		// blockOwnerDeletion makes a foreground deletion of the owner wait for the dependent.
		uid := kubectlOK("get", "configmap", "owner", "-n", ns, "-o", "jsonpath={.metadata.uid}")
		stderr, err := kubectlStdin(`apiVersion: v1
kind: ConfigMap
metadata:
  name: dependent
  ownerReferences:
  - apiVersion: v1
    kind: ConfigMap
    name: owner
    uid: `+uid+`
    blockOwnerDeletion: true
`, "apply", "-n", ns, "-f", "-")
		Expect(err).NotTo(HaveOccurred(), stderr)

		kubectlOK("delete", "configmap", "owner", "-n", ns, "--cascade=foreground", "--wait", "--timeout=60s")

		Expect(kubectlOK("get", "configmap", "-n", ns, "-o", "name", "--ignore-not-found")).NotTo(ContainSubstring("configmap/"))
	})
})
