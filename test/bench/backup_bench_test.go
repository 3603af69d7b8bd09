package bench

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// process is the real manager binary, as users run it, so that its memory is its own.
type process struct {
	cmd *exec.Cmd
	log bytes.Buffer
}

// rssPeakMiB is the process's peak resident set (VmHWM), in MiB.
func (p *process) rssPeakMiB(b *testing.B) float64 {
	b.Helper()
	mib, err := peakRSSMiB(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	return mib
}

// peakRSSMiB reads a process's peak resident set (VmHWM), in MiB, from its /proc status file.
func peakRSSMiB(status string) (float64, error) { return statusMiB(status, "VmHWM:") }

// statusMiB reads one size (field: "VmHWM:", "VmRSS:") of a process's /proc status file, in MiB.
func statusMiB(status, field string) (float64, error) {
	data, err := os.ReadFile(status)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kib, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kib / 1024, err
		}
	}
	return 0, fmt.Errorf("no %s in %s", field, status)
}

// backupCluster is a control plane with the manager binary running against it.
type backupCluster struct {
	cfg     *rest.Config
	c       client.Client
	manager *process
	stop    func()
}

// startBackupCluster starts a control plane with a default filesystem location and the manager
// binary with --concurrent-backups=concurrency and the extra flags args.
func startBackupCluster(b *testing.B, concurrency int, args ...string) *backupCluster {
	b.Helper()
	managerBin := filepath.Join(testenv.RepoRoot(), "bin", "manager")
	if _, err := os.Stat(managerBin); err != nil {
		b.Fatal("run 'make build' first")
	}
	env, err := testenv.New()
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := env.Start()
	if err != nil {
		b.Fatal(err)
	}
	admin, err := env.AddUser(envtest.User{Name: "bench", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	kc, err := admin.KubeConfig()
	if err != nil {
		b.Fatal(err)
	}
	kubeconfig := filepath.Join(b.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		b.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	mustCreate(b, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}})
	mustCreate(b, c, &cairnv1.BackupStorageLocation{
		ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: operatorNamespace},
		Spec: cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Default: true,
			Config: map[string]string{"path": b.TempDir()}},
	})
	probe := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(b))
	m := &process{cmd: exec.Command(managerBin, append([]string{"--kubeconfig", kubeconfig, "--namespace", operatorNamespace,
		"--concurrent-backups", strconv.Itoa(concurrency), "--metrics-bind-address", "0", "--download-bind-address", "0", "--health-probe-bind-address", probe}, args...)...)}
	m.cmd.Stdout, m.cmd.Stderr = &m.log, &m.log
	if err := m.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get("http://" + probe + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("the manager did not become ready:\n%s", m.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The location must be validated before backups can start.
	for {
		var l cairnv1.BackupStorageLocation
		if err := c.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: "default"}, &l); err == nil && l.Status.Phase == cairnv1.StorageLocationPhaseAvailable {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return &backupCluster{cfg: cfg, c: c, manager: m, stop: func() {
		_ = m.cmd.Process.Kill()
		_ = m.cmd.Wait()
		_ = env.Stop()
	}}
}

func mustCreate(b *testing.B, c client.Client, obj client.Object) {
	b.Helper()
	if err := c.Create(context.Background(), obj); err != nil {
		b.Fatal(err)
	}
}

// fillConfigMaps creates n ConfigMaps of 1 KiB spread over the namespaces, in parallel.
func fillConfigMaps(b *testing.B, c client.Client, namespaces []string, n int) {
	b.Helper()
	fillConfigMapsSized(b, c, namespaces, n, 1024)
}

// fillConfigMapsSized creates the namespaces, and n ConfigMaps with size bytes of data spread
// over them.
func fillConfigMapsSized(b *testing.B, c client.Client, namespaces []string, n, size int) {
	b.Helper()
	for _, ns := range namespaces {
		mustCreate(b, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	createConfigMaps(b, c, namespaces, n, size, 32, nil)
}

// createConfigMaps creates n ConfigMaps (cm-000000, cm-000001, ...) with size bytes of data and
// these labels, spread over the namespaces, from workers goroutines sharing the client.
func createConfigMaps(b *testing.B, c client.Client, namespaces []string, n, size, workers int, labels map[string]string) {
	b.Helper()
	value := strings.Repeat("x", size)
	work := make(chan int, 256)
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespaces[i%len(namespaces)], Name: fmt.Sprintf("cm-%06d", i), Labels: labels},
					Data: map[string]string{"data": value}}
				if err := c.Create(context.Background(), cm); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}

// floor is the least a backup of these namespaces could take: discover every listable type
// and LIST each of them in each namespace, paginated by 500, all in parallel.
func floor(b *testing.B, cfg *rest.Config, namespaces []string) time.Duration {
	b.Helper()
	start := time.Now()
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	lists, err := disco.ServerPreferredResources()
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, res := range backup.ResourcesFromDiscovery(lists) {
		if !res.Namespaced {
			continue
		}
		for _, ns := range namespaces {
			wg.Add(1)
			go func() {
				defer wg.Done()
				opts := metav1.ListOptions{Limit: 500}
				for {
					list, err := dyn.Resource(res.GroupVersionResource).Namespace(ns).List(context.Background(), opts)
					if err != nil || list.GetContinue() == "" {
						return
					}
					opts.Continue = list.GetContinue()
				}
			}()
		}
	}
	wg.Wait()
	return time.Since(start)
}

// timeBackup creates a backup and returns the times to InProgress and to Completed.
func timeBackup(b *testing.B, c client.Client, name string, namespaces []string) (toInProgress, toCompleted time.Duration) {
	b.Helper()
	return timeBackupSpec(b, c, name, cairnv1.BackupSpec{IncludedNamespaces: namespaces})
}

// timeBackupSpec creates a backup with spec and returns the times to InProgress and to
// Completed.
func timeBackupSpec(b *testing.B, c client.Client, name string, spec cairnv1.BackupSpec) (toInProgress, toCompleted time.Duration) {
	b.Helper()
	start := time.Now()
	mustCreate(b, c, &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: operatorNamespace}, Spec: spec})
	deadline := start.Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		var bk cairnv1.Backup
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: operatorNamespace, Name: name}, &bk); err != nil {
			b.Fatal(err)
		}
		switch bk.Status.Phase {
		case cairnv1.BackupPhaseInProgress, cairnv1.BackupPhaseFinalizing:
			if toInProgress == 0 {
				toInProgress = time.Since(start)
			}
		case cairnv1.BackupPhaseCompleted:
			if toInProgress == 0 {
				toInProgress = time.Since(start)
			}
			return toInProgress, time.Since(start)
		case cairnv1.BackupPhaseFailed, cairnv1.BackupPhaseFailedValidation, cairnv1.BackupPhasePartiallyFailed:
			b.Fatalf("backup %s ended %s: %s %v", name, bk.Status.Phase, bk.Status.FailureReason, bk.Status.ValidationErrors)
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.Fatalf("backup %s did not complete in 10 minutes", name)
	return 0, 0
}

func benchNamespaces() []string {
	var out []string
	for i := range 10 {
		out = append(out, fmt.Sprintf("bench-%d", i))
	}
	return out
}

// BenchmarkBackup10kConfigMaps backs up 10,000 ConfigMaps of 1 KiB in 10 namespaces with the
// real manager binary, next to the floor; with --concurrent-backups=4, a backup of one small
// namespace is created while it runs.
func BenchmarkBackup10kConfigMaps(b *testing.B) {
	const n = 10000
	cl := startBackupCluster(b, 4)
	defer cl.stop()
	namespaces := benchNamespaces()
	fillConfigMaps(b, cl.c, namespaces, n)
	fillConfigMaps(b, cl.c, []string{"small"}, 1)

	floorTime := min(floor(b, cl.cfg, namespaces), floor(b, cl.cfg, namespaces))

	var smallIn, smallDone time.Duration
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(200 * time.Millisecond) // the big backup is running by then
		smallIn, smallDone = timeBackup(b, cl.c, "small", []string{"small"})
	}()
	_, wall := timeBackup(b, cl.c, "big", namespaces)
	wg.Wait()

	b.ReportMetric(wall.Seconds(), "backup-s")
	b.ReportMetric(floorTime.Seconds(), "floor-s")
	b.ReportMetric(wall.Seconds()/floorTime.Seconds(), "x-floor")
	b.ReportMetric(n/wall.Seconds(), "items/s")
	b.ReportMetric(cl.manager.rssPeakMiB(b), "peak-rss-MiB")
	b.ReportMetric(float64(smallIn.Milliseconds()), "small-to-inprogress-ms")
	b.ReportMetric(float64(smallDone.Milliseconds()), "small-to-completed-ms")
}

// BenchmarkBackup100kConfigMaps reports the manager's peak memory backing up 100,000 ConfigMaps.
func BenchmarkBackup100kConfigMaps(b *testing.B) {
	const n = 100000
	cl := startBackupCluster(b, 1)
	defer cl.stop()
	namespaces := benchNamespaces()
	fillConfigMaps(b, cl.c, namespaces, n)
	_, wall := timeBackup(b, cl.c, "big", namespaces)
	b.ReportMetric(wall.Seconds(), "backup-s")
	b.ReportMetric(n/wall.Seconds(), "items/s")
	b.ReportMetric(cl.manager.rssPeakMiB(b), "peak-rss-MiB")
}

// scaleItems is the size of the scale benchmark: CAIRN_BENCH_SCALE ConfigMaps, 300,000 unless
// set (the size at which Velero users report backups of 30 min on 1.11 and 6 h on 1.16).
func scaleItems(b *testing.B) int {
	if v := os.Getenv("CAIRN_BENCH_SCALE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("CAIRN_BENCH_SCALE=%q is not a positive number", v)
		}
		return n
	}
	return 300000
}

// BenchmarkBackupScale backs up 300,000 ConfigMaps of 1 KiB in 30 namespaces with the real
// manager binary, next to the floor, and reports the manager's peak memory (goal < 150 MiB,
// ≤ 2× the floor).
func BenchmarkBackupScale(b *testing.B) {
	n := scaleItems(b)
	cl := startBackupCluster(b, 1)
	defer cl.stop()
	var namespaces []string
	for i := range 30 {
		namespaces = append(namespaces, fmt.Sprintf("scale-%02d", i))
	}
	fillConfigMaps(b, cl.c, namespaces, n)
	floorTime := min(floor(b, cl.cfg, namespaces), floor(b, cl.cfg, namespaces))
	_, wall := timeBackup(b, cl.c, "scale", namespaces)
	b.ReportMetric(float64(n), "items")
	b.ReportMetric(wall.Seconds(), "backup-s")
	b.ReportMetric(floorTime.Seconds(), "floor-s")
	b.ReportMetric(wall.Seconds()/floorTime.Seconds(), "x-floor")
	b.ReportMetric(float64(n)/wall.Seconds(), "items/s")
	b.ReportMetric(cl.manager.rssPeakMiB(b), "peak-rss-MiB")
}
