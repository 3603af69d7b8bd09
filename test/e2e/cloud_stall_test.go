package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/cairn-backup/cairn/internal/storage"
)

// The azure and gcs specs of a stalled emulator (cloud_test.go), and the proxy that stalls it.

// stoppedDuringUpload makes a location of a new bucket reached through a pausingProxy, and a
// namespace to back up, and creates a backup of it there whose first upload stops the
// emulator (SIGSTOP): it returns with the backup InProgress, its upload waiting on a server
// that does not answer. The emulator is continued when the spec ends, whatever happened.
func stoppedDuringUpload(c *cloudStore, ns string) (bucket string, proxy *pausingProxy) {
	GinkgoHelper()
	bucket = ns
	c.newBucket(bucket)
	cloudNamespace(ns)
	proxy = startPausingProxy(c.endpoint, c.pause, c.resume)
	c.location(ns, bucket, proxy.URL, c.credential, "")
	DeferCleanup(proxy.resume) // first of the spec's clean-ups
	waitLocationAvailable(ns)

	proxy.pauseOn(func(r *http.Request) bool { return c.isUpload(r, bucket) })
	createBackup(ns, "stalled", ns)
	var req string
	Eventually(proxy.paused).WithTimeout(60*time.Second).Should(Receive(&req), managerLog)
	fmt.Fprintf(GinkgoWriter, "stopped the %s emulator at %s\n", c.provider, req)
	waitBackupPhase(ns, "stalled", "InProgress")
	return bucket, proxy
}

func cloudStalledUpload(c *cloudStore) {
	ns := "e2e-" + string(c.provider) + "-stall"
	bucket, proxy := stoppedDuringUpload(c, ns)
	keys := storage.Layout{Prefix: "cluster"}.Backup(ns, "stalled")

	By("finding the backup InProgress and nothing committed while the server is stopped")
	Consistently(func() string { return backupField(ns, "stalled", "{.status.phase}") }).
		WithTimeout(2 * time.Second).WithPolling(500 * time.Millisecond).Should(Equal("InProgress"))

	By("continuing the server (SIGCONT): the upload gets its answer and the backup completes")
	proxy.resume()
	waitBackupPhase(ns, "stalled", "Completed")
	Expect(c.list(bucket)).To(ContainElements(keys.Archive, keys.Metadata))
	expectAllTerminal(ns)

	By("restoring it: what was uploaded across the stop is whole")
	kubectlOK("delete", "configmap", "settings", "-n", ns)
	applyAdmin(fmt.Sprintf("apiVersion: cairn.dev/v1alpha1\nkind: Restore\nmetadata: {name: back, namespace: %s}\nspec: {backupName: stalled}\n", ns))
	waitRestorePhase(ns, "back", "Completed")
	Expect(kubectlOK("get", "configmap", "settings", "-n", ns, "-o", "jsonpath={.data}")).To(MatchJSON(`{"color":"blue"}`))
}

func cloudStalledCancel(c *cloudStore) {
	ns := "e2e-" + string(c.provider) + "-cancel"
	bucket, proxy := stoppedDuringUpload(c, ns)
	keys := storage.Layout{Prefix: "cluster"}.Backup(ns, "stalled")

	By("cancelling it: the upload stops, and the clean-up, which meets the stopped server too, says so")
	kubectlOK("patch", "backup", "stalled", "-n", ns, "--type", "merge", "-p", `{"spec":{"cancel":true}}`)
	waitBackupPhase(ns, "stalled", "FinalizingCancelled")
	Eventually(func() string {
		return backupField(ns, "stalled", `{.status.conditions[?(@.type=="Cancelled")].reason}`)
	}).WithTimeout(60*time.Second).Should(Equal("CleanupFailed"), managerLog)

	By("continuing the server (SIGCONT): the backup fails as cancelled, keeping only its log")
	proxy.resume()
	_, stderr, err := kubectl("wait", "backup/stalled", "-n", ns, "--for=jsonpath={.status.phase}=Failed", "--timeout=90s")
	Expect(err).NotTo(HaveOccurred(), "%s\n%s", stderr, managerLog())
	Expect(backupField(ns, "stalled", "{.status.failureReason}")).To(Equal("Backup cancelled by user"))
	expectAllTerminal(ns)
	Expect(c.list(bucket)).To(Equal([]string{keys.Logs}))

	By("deleting it: the " + bucketWord(string(c.provider)) + " is empty")
	kubectlOK("delete", "backup", "stalled", "-n", ns, "--timeout=60s")
	Expect(c.list(bucket)).To(BeEmpty())
}

func cloudWrongCredentials(c *cloudStore) {
	name := "e2e-" + string(c.provider) + "-creds"
	c.newBucket(name)
	c.location(name, name, c.endpoint, c.wrongCredential, "")
	_, stderr, err := kubectl("wait", "backupstoragelocation/"+name, "-n", "cairn-system",
		"--for=jsonpath={.status.phase}=Unavailable", "--timeout=60s")
	Expect(err).NotTo(HaveOccurred(), stderr)
	Expect(kubectlOK("get", "backupstoragelocation", name, "-n", "cairn-system", "-o", "jsonpath={.status.message}")).
		To(ContainSubstring(c.refusal(name)))

	By("putting the right credentials in the Secret: the location is validated again, and Available")
	kubectlOK("delete", "secret", name, "-n", "cairn-system")
	c.secret(kubectlOK, name, c.credential)
	waitLocationAvailable(name)
}

// pausingProxy passes requests on to an emulator, and stops the emulator (SIGSTOP) when the
// first request that its trigger matches arrives: from then on every request meets a server
// that takes it and never answers, from a chosen moment of a backup. The triggering request
// itself waits in the proxy and reaches the server only once it continues (resume), or never
// if its client gives up first: a request the client abandoned must not land in storage later
// (a stopped server would still commit the one buffered in its socket once continued, after
// the cancel's clean-up, leaving an object no one removes until the backup is deleted).
type pausingProxy struct {
	URL            string
	pause, proceed func()
	paused         chan string
	resumed        chan struct{}
	resumeOnce     sync.Once

	mu      sync.Mutex
	trigger func(*http.Request) bool
}

// startPausingProxy starts a proxy to target on a free port of 127.0.0.1, stopped when the
// spec ends; pause stops the emulator, proceed continues it.
func startPausingProxy(target string, pause, proceed func()) *pausingProxy {
	GinkgoHelper()
	u, err := url.Parse(target)
	Expect(err).NotTo(HaveOccurred())
	u.Path = "" // the emulators' endpoints name the account (azure) after the host
	p := &pausingProxy{pause: pause, proceed: proceed, paused: make(chan string, 1), resumed: make(chan struct{})}
	// SetURL sends the target's Host too: fake-gcs-server reads another Host as a bucket's
	// virtual host.
	forward := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(u) }}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		fire := p.trigger != nil && p.trigger(r)
		if fire {
			p.trigger = nil
			p.pause()
			p.paused <- r.Method + " " + r.URL.Path
		}
		p.mu.Unlock()
		if fire {
			select {
			case <-p.resumed:
			case <-r.Context().Done():
				return // dropped: it never reaches the server
			}
		}
		forward.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(l) }()
	DeferCleanup(func() { p.resume(); _ = srv.Close() })
	p.URL = "http://" + l.Addr().String()
	return p
}

// pauseOn arms the proxy: the first request that match matches from now on stops the emulator.
func (p *pausingProxy) pauseOn(match func(*http.Request) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trigger = match
}

// resume continues the emulator (SIGCONT) and lets the triggering request through, if its
// client still waits.
func (p *pausingProxy) resume() {
	p.resumeOnce.Do(func() {
		p.proceed()
		close(p.resumed)
	})
}
