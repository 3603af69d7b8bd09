package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// A member with fewer rights gains nothing from a colleague's objects, and a team asks a location
// only what its administrator allows (DESIGN.md section 21). As in tenancy_test.go, the members
// are ServiceAccounts with tokens from `kubectl create token`, driving the real kubectl and cairn.
var _ = Describe("Members: a Schedule acts as whoever last defined it; locations bound what teams ask", Ordered, func() {
	const ns = "e2e-members"
	var lead, junior string // kubeconfigs

	BeforeAll(func() {
		kubectlOK("create", "namespace", ns)
		DeferCleanup(func() { kubectlOK("delete", "namespace", ns, "--wait=false") })
		createCairnEditorRole()
		// lead: the namespace's admin, who may read Secrets and exec into pods.
		lead = tenant(ns, "lead", "e2e-namespace-admin")
		// junior: reads the application's kinds (pods included) but not Secrets, and no pods/exec.
		junior = tenant(ns, "junior", "e2e-namespace-viewer")
		for _, who := range []struct{ config, verb, resource, want string }{
			{junior, "get", "secrets", "no"}, {junior, "create", "pods/exec", "no"}, {junior, "patch", "schedules.cairn.dev", "yes"},
			{lead, "get", "secrets", "yes"}, {lead, "create", "pods/exec", "yes"},
		} {
			out, _, _ := kubectlWith(who.config, "auth", "can-i", who.verb, who.resource, "-n", ns)
			answer, _, _ := strings.Cut(strings.TrimSpace(out), " ")
			Expect(answer).To(Equal(who.want), "%s may %s %s", who.config, who.verb, who.resource)
		}
		kubectlOK("create", "configmap", "app-config", "-n", ns, "--from-literal=mode=prod")
		kubectlOK("create", "secret", "generic", "app-password", "-n", ns, "--from-literal=password=hunter2")
		// A pod for the hook: nothing runs it here, and the hook is refused before that matters.
		// Its namespace's default ServiceAccount, which admission wants, comes a moment after
		// the namespace.
		Eventually(applyAdminOut).WithArguments(fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: app, namespace: %s}
spec:
  containers: [{name: app, image: registry.example/app:1}]
`, ns)).WithTimeout(30 * time.Second).Should(Succeed())
	})

	It("makes the next backup of a lead's Schedule act as the junior who edited it: no Secrets, no hooks", func() {
		applyAs(lead, fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: Schedule
metadata: {name: nightly, namespace: %s}
spec: {schedule: "0 3 * * *", template: {includedResources: [configmaps]}}
`, ns))
		Eventually(func() string {
			return kubectlOK("get", "schedule", "nightly", "-n", ns, "-o", "jsonpath={.status.actingAs.username}")
		}).WithTimeout(30 * time.Second).Should(Equal("system:serviceaccount:" + ns + ":lead"))

		By("the junior pauses and unpauses it: it still acts as the lead")
		for _, paused := range []string{"true", "false"} {
			_, stderr, err := kubectlWith(junior, "patch", "schedule", "nightly", "-n", ns, "--type=merge", "-p", `{"spec":{"paused":`+paused+`}}`)
			Expect(err).NotTo(HaveOccurred(), stderr)
			Expect(kubectlOK("get", "schedule", "nightly", "-n", ns, "-o", `jsonpath={.metadata.annotations.cairn\.dev/requester}`)).
				To(Equal("system:serviceaccount:" + ns + ":lead"))
		}

		By("the junior adds Secrets and an exec hook, and makes it run every few seconds")
		_, stderr, err := kubectlWith(junior, "patch", "schedule", "nightly", "-n", ns, "--type=merge", "-p",
			`{"spec":{"schedule":"@every 3s","template":{"includedResources":["configmaps","secrets","pods"],`+
				`"hooks":{"resources":[{"name":"dump","pre":[{"exec":{"command":["cat","/var/run/secrets/kubernetes.io/serviceaccount/token"]}}]}]}}}}`)
		Expect(err).NotTo(HaveOccurred(), stderr)
		var name string
		Eventually(func() string {
			names := strings.Fields(kubectlOK("get", "backups", "-n", ns, "-l", "cairn.dev/schedule-name=nightly", "-o", "jsonpath={.items[*].metadata.name}"))
			if len(names) > 0 {
				name = names[0]
			}
			return name
		}).WithTimeout(60 * time.Second).ShouldNot(BeEmpty())
		_, stderr, err = kubectlWith(lead, "patch", "schedule", "nightly", "-n", ns, "--type=merge", "-p", `{"spec":{"paused":true}}`)
		Expect(err).NotTo(HaveOccurred(), stderr)
		waitBackupPhase(ns, name, "PartiallyFailed")
		Expect(kubectlOK("get", "backup", name, "-n", ns, "-o", `jsonpath={.metadata.annotations.cairn\.dev/requester}`)).
			To(Equal("system:serviceaccount:" + ns + ":junior"))

		By("its backup holds no Secret, and its hook was refused for lack of pods/exec")
		described := cairnWith(junior, "backup", "describe", name, "-n", ns, "--details")
		Expect(described.code).To(Equal(0), described.stderr)
		Expect(described.stdout).To(ContainSubstring("may not create pods/exec in namespace " + ns))
		logs := cairnWith(junior, "backup", "logs", name, "-n", ns)
		Expect(logs.code).To(Equal(0), logs.stderr)
		Expect(logs.stdout).To(ContainSubstring("Left out secrets in namespace " + ns))
		dir := GinkgoT().TempDir()
		got := cairnWith(junior, "backup", "download", name, "-n", ns, "-o", filepath.Join(dir, "b.tar.gz"))
		Expect(got.code).To(Equal(0), got.stderr)
		entries := tarEntries(filepath.Join(dir, "b.tar.gz"))
		Expect(entries).To(ContainElement("resources/configmaps/namespaces/" + ns + "/app-config.json"))
		for _, e := range entries {
			Expect(e).NotTo(HavePrefix("resources/secrets/"))
			Expect(e).NotTo(HavePrefix("resources/pods/"), "the pod whose hook failed is left out")
		}

		By("cairn schedule describe says whom it acts as, and since when")
		out := cairnWith(lead, "schedule", "describe", "nightly", "-n", ns)
		Expect(out.code).To(Equal(0), out.stderr)
		Expect(out.stdout).To(MatchRegexp(`(?m)^Acts as:\s+system:serviceaccount:%s:junior, since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`, ns))
	})

	It("refuses a team backup to a location that leaves out its namespace, or with a ttl over its limit, naming the limit; not an administrator's", func() {
		dir := GinkgoT().TempDir()
		cairnOK("location", "create", "e2e-limited", "--provider", "filesystem", "--config", "path="+dir,
			"--team-namespaces", "tier=prod", "--team-max-ttl", "1h")
		DeferCleanup(func() { kubectlOK("delete", "backupstoragelocation", "e2e-limited", "-n", "cairn-system") })
		_, _, err := kubectl("wait", "backupstoragelocation/e2e-limited", "-n", "cairn-system", "--for=jsonpath={.status.phase}=Available", "--timeout=30s")
		Expect(err).NotTo(HaveOccurred())

		validationErrors := func(name string) string {
			return kubectlOK("get", "backup", name, "-n", ns, "-o", "jsonpath={.status.validationErrors}")
		}
		By("a namespace the location's selector leaves out")
		applyAs(lead, backupManifest(ns, "excluded", "storageLocation: e2e-limited, ttl: 1h"))
		waitBackupPhase(ns, "excluded", "FailedValidation")
		Expect(validationErrors("excluded")).To(ContainSubstring("storage location e2e-limited takes backups only from the namespaces its teamLimits.namespaceSelector selects (tier=prod), and namespace " + ns + " is not one of them"))

		By("once an administrator labels the namespace in, a ttl over the limit")
		kubectlOK("label", "namespace", ns, "tier=prod")
		applyAs(lead, backupManifest(ns, "too-long", "storageLocation: e2e-limited, ttl: 8760h"))
		waitBackupPhase(ns, "too-long", "FailedValidation")
		Expect(validationErrors("too-long")).To(ContainSubstring("spec.ttl: 8760h0m0s is longer than storage location e2e-limited allows a backup in a team namespace (teamLimits.maxTTL 1h0m0s)"))
		described := cairnWith(lead, "backup", "describe", "too-long", "-n", ns)
		Expect(described.stdout).To(ContainSubstring("teamLimits.maxTTL 1h0m0s"))

		By("within the limits it runs, and an administrator's backup of the namespace that never expires runs too")
		applyAs(lead, backupManifest(ns, "within", "storageLocation: e2e-limited, ttl: 1h, includedResources: [configmaps]"))
		waitBackupPhase(ns, "within", "Completed")
		applyAdmin(`apiVersion: cairn.dev/v1alpha1
kind: Backup
metadata: {name: e2e-members-forever, namespace: cairn-system}
spec: {storageLocation: e2e-limited, ttl: 0s, includedNamespaces: [` + ns + `], includedResources: [configmaps]}
`)
		waitBackupPhase("cairn-system", "e2e-members-forever", "Completed")
	})
})
