package e2e

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// Restoring as a user does after losing a namespace: back it up, delete it with kubectl and wait
// until it is gone, apply a Restore, wait for it, and find everything back with its data. Each
// spec uses its own namespaces and names, so that the specs may run in parallel.
var _ = Describe("Restores with kubectl", func() {
	It("brings a deleted namespace back, then a copy of it under another name, and keeps both when the restores are deleted", func() {
		const ns, copyNS = "e2e-restore-shop", "e2e-restore-shop-copy"
		DeferCleanup(func() {
			for _, n := range []string{ns, copyNS} {
				_, _, _ = kubectl("delete", "namespace", n, "--wait=false", "--ignore-not-found")
			}
			_, _, _ = kubectl("delete", "restore", "e2e-restore-shop", "e2e-restore-shop-copy", "-n", "cairn-system", "--wait=false", "--ignore-not-found")
			_, _, _ = kubectl("delete", "backup", "e2e-restore-shop", "-n", "cairn-system", "--wait=false", "--ignore-not-found")
		})
		kubectlOK("create", "namespace", ns)
		kubectlOK("label", "namespace", ns, "team=shop")
		kubectlOK("create", "configmap", "settings", "-n", ns, "--from-literal=color=blue", "--from-literal=size=3")
		kubectlOK("create", "secret", "generic", "creds", "-n", ns, "--from-literal=password=s3cret")
		kubectlOK("create", "serviceaccount", "app", "-n", ns)
		kubectlOK("create", "deployment", "web", "-n", ns, "--image=nginx:1.27", "--replicas=2")
		kubectlOK("create", "service", "clusterip", "web", "-n", ns, "--tcp=80:8080")
		clusterIP := kubectlOK("get", "service", "web", "-n", ns, "-o", "jsonpath={.spec.clusterIP}")
		Expect(clusterIP).NotTo(BeEmpty())

		stderr, err := kubectlStdin(`apiVersion: cairn.dev/v1alpha1
kind: Backup
metadata:
  name: e2e-restore-shop
  namespace: cairn-system
spec:
  includedNamespaces: [e2e-restore-shop]
`, "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred(), stderr)
		waitBackupPhase("cairn-system", "e2e-restore-shop", "Completed")

		kubectlOK("delete", "namespace", ns, "--wait", "--timeout=120s")
		_, stderr, err = kubectl("get", "namespace", ns)
		Expect(err).To(HaveOccurred())
		Expect(stderr).To(ContainSubstring(`namespaces "` + ns + `" not found`))

		By("restoring the namespace as it was")
		stderr, err = kubectlStdin(`apiVersion: cairn.dev/v1alpha1
kind: Restore
metadata:
  name: e2e-restore-shop
  namespace: cairn-system
spec:
  backupName: e2e-restore-shop
`, "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred(), stderr)
		waitRestorePhase("cairn-system", "e2e-restore-shop", "Completed")
		expectShopRestored(ns, "e2e-restore-shop")
		Expect(kubectlOK("get", "service", "web", "-n", ns, "-o", "jsonpath={.spec.clusterIP}")).NotTo(BeEmpty())
		Expect(kubectlOK("get", "restore", "e2e-restore-shop", "-n", "cairn-system", "-o", "jsonpath={.metadata.finalizers}")).
			To(ContainSubstring(cairnv1.RestoreDataFinalizer))
		Expect(kubectlOK("get", "restore", "e2e-restore-shop", "-n", "cairn-system",
			"-o", "jsonpath={.status.errors}/{.status.storageLocation}")).To(Equal("/default"), "no errors, files in the default location")

		By("listing restores with the Backup, Phase and Progress columns")
		header, rows := table(kubectlOK("get", "restores", "-n", "cairn-system"))
		Expect(header).To(Equal([]string{"NAME", "BACKUP", "PHASE", "QUEUE", "PROGRESS", "AGE"}))
		row := rowNamed(rows, "e2e-restore-shop")
		Expect(row).To(And(HaveKeyWithValue("BACKUP", "e2e-restore-shop"), HaveKeyWithValue("PHASE", "Completed"), HaveKeyWithValue("QUEUE", "")))
		done, total := progress(row["PROGRESS"])
		Expect(total).To(BeNumerically(">=", 7), "the Namespace, a ConfigMap, a Secret, two ServiceAccounts, a Deployment and a Service")
		Expect(done).To(Equal(total))

		By("reading what the restore did from its files in the storage location")
		dir := filepath.Join(storageDir, "restores", "cairn-system", "e2e-restore-shop")
		var list map[string]map[string][]string
		readGzipJSON(filepath.Join(dir, "e2e-restore-shop-resource-list.json.gz"), &list)
		Expect(list["created"]).To(And(
			HaveKeyWithValue("configmaps", ContainElement(ns+"/settings")),
			HaveKeyWithValue("secrets", ContainElement(ns+"/creds")),
			HaveKeyWithValue("deployments.apps", ContainElement(ns+"/web")),
			HaveKeyWithValue("namespaces", ContainElement(ns)),
		))
		Expect(filepath.Join(dir, "e2e-restore-shop-logs.gz")).To(BeAnExistingFile())
		Expect(filepath.Join(dir, "e2e-restore-shop-results.gz")).To(BeAnExistingFile())

		By("restoring a copy under another name with namespaceMapping")
		stderr, err = kubectlStdin(`apiVersion: cairn.dev/v1alpha1
kind: Restore
metadata:
  name: e2e-restore-shop-copy
  namespace: cairn-system
spec:
  backupName: e2e-restore-shop
  namespaceMapping:
    e2e-restore-shop: e2e-restore-shop-copy
`, "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred(), stderr)
		waitRestorePhase("cairn-system", "e2e-restore-shop-copy", "Completed")
		expectShopRestored(copyNS, "e2e-restore-shop-copy")
		copyDir := filepath.Join(storageDir, "restores", "cairn-system", "e2e-restore-shop-copy")
		Expect(filepath.Join(copyDir, "e2e-restore-shop-copy-logs.gz")).To(BeAnExistingFile())
		// The original is untouched by the copy.
		Expect(kubectlOK("get", "configmap", "settings", "-n", ns, "-o", `jsonpath={.metadata.labels.cairn\.dev/restore-name}`)).To(Equal("e2e-restore-shop"))

		By("deleting the restores: their files go, what they restored stays")
		kubectlOK("delete", "restore", "e2e-restore-shop", "e2e-restore-shop-copy", "-n", "cairn-system", "--wait", "--timeout=60s")
		_, stderr, err = kubectl("get", "restore", "e2e-restore-shop", "-n", "cairn-system")
		Expect(err).To(HaveOccurred())
		Expect(stderr).To(ContainSubstring("not found"))
		for _, name := range []string{"e2e-restore-shop", "e2e-restore-shop-copy"} {
			files, err := filepath.Glob(filepath.Join(storageDir, "restores", "cairn-system", name, "*"))
			Expect(err).NotTo(HaveOccurred())
			Expect(files).To(BeEmpty(), "the files of restore %s", name)
		}
		expectShopRestored(ns, "e2e-restore-shop")
		expectShopRestored(copyNS, "e2e-restore-shop-copy")
		// The backup is untouched by its restores and their deletion.
		Expect(filepath.Join(storageDir, "backups", "cairn-system", "e2e-restore-shop", "e2e-restore-shop.tar.gz")).To(BeAnExistingFile())
	})

	It("ends a restore of a missing backup in FailedValidation, saying so", func() {
		stderr, err := kubectlStdin(`apiVersion: cairn.dev/v1alpha1
kind: Restore
metadata:
  name: e2e-restore-missing
  namespace: cairn-system
spec:
  backupName: e2e-no-such-backup
`, "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred(), stderr)
		DeferCleanup(func() {
			_, _, _ = kubectl("delete", "restore", "e2e-restore-missing", "-n", "cairn-system", "--wait=false", "--ignore-not-found")
		})
		waitRestorePhase("cairn-system", "e2e-restore-missing", "FailedValidation")
		Expect(kubectlOK("get", "restore", "e2e-restore-missing", "-n", "cairn-system", "-o", "jsonpath={.status.validationErrors}")).
			To(Equal(`["spec.backupName: backup e2e-no-such-backup not found in namespace cairn-system (a restore restores only backups of its own namespace)"]`))
		_, rows := table(kubectlOK("get", "restores", "-n", "cairn-system"))
		Expect(rowNamed(rows, "e2e-restore-missing")).To(And(HaveKeyWithValue("BACKUP", "e2e-no-such-backup"),
			HaveKeyWithValue("PHASE", "FailedValidation"), HaveKeyWithValue("PROGRESS", "")))

		// It has no files, and its finalizer goes at once.
		Expect(kubectlOK("get", "restore", "e2e-restore-missing", "-n", "cairn-system", "-o", "jsonpath={.metadata.finalizers}")).
			To(ContainSubstring(cairnv1.RestoreDataFinalizer))
		kubectlOK("delete", "restore", "e2e-restore-missing", "-n", "cairn-system", "--wait", "--timeout=60s")
		Expect(kubectlOK("get", "restores", "-n", "cairn-system", "-o", "name")).NotTo(ContainSubstring("restore.cairn.dev/e2e-restore-missing"))
	})

	It("accepts the restore samples", func() {
		out := kubectlOK("apply", "--dry-run=server", "-f", "config/samples/cairn_v1alpha1_restore.yaml",
			"-f", "config/samples/cairn_v1alpha1_restore_team.yaml")
		// "unchanged" when another spec applied config/samples/ already.
		Expect(out).To(MatchRegexp(`restore.cairn.dev/nightly-example-copy (created|unchanged|configured) \(server dry run\)`))
		Expect(out).To(MatchRegexp(`restore.cairn.dev/team-example-back (created|unchanged|configured) \(server dry run\)`))
	})
})

// expectShopRestored checks with kubectl that the objects of the shop namespace are in ns with
// their data, labelled with the restore that made them.
func expectShopRestored(ns, restoreName string) {
	GinkgoHelper()
	get := func(kind, name, jsonpath string) string {
		GinkgoHelper()
		return kubectlOK("get", kind, name, "-n", ns, "-o", "jsonpath="+jsonpath)
	}
	Expect(get("configmap", "settings", "{.data}")).To(MatchJSON(`{"color":"blue","size":"3"}`))
	Expect(get("secret", "creds", "{.data}")).To(MatchJSON(`{"password":"czNjcmV0"}`)) // base64 of s3cret
	Expect(get("deployment", "web", "{.spec.replicas} {.spec.template.spec.containers[0].image}")).To(Equal("2 nginx:1.27"))
	Expect(get("service", "web", "{.spec.ports[0].port}:{.spec.ports[0].targetPort}")).To(Equal("80:8080"))
	Expect(get("serviceaccount", "app", "{.metadata.name}")).To(Equal("app"))
	for _, kind := range []string{"configmap/settings", "secret/creds", "deployment/web", "service/web", "serviceaccount/app"} {
		Expect(kubectlOK("get", kind, "-n", ns, "-o", `jsonpath={.metadata.labels.cairn\.dev/restore-name} {.metadata.labels.cairn\.dev/backup-name}`)).
			To(Equal(restoreName+" e2e-restore-shop"), kind)
	}
	// The namespace was made from the backed-up Namespace object (its labels), under its new name.
	Expect(kubectlOK("get", "namespace", ns, "-o", `jsonpath={.metadata.labels.team} {.metadata.labels.cairn\.dev/restore-name}`)).To(Equal("shop " + restoreName))
}

// waitRestorePhase waits with kubectl for a restore's phase; on failure it shows the restore and
// the manager's log.
func waitRestorePhase(namespace, name, phase string) {
	GinkgoHelper()
	_, stderr, err := kubectl("wait", "restore/"+name, "-n", namespace, "--for=jsonpath={.status.phase}="+phase, "--timeout=120s")
	if err != nil {
		yaml, _, _ := kubectl("get", "restore", name, "-n", namespace, "-o", "yaml")
		Fail(fmt.Sprintf("restore %s/%s did not reach %s: %s\n%s\nmanager log:\n%s", namespace, name, phase, stderr, yaml, manager.log.String()))
	}
}

// rowNamed is the row of table's rows whose NAME is name.
func rowNamed(rows []map[string]string, name string) map[string]string {
	GinkgoHelper()
	for _, r := range rows {
		if r["NAME"] == name {
			return r
		}
	}
	Fail("no row named " + name)
	return nil
}

// progress reads the Progress column, "done/total".
func progress(cell string) (done, total int) {
	GinkgoHelper()
	d, t, ok := strings.Cut(cell, "/")
	Expect(ok).To(BeTrue(), "progress %q", cell)
	done, err := strconv.Atoi(d)
	Expect(err).NotTo(HaveOccurred())
	total, err = strconv.Atoi(t)
	Expect(err).NotTo(HaveOccurred())
	return done, total
}

// readGzipJSON decodes the gzipped JSON file at path into v.
func readGzipJSON(path string, v any) {
	GinkgoHelper()
	f, err := os.Open(path)
	Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	r, err := gzip.NewReader(f)
	Expect(err).NotTo(HaveOccurred())
	Expect(json.NewDecoder(r).Decode(v)).To(Succeed())
}
