package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/blobproxy"
	"github.com/cairn-backup/cairn/internal/controller/nodeagent"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/repository"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// The volume-data benchmark (issues 28 and 29, "Measure"): a directory of 200 MiB of random
// bytes and 10,000 files of 4 KiB is copied twice into a new repository in a filesystem
// location, through the blob proxy, by a child process that does what the node agent does for
// one PodVolumeBackup (open the repository through the proxy, snapshot, close), so that its peak
// RSS is its own. The floor is tar | sha256sum over the same directory. Then the first snapshot
// is restored into an empty directory, as the node agent does for one PodVolumeRestore (open
// the repository read-only through the proxy, restore, close), with the agent's restore
// parallelism and with more; the floor is tar -xf of a tar of the same directory into an
// empty one.

const (
	volumeBigFileBytes  = 200 << 20
	volumeSmallFiles    = 10_000
	volumeSmallFileSize = 4 << 10
	volumeSmallPerDir   = 100

	// volumeGoMemLimit is the chart's nodeAgent.gomemlimit, set in the child as the chart sets it.
	volumeGoMemLimit = "200MiB"

	volumeToken     = "bench-token"
	volumeLocation  = "default"
	volumeNamespace = "shop"
	volumeOperator  = "cairn-system"

	// volumeCopyEnv holds the child's copyRequest; volumeProfileEnv, when set in the
	// benchmark's environment, names a directory where each copy writes a CPU profile
	// (first.pprof, second.pprof), and the benchmark the proxy's during the first (proxy.pprof).
	volumeCopyEnv    = "CAIRN_BENCH_VOLUME_COPY"
	volumeProfileEnv = "CAIRN_BENCH_VOLUMES_PROFILE_DIR"
)

// copyRequest is what the child copies, and where it writes its copyResult.
type copyRequest struct {
	URL, TokenFile, ConfigDir, Dir, Password, Out string
	// Idle: open nothing, only exit (the binary's own peak RSS).
	Idle bool
	// Restore, when set, is the snapshot the child restores into Dir (which must be empty)
	// instead of copying Dir, Parallel files at once (0: the node agent's default).
	Restore  string
	Parallel int
	// CPUProfile, if set, is where the child writes a CPU profile of the copy.
	CPUProfile string
}

// copyResult is what the child measured of its copy (SnapshotSeconds: of its restore, for a
// restore).
type copyResult struct {
	OpenSeconds, SnapshotSeconds, CloseSeconds float64
	SnapshotID, Parent                         string
	Bytes, Files, UploadedBytes                int64
	// PeakRSSMiB is the child's own peak RSS, VmHWM in /proc/self/status, read as it ends.
	// Not the parent's rusage of it: Go starts a child with vfork, and Linux carries the
	// memory high-water mark of the (shared) parent into the child's ru_maxrss at exec, so
	// ru_maxrss was never below the benchmark process's own RSS at that moment.
	PeakRSSMiB float64
}

// copyRun is one child's copy, with what the parent measured of its process and of itself.
type copyRun struct {
	copyResult
	// CopyCPUSeconds is the child's CPU time (user + system); ProxyCPUSeconds the benchmark
	// process's own while the child ran: the blob proxy's, and little else.
	CopyCPUSeconds, ProxyCPUSeconds float64
}

// seconds is the copy as the node agent makes it: open, snapshot, close.
func (r copyRun) seconds() float64 { return r.OpenSeconds + r.SnapshotSeconds + r.CloseSeconds }

// TestVolumeCopyChild is the child process of BenchmarkVolumes200MiBAnd10kFiles; without its
// environment variable it does nothing.
func TestVolumeCopyChild(t *testing.T) {
	raw := os.Getenv(volumeCopyEnv)
	if raw == "" {
		t.Skip("run by BenchmarkVolumes200MiBAnd10kFiles")
	}
	var req copyRequest
	if err := json.Unmarshal([]byte(raw), &req); err != nil {
		t.Fatal(err)
	}
	if req.Idle {
		writeCopyResult(t, req, copyResult{})
		return
	}
	if req.CPUProfile != "" {
		f, err := os.Create(req.CPUProfile)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	ctx := context.Background()
	open := nodeagent.ProxyRepositories(req.URL, "", req.TokenFile, req.ConfigDir)
	start := time.Now()
	repo, err := open(ctx, cairnv1.RepositoryReference{StorageLocation: volumeLocation, Namespace: volumeNamespace}, req.Password, req.Restore != "")
	if err != nil {
		t.Fatal(err)
	}
	opened := time.Now()
	var out copyResult
	tags := map[string]string{"pvc": "bench-data"}
	if req.Restore != "" {
		// What the node agent's restore does (nodeagent's Agent.restore), into an empty directory.
		res, err := repo.Restore(ctx, req.Restore, req.Dir, repository.RestoreOptions{Overwrite: true, Parallel: req.Parallel, Of: repository.SnapshotIdentity{Tags: tags}})
		if err != nil {
			_ = repo.Close()
			t.Fatal(err)
		}
		out.Bytes, out.Files = res.Bytes, res.Files
	} else {
		res, err := repo.Snapshot(ctx, req.Dir, tags, nil)
		if err != nil {
			_ = repo.Close()
			t.Fatal(err)
		}
		out.SnapshotID, out.Parent, out.Bytes, out.Files, out.UploadedBytes = res.ID, res.Parent, res.Bytes, res.Files, res.UploadedBytes
	}
	worked := time.Now()
	if err := repo.Close(); err != nil {
		t.Fatal(err)
	}
	out.OpenSeconds, out.SnapshotSeconds, out.CloseSeconds = opened.Sub(start).Seconds(), worked.Sub(opened).Seconds(), time.Since(worked).Seconds()
	writeCopyResult(t, req, out)
}

// writeCopyResult writes out, with the process's peak RSS, where req says.
func writeCopyResult(t *testing.T, req copyRequest, out copyResult) {
	t.Helper()
	var err error
	if out.PeakRSSMiB, err = peakRSSMiB("/proc/self/status"); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(req.Out, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// staticAuthenticator accepts one token as the chart's node agent.
type staticAuthenticator string

func (a staticAuthenticator) Authenticate(_ context.Context, token string) (string, error) {
	if token != string(a) {
		return "", blobproxy.ErrRefused
	}
	return blobproxy.DefaultNodeAgentUser, nil
}

func BenchmarkVolumes200MiBAnd10kFiles(b *testing.B) {
	for b.Loop() {
		benchmarkVolumes(b)
	}
}

func benchmarkVolumes(b *testing.B) {
	work := b.TempDir()
	data := filepath.Join(work, "data")
	dataBytes := writeVolumeData(b, data)

	// The manager's side: the proxy to a filesystem location, as the manager serves it.
	root := filepath.Join(work, "location")
	if err := os.Mkdir(root, 0o700); err != nil {
		b.Fatal(err)
	}
	bsl := &cairnv1.BackupStorageLocation{
		ObjectMeta: metav1.ObjectMeta{Name: volumeLocation, Namespace: volumeOperator},
		Spec: cairnv1.BackupStorageLocationSpec{
			Provider: cairnv1.StorageProviderFilesystem,
			Config:   map[string]string{cairnv1.ConfigKeyPath: root},
		},
	}
	reader := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(bsl).Build()
	srv := blobproxy.NewServer(blobproxy.LocationBackends{Reader: reader, Namespace: volumeOperator},
		staticAuthenticator(volumeToken), blobproxy.NewLocks(0, nil))
	hs := httptest.NewServer(srv) // 127.0.0.1
	defer hs.Close()
	defer srv.Close()
	tokenFile := filepath.Join(work, "token")
	if err := os.WriteFile(tokenFile, []byte(volumeToken+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	configDir := filepath.Join(work, "config")
	if err := os.Mkdir(configDir, 0o700); err != nil {
		b.Fatal(err)
	}
	req := copyRequest{URL: hs.URL, TokenFile: tokenFile, ConfigDir: configDir, Dir: data, Password: "bench-password"}

	// The manager creates the repository before it asks for a copy into it (node agents never
	// initialise one): as repositories.Service.Prepare does, here, untimed.
	initRepository(b, reader, bsl, req.Password, configDir)

	// The floor, before and after the copies; the faster is the bar (both read from the page
	// cache, as the copies do: the data was just written).
	floorBefore := floorSeconds(b, data)
	idle := runCopy(b, work, copyRequest{Idle: true})
	stopProfile := profileProxy(b)
	first := runCopy(b, work, withProfile(req, "first"))
	stopProfile()
	repoBytes := dirBytes(b, root)
	second := runCopy(b, work, withProfile(req, "second"))
	floorAfter := floorSeconds(b, data)
	floor := min(floorBefore, floorAfter)

	if first.Bytes != dataBytes || second.Bytes != dataBytes || first.Files != volumeSmallFiles+1 {
		b.Fatalf("snapshots hold %d and %d bytes (%d files), want %d bytes and %d files",
			first.Bytes, second.Bytes, first.Files, dataBytes, volumeSmallFiles+1)
	}
	if first.Parent != "" || second.Parent != first.SnapshotID {
		b.Fatalf("parents: first %q, second %q; want none and %s", first.Parent, second.Parent, first.SnapshotID)
	}

	mb := float64(dataBytes) / 1e6
	b.Logf("floor %.2f s then %.2f s; first copy open %.2f s, snapshot %.2f s, close %.2f s; second open %.2f s, snapshot %.2f s, close %.2f s",
		floorBefore, floorAfter, first.OpenSeconds, first.SnapshotSeconds, first.CloseSeconds,
		second.OpenSeconds, second.SnapshotSeconds, second.CloseSeconds)
	b.ReportMetric(mb, "data-MB")
	b.ReportMetric(floor, "floor-s")
	b.ReportMetric(mb/floor, "floor-MB/s")
	b.ReportMetric(first.seconds(), "first-s")
	b.ReportMetric(first.OpenSeconds, "first-open-s")
	b.ReportMetric(first.SnapshotSeconds, "first-snapshot-s")
	b.ReportMetric(mb/first.seconds(), "first-MB/s")
	b.ReportMetric(mb/first.SnapshotSeconds, "first-snapshot-MB/s")
	b.ReportMetric(floor/first.seconds(), "first-of-floor")
	b.ReportMetric(float64(first.UploadedBytes)/(1<<20), "first-uploaded-MiB")
	b.ReportMetric(float64(repoBytes)/(1<<20), "repository-MiB")
	b.ReportMetric(first.PeakRSSMiB, "first-peak-rss-MiB")
	b.ReportMetric(first.CopyCPUSeconds, "first-copy-cpu-s")
	b.ReportMetric(first.ProxyCPUSeconds, "first-proxy-cpu-s")
	b.ReportMetric(second.seconds(), "second-s")
	b.ReportMetric(second.OpenSeconds, "second-open-s")
	b.ReportMetric(second.SnapshotSeconds, "second-snapshot-s")
	b.ReportMetric(first.seconds()/second.seconds(), "second-speedup-x")
	b.ReportMetric(first.SnapshotSeconds/second.SnapshotSeconds, "second-snapshot-speedup-x")
	b.ReportMetric(float64(second.UploadedBytes), "second-uploaded-bytes")
	b.ReportMetric(second.PeakRSSMiB, "second-peak-rss-MiB")
	b.ReportMetric(idle.PeakRSSMiB, "idle-child-rss-MiB")

	// The restore of the first snapshot into an empty directory, with the node agent's
	// parallelism (RestoreParallelism 0: the repository's default) and with 8, next to its
	// floor: tar -xf of a tar of the same directory, before and after, the faster.
	tarball := filepath.Join(work, "data.tar")
	if out, err := exec.Command("tar", "-cf", tarball, "-C", data, ".").CombinedOutput(); err != nil {
		b.Fatalf("tar -cf: %v: %s", err, out)
	}
	extractBefore := extractSeconds(b, tarball, filepath.Join(work, "extracted-before"))
	restored := runCopy(b, work, restoreRequest(b, req, first.SnapshotID, filepath.Join(work, "restored"), 0, "restore"))
	expectSameTree(b, data, filepath.Join(work, "restored"))
	restored8 := runCopy(b, work, restoreRequest(b, req, first.SnapshotID, filepath.Join(work, "restored-8"), 8, "restore-8"))
	expectSameTree(b, data, filepath.Join(work, "restored-8"))
	extractAfter := extractSeconds(b, tarball, filepath.Join(work, "extracted-after"))
	extract := min(extractBefore, extractAfter)
	for _, r := range []copyRun{restored, restored8} {
		if r.Bytes != dataBytes || r.Files != volumeSmallFiles+1 {
			b.Fatalf("a restore wrote %d bytes in %d files, want %d bytes in %d files", r.Bytes, r.Files, dataBytes, volumeSmallFiles+1)
		}
	}
	b.Logf("tar -xf %.2f s then %.2f s; restore open %.2f s, restore %.2f s, close %.2f s; with 8 at once: open %.2f s, restore %.2f s",
		extractBefore, extractAfter, restored.OpenSeconds, restored.SnapshotSeconds, restored.CloseSeconds, restored8.OpenSeconds, restored8.SnapshotSeconds)
	b.ReportMetric(extract, "extract-floor-s")
	b.ReportMetric(mb/extract, "extract-floor-MB/s")
	b.ReportMetric(restored.seconds(), "restore-s")
	b.ReportMetric(restored.OpenSeconds, "restore-open-s")
	b.ReportMetric(restored.SnapshotSeconds, "restore-call-s")
	b.ReportMetric(mb/restored.seconds(), "restore-MB/s")
	b.ReportMetric(extract/restored.seconds(), "restore-of-floor")
	b.ReportMetric(restored.PeakRSSMiB, "restore-peak-rss-MiB")
	b.ReportMetric(restored.CopyCPUSeconds, "restore-cpu-s")
	b.ReportMetric(restored.ProxyCPUSeconds, "restore-proxy-cpu-s")
	b.ReportMetric(restored8.seconds(), "restore-p8-s")
	b.ReportMetric(mb/restored8.seconds(), "restore-p8-MB/s")
	b.ReportMetric(extract/restored8.seconds(), "restore-p8-of-floor")
	b.ReportMetric(restored8.PeakRSSMiB, "restore-p8-peak-rss-MiB")
}

// restoreRequest is req turned into the restore of snapshot id into the new directory target,
// parallel files at once, profiled as name.
func restoreRequest(b *testing.B, req copyRequest, id, target string, parallel int, name string) copyRequest {
	b.Helper()
	if err := os.Mkdir(target, 0o700); err != nil {
		b.Fatal(err)
	}
	req = withProfile(req, name)
	req.Dir, req.Restore, req.Parallel = target, id, parallel
	return req
}

// extractSeconds times tar -xf of tarball into the new directory target: every file written,
// nothing read but the tar (from the page cache).
func extractSeconds(b *testing.B, tarball, target string) float64 {
	b.Helper()
	if err := os.Mkdir(target, 0o700); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("tar", "-xf", tarball, "-C", target)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		b.Fatalf("tar -xf: %v: %s", err, stderr.String())
	}
	return time.Since(start).Seconds()
}

// expectSameTree fails the benchmark unless got holds the files of want with the same sizes,
// modes and contents (compared byte for byte).
func expectSameTree(b *testing.B, want, got string) {
	b.Helper()
	n := 0
	err := filepath.WalkDir(want, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(want, path)
		if err != nil {
			return err
		}
		wi, err := d.Info()
		if err != nil {
			return err
		}
		gi, err := os.Lstat(filepath.Join(got, rel))
		if err != nil {
			return err
		}
		if wi.Mode() != gi.Mode() || (wi.Mode().IsRegular() && wi.Size() != gi.Size()) {
			return fmt.Errorf("%s: mode %v size %d, want %v and %d", rel, gi.Mode(), gi.Size(), wi.Mode(), wi.Size())
		}
		if !wi.Mode().IsRegular() {
			return nil
		}
		n++
		w, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		g, err := os.ReadFile(filepath.Join(got, rel))
		if err != nil {
			return err
		}
		if !bytes.Equal(w, g) {
			return fmt.Errorf("%s: contents differ", rel)
		}
		return nil
	})
	if err != nil {
		b.Fatalf("the restored tree %s: %v", got, err)
	}
	if n != volumeSmallFiles+1 {
		b.Fatalf("the restored tree %s: %d files compared, want %d", got, n, volumeSmallFiles+1)
	}
}

// withProfile sets req's CPU profile to name.pprof in the directory volumeProfileEnv names, if any.
// initRepository initialises the volume repository of the benchmark's namespace in bsl.
func initRepository(b *testing.B, reader client.Reader, bsl *cairnv1.BackupStorageLocation, password, configDir string) {
	b.Helper()
	st, _, err := location.KopiaStorage(b.Context(), reader, bsl, volumeNamespace)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = st.Close(b.Context()) }()
	dir, err := os.MkdirTemp(configDir, "init-")
	if err != nil {
		b.Fatal(err)
	}
	r, err := repository.Open(b.Context(), repository.Options{Storage: st, Password: password, Hostname: "cairn", Username: "manager", ConfigDir: dir})
	if err != nil {
		b.Fatal(err)
	}
	if err := r.Close(); err != nil {
		b.Fatal(err)
	}
}

func withProfile(req copyRequest, name string) copyRequest {
	if dir := os.Getenv(volumeProfileEnv); dir != "" {
		req.CPUProfile = filepath.Join(dir, name+".pprof")
	}
	return req
}

// profileProxy profiles the benchmark's own process (the blob proxy) into proxy.pprof in the
// directory volumeProfileEnv names, if any, until the returned func is called.
func profileProxy(b *testing.B) func() {
	dir := os.Getenv(volumeProfileEnv)
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, "proxy.pprof"))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}

// cpuSeconds is the user + system time of a rusage.
func cpuSeconds(ru *syscall.Rusage) float64 {
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// writeVolumeData writes the benchmark's volume into dir: one file of volumeBigFileBytes
// random bytes and volumeSmallFiles random files of volumeSmallFileSize, volumeSmallPerDir to
// a directory. It returns the bytes written.
func writeVolumeData(b *testing.B, dir string) int64 {
	b.Helper()
	rng := rand.NewChaCha8([32]byte{28})
	buf := make([]byte, 4<<20)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "big.bin"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	for written := 0; written < volumeBigFileBytes; written += len(buf) {
		_, _ = rng.Read(buf)
		if _, err := f.Write(buf[:min(len(buf), volumeBigFileBytes-written)]); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	small := make([]byte, volumeSmallFileSize)
	for i := range volumeSmallFiles {
		sub := filepath.Join(dir, "small", fmt.Sprintf("d%03d", i/volumeSmallPerDir))
		if i%volumeSmallPerDir == 0 {
			if err := os.MkdirAll(sub, 0o700); err != nil {
				b.Fatal(err)
			}
		}
		_, _ = rng.Read(small)
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%05d", i)), small, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	return volumeBigFileBytes + volumeSmallFiles*volumeSmallFileSize
}

// floorSeconds times tar -cf - DIR | sha256sum: every file read and hashed, nothing written.
func floorSeconds(b *testing.B, dir string) float64 {
	b.Helper()
	cmd := exec.Command("bash", "-o", "pipefail", "-c", `tar -cf - -C "$1" . | sha256sum >/dev/null`, "floor", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		b.Fatalf("tar | sha256sum: %v: %s", err, stderr.String())
	}
	return time.Since(start).Seconds()
}

// runCopy runs req in a child process (this test binary, running TestVolumeCopyChild) with
// the chart's GOMEMLIMIT, and returns its result and its peak RSS.
func runCopy(b *testing.B, work string, req copyRequest) copyRun {
	b.Helper()
	out, err := os.CreateTemp(work, "copy-*.json")
	if err != nil {
		b.Fatal(err)
	}
	_ = out.Close()
	req.Out = out.Name()
	raw, err := json.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestVolumeCopyChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "GOMEMLIMIT="+volumeGoMemLimit, volumeCopyEnv+"="+string(raw))
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	var before, after syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &before); err != nil {
		b.Fatal(err)
	}
	if err := cmd.Run(); err != nil {
		b.Fatalf("copy: %v\n%s", err, output.String())
	}
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &after); err != nil {
		b.Fatal(err)
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		b.Fatal("no rusage for the child")
	}
	run := copyRun{
		CopyCPUSeconds:  cpuSeconds(ru),
		ProxyCPUSeconds: cpuSeconds(&after) - cpuSeconds(&before),
	}
	res, err := os.ReadFile(req.Out)
	if err != nil {
		b.Fatalf("copy result: %v\n%s", err, output.String())
	}
	if err := json.Unmarshal(res, &run.copyResult); err != nil {
		b.Fatal(err)
	}
	return run
}

// dirBytes is the size of the files under dir.
func dirBytes(b *testing.B, dir string) int64 {
	b.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		n += fi.Size()
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}
