package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// What a user watching Cairn sees: the manager's metrics move with a backup and its gauges are
// right at once after a restart; every phase change is an Event; `kubectl wait
// --for=condition=Ready` works on a backup, a schedule and a location, and a failed backup is
// Stalled.
var _ = Describe("Observability", func() {
	It("counts a backup in the metrics, records its phase changes as Events and makes it Ready", func() {
		const ns = "e2e-metrics"
		namespaceWithConfigMap(ns)
		DeferCleanup(func() {
			_, _, _ = kubectl("delete", "backup", "counted", "stalled", "-n", ns, "--wait=false", "--ignore-not-found")
		})
		before := scrape(manager)

		stderr, err := kubectlStdin(`apiVersion: cairn.dev/v1alpha1
kind: Backup
metadata: {name: counted}
spec: {includedResources: [configmaps]}
`, "apply", "-n", ns, "-f", "-")
		Expect(err).NotTo(HaveOccurred(), stderr)
		kubectlOK("wait", "backup/counted", "-n", ns, "--for=condition=Ready", "--timeout=60s")
		Expect(kubectlOK("get", "backup", "counted", "-n", ns, "-o", "jsonpath={.status.phase}")).To(Equal("Completed"))

		after := scrape(manager)
		for _, counter := range []string{`cairn_backup_attempts_total{schedule=""}`, `cairn_backup_success_total{schedule=""}`} {
			Expect(after[counter]-before[counter]).To(BeNumerically(">=", 1), counter)
		}
		Expect(after[`cairn_backup_items_total{schedule=""}`]).To(BeNumerically(">", before[`cairn_backup_items_total{schedule=""}`]))
		Expect(after[`cairn_backup_duration_seconds_count{schedule=""}`]).To(BeNumerically(">", before[`cairn_backup_duration_seconds_count{schedule=""}`]))
		Expect(after[`cairn_backup_last_successful_timestamp_seconds{schedule=""}`]).To(BeNumerically(">=", float64(time.Now().Add(-time.Minute).Unix())))
		Expect(after).To(HaveKeyWithValue(`cairn_backup_storage_location_available{location="default"}`, 1.0))

		By("recording every phase change as an Event, reason the phase")
		Eventually(func() string {
			return kubectlOK("get", "events.events.k8s.io", "-n", ns, "--field-selector", "regarding.name=counted",
				"-o", `jsonpath={range .items[?(@.action=="ChangePhase")]}{.reason}{" "}{end}`)
		}).Should(And(ContainSubstring("Queued"), ContainSubstring("InProgress"), ContainSubstring("Completed")))

		By("making a cancelled, Failed backup Stalled")
		stderr, err = kubectlStdin(`apiVersion: cairn.dev/v1alpha1
kind: Backup
metadata: {name: stalled}
spec: {includedResources: [configmaps], cancel: true}
`, "apply", "-n", ns, "-f", "-")
		Expect(err).NotTo(HaveOccurred(), stderr)
		kubectlOK("wait", "backup/stalled", "-n", ns, "--for=condition=Stalled", "--timeout=60s")
		Expect(kubectlOK("get", "backup", "stalled", "-n", ns, "-o", `jsonpath={.status.phase} {.status.conditions[?(@.type=="Ready")].status}`)).To(Equal("Failed False"))

		By("a location and a schedule are Ready")
		kubectlOK("wait", "backupstoragelocation/default", "-n", "cairn-system", "--for=condition=Ready", "--timeout=60s")
		stderr, err = kubectlStdin(`apiVersion: cairn.dev/v1alpha1
kind: Schedule
metadata: {name: ready}
spec:
  schedule: "@every 1h"
  template: {includedResources: [configmaps]}
`, "apply", "-n", ns, "-f", "-")
		Expect(err).NotTo(HaveOccurred(), stderr)
		DeferCleanup(func() { _, _, _ = kubectl("delete", "schedule", "ready", "-n", ns, "--ignore-not-found") })
		kubectlOK("wait", "schedule/ready", "-n", ns, "--for=condition=Ready", "--timeout=60s")
		Expect(kubectlOK("get", "schedule", "ready", "-n", ns, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].observedGeneration}`)).To(Equal("1"))
	})

	It("has the right gauges at once after a restart", func() {
		const ns = "e2e-metrics-restart"
		namespaceWithConfigMap(ns)
		stderr, err := kubectlStdin(`apiVersion: cairn.dev/v1alpha1
kind: Backup
metadata: {name: before-restart}
spec: {includedResources: [configmaps]}
`, "apply", "-n", ns, "-f", "-")
		Expect(err).NotTo(HaveOccurred(), stderr)
		DeferCleanup(func() {
			_, _, _ = kubectl("delete", "backup", "before-restart", "-n", ns, "--wait=false", "--ignore-not-found")
		})
		waitBackupPhase(ns, "before-restart", "Completed")
		completed := len(strings.Fields(kubectlOK("get", "backups", "-A", "-o", `jsonpath={.items[?(@.status.phase=="Completed")].metadata.name}`)))
		gauges := scrape(manager)
		Expect(gauges).To(HaveKeyWithValue(`cairn_backups{phase="Completed"}`, float64(completed)))

		killManager()
		restartManager()
		restarted := scrape(manager)
		for _, gauge := range []string{`cairn_backups{phase="Completed"}`, `cairn_backup_last_successful_timestamp_seconds{schedule=""}`,
			`cairn_backup_last_status{schedule=""}`, `cairn_backup_storage_location_available{location="default"}`} {
			Expect(restarted).To(HaveKeyWithValue(gauge, gauges[gauge]), gauge)
		}
		Expect(restarted).NotTo(HaveKey(`cairn_backup_success_total{schedule=""}`), "counters start again from zero; the gauges do not depend on them")
	})
})

// scrape reads m's /metrics: each cairn_ sample by its series (name{labels}), as Prometheus's
// text format writes it.
func scrape(m *managerProcess) map[string]float64 {
	GinkgoHelper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.metricsAddr+"/metrics", nil)
	Expect(err).NotTo(HaveOccurred())
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	Expect(resp.StatusCode).To(Equal(http.StatusOK))
	samples := map[string]float64{}
	scanner := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		line := scanner.Text()
		if !strings.HasPrefix(line, "cairn_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		value, err := strconv.ParseFloat(line[i+1:], 64)
		Expect(err).NotTo(HaveOccurred(), line)
		samples[line[:i]] = value
	}
	Expect(scanner.Err()).NotTo(HaveOccurred())
	fmt.Fprintf(GinkgoWriter, "scraped %d cairn_ samples\n", len(samples))
	return samples
}
