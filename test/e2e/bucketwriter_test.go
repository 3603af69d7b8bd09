package e2e

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// A bucket writer gains nothing from the manager (DESIGN.md section 21): team-b's encrypted
// archive copied over team-a's in the bucket is refused to team-a's lead, at download and at
// restore, naming the object, and nothing is restored from it. Each object of an encrypted
// location is bound to its key relative to the location's prefix (format v2).
var _ = Describe("Bucket writers: an encrypted archive moved in the bucket does not decrypt", Ordered, func() {
	const (
		teamA    = "e2e-bw-team-a"
		teamB    = "e2e-bw-team-b"
		location = "e2e-bw-encrypted"
	)
	var (
		leadA string // kubeconfig of team-a's lead
		dir   string // the location's directory: the bucket
	)
	archiveOf := func(ns string) string {
		return filepath.Join(dir, "backups", ns, "nightly", "nightly.tar.gz")
	}

	BeforeAll(func() {
		key := make([]byte, 32)
		_, _ = rand.Read(key)
		keyFile := filepath.Join(GinkgoT().TempDir(), "k1")
		Expect(os.WriteFile(keyFile, key, 0o600)).To(Succeed())
		kubectlOK("create", "secret", "generic", "e2e-bw-keys", "-n", "cairn-system", "--from-file=k1="+keyFile)
		dir = filepath.Join(GinkgoT().TempDir(), "bucket")
		applyAdmin(fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: BackupStorageLocation
metadata: {name: %s, namespace: cairn-system}
spec:
  provider: filesystem
  config: {path: %s}
  encryption: {keySecretRef: {name: e2e-bw-keys}, writeKey: k1}
`, location, dir))
		DeferCleanup(func() {
			kubectlOK("delete", "backupstoragelocation", location, "-n", "cairn-system")
			kubectlOK("delete", "secret", "e2e-bw-keys", "-n", "cairn-system")
		})
		_, stderr, err := kubectl("wait", "backupstoragelocation/"+location, "-n", "cairn-system", "--for=jsonpath={.status.phase}=Available", "--timeout=30s")
		Expect(err).NotTo(HaveOccurred(), stderr)

		createCairnEditorRole()
		for _, ns := range []string{teamA, teamB} {
			kubectlOK("create", "namespace", ns)
			DeferCleanup(func() { kubectlOK("delete", "namespace", ns, "--wait=false") })
			kubectlOK("create", "configmap", "settings", "-n", ns, "--from-literal=team="+ns)
		}
		leadA = tenant(teamA, "lead", "e2e-namespace-admin")
		leadB := tenant(teamB, "lead", "e2e-namespace-admin")
		for ns, lead := range map[string]string{teamA: leadA, teamB: leadB} {
			applyAs(lead, backupManifest(ns, "nightly", "storageLocation: "+location+", includedResources: [configmaps]"))
		}
		for _, ns := range []string{teamA, teamB} {
			waitBackupPhase(ns, "nightly", "Completed")
		}

		By("a bucket writer copies team-b's archive over team-a's")
		moved, err := os.ReadFile(archiveOf(teamB))
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(archiveOf(teamA), moved, 0o600)).To(Succeed())
	})

	key := "backups/" + teamA + "/nightly/nightly.tar.gz"

	It("refuses team-a's download of the moved archive, naming the object, and saves nothing", func() {
		saved := filepath.Join(GinkgoT().TempDir(), "nightly.tar.gz")
		got := cairnWith(leadA, "backup", "download", "nightly", "-n", teamA, "-o", saved)
		Expect(got.code).NotTo(Equal(0), got.stdout)
		Expect(got.stderr).To(ContainSubstring("decrypting " + key))
		Expect(got.stderr).To(ContainSubstring("moved or copied here"))
		Expect(saved).NotTo(BeAnExistingFile())
	})

	It("refuses team-a's restore of the moved archive, naming the object, and restores nothing", func() {
		kubectlOK("delete", "configmap", "settings", "-n", teamA)
		applyAs(leadA, fmt.Sprintf("apiVersion: cairn.dev/v1alpha1\nkind: Restore\nmetadata: {name: back, namespace: %s}\nspec: {backupName: nightly}\n", teamA))
		waitRestorePhase(teamA, "back", "Failed")
		Expect(kubectlOK("get", "restore", "back", "-n", teamA, "-o", "jsonpath={.status.failureReason}")).To(ContainSubstring(key))
		_, _, err := kubectl("get", "configmap", "settings", "-n", teamA)
		Expect(err).To(HaveOccurred(), "nothing of team-b's archive is restored into team-a")
	})
})
