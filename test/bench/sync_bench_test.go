package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/backupsync"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/storage"
)

// countingStore counts the calls a reconciler makes to a store, and times its Lists.
type countingStore struct {
	storage.ObjectStore
	lists, gets  atomic.Int64
	mu           sync.Mutex
	lastListTook time.Duration
}

func (s *countingStore) List(ctx context.Context, prefix string) ([]string, error) {
	start := time.Now()
	keys, err := s.ObjectStore.List(ctx, prefix)
	s.mu.Lock()
	s.lastListTook = time.Since(start)
	s.mu.Unlock()
	s.lists.Add(1)
	return keys, err
}

func (s *countingStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	s.gets.Add(1)
	return s.ObjectStore.Get(ctx, key)
}

// apiWrites is how many write requests (POST, PUT, PATCH, DELETE) the API server has served,
// by resource and subresource ("backups", "backups/status", "events", ...), read from its own
// metrics.
func apiWrites(b *testing.B, cfg *rest.Config) map[string]float64 {
	b.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	label := func(line, name string) string {
		_, rest, ok := strings.Cut(line, name+`="`)
		if !ok {
			return ""
		}
		v, _, _ := strings.Cut(rest, `"`)
		return v
	}
	writes := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		switch label(line, "verb") {
		case "POST", "PUT", "PATCH", "DELETE":
		default:
			continue
		}
		key := label(line, "resource")
		if sub := label(line, "subresource"); sub != "" {
			key += "/" + sub
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			b.Fatal(err)
		}
		writes[key] += v
	}
	return writes
}

// writesSince is how many writes were made since before, in all and to some resources.
func writesSince(before, after map[string]float64, resources ...string) float64 {
	total := 0.0
	for key, v := range after {
		if len(resources) == 0 || slices.Contains(resources, key) {
			total += v - before[key]
		}
	}
	return total
}

// BenchmarkSync2000 puts 2,000 committed backups (each with the six objects a backup stores,
// in 20 namespaces) into a filesystem location, creates that location in a cluster that has
// none of them, and reports the time until all 2,000 Backup objects are Completed, and the API
// writes it took per backup. Then it makes the sync pass once more with nothing changed and
// reports what that pass cost: storage calls and API writes.
func BenchmarkSync2000(b *testing.B) {
	const n, namespaces = 2000, 20
	var store *countingStore
	cl := startClusterWith(b, controller.Config{Namespace: operatorNamespace, ConcurrentBackups: 1, ItemBlockWorkerCount: 1,
		Controllers: []string{"queue", "storagelocation", "sync"},
		WrapStore: func(bsl *cairnv1.BackupStorageLocation, s storage.ObjectStore) storage.ObjectStore {
			if bsl.Name != "dr" {
				return s
			}
			store.ObjectStore = s // every open sees the same directory
			return store
		}})
	defer cl.stop()
	ctx := context.Background()

	dir := b.TempDir()
	fs, err := storage.NewFilesystem(dir)
	if err != nil {
		b.Fatal(err)
	}
	store = &countingStore{ObjectStore: fs}
	for i := range namespaces {
		mustCreate(b, cl.c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("sync-%02d", i)}})
	}
	start := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	inParallel(n, func(i int) {
		ns, name := fmt.Sprintf("sync-%02d", i%namespaces), fmt.Sprintf("nightly-%04d", i)
		keys := storage.Layout{}.Backup(ns, name)
		for _, key := range []string{keys.Logs, keys.ResourceList, keys.Results, keys.ItemOperations} {
			if err := fs.Put(ctx, key, strings.NewReader("x")); err != nil {
				b.Error(err)
			}
		}
		digest, err := storage.PutArchive(ctx, fs, keys.Archive, strings.NewReader("archive of "+name))
		if err != nil {
			b.Error(err)
			return
		}
		origin := &cairnv1.Backup{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(fmt.Sprintf("origin-%04d", i)),
				Labels: map[string]string{cairnv1.ScheduleNameLabel: "nightly"}},
			Spec:   cairnv1.BackupSpec{TTL: &metav1.Duration{Duration: 720 * time.Hour}},
			Status: cairnv1.BackupStatus{StartTimestamp: &start, Progress: cairnv1.NewBackupProgress(50, 50)},
		}
		m, err := backupsync.Marker(origin, cairnv1.BackupPhaseCompleted, archive.FormatVersion, digest, start.Add(time.Minute), 0)
		if err != nil {
			b.Error(err)
			return
		}
		if err := storage.WriteMetadata(ctx, fs, keys, m); err != nil {
			b.Error(err)
		}
	})
	if b.Failed() {
		return
	}

	before := apiWrites(b, cl.cfg)
	created := time.Now()
	mustCreate(b, cl.c, &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "dr", Namespace: operatorNamespace},
		Spec: cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, AccessMode: cairnv1.AccessModeReadOnly,
			Config: map[string]string{"path": dir}, BackupSyncPeriod: &metav1.Duration{Duration: time.Hour}}})
	for deadline := created.Add(5 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		var list cairnv1.BackupList
		if err := cl.c.List(ctx, &list); err != nil {
			b.Fatal(err)
		}
		done := 0
		for _, bk := range list.Items {
			if bk.Status.Phase == cairnv1.BackupPhaseCompleted {
				done++
			}
		}
		if done == n {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d backups synced after 5 minutes", done, n)
		}
	}
	took := time.Since(created)
	// The writes that follow the last status write (the location's event and lastSyncedTime).
	time.Sleep(2 * time.Second)
	after := apiWrites(b, cl.cfg)
	b.ReportMetric(took.Seconds(), "sync-s")
	b.ReportMetric(writesSince(before, after, "backups", "backups/status")/n, "backup-writes/backup")
	// All writes, less the benchmark's own create of the location.
	b.ReportMetric((writesSince(before, after)-1)/n, "api-writes/backup")
	b.ReportMetric(float64(store.lists.Load()), "first-pass-lists")
	b.ReportMetric(float64(store.gets.Load()), "first-pass-gets")

	// Passes with nothing changed: the location is synced every 3 s from now on (and no longer
	// validated, so that the storage location reconciler writes nothing meanwhile); the pass
	// measured is a periodic one, after the one the change itself brings.
	var bsl cairnv1.BackupStorageLocation
	if err := cl.c.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: "dr"}, &bsl); err != nil {
		b.Fatal(err)
	}
	patch := client.MergeFrom(bsl.DeepCopy())
	bsl.Spec.BackupSyncPeriod = &metav1.Duration{Duration: 3 * time.Second}
	bsl.Spec.ValidationFrequency = &metav1.Duration{}
	if err := cl.c.Patch(ctx, &bsl, patch); err != nil {
		b.Fatal(err)
	}
	nextPass := func(lists int64) {
		for deadline := time.Now().Add(time.Minute); store.lists.Load() == lists; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatal("no sync pass within a minute")
			}
		}
	}
	nextPass(store.lists.Load())
	time.Sleep(time.Second) // the validation the change brought, and the pass's writes, if any
	lists, gets := store.lists.Load(), store.gets.Load()
	before = apiWrites(b, cl.cfg)
	nextPass(lists)
	time.Sleep(time.Second)
	after = apiWrites(b, cl.cfg)
	store.mu.Lock()
	listTook := store.lastListTook
	store.mu.Unlock()
	b.ReportMetric(float64(store.lists.Load()-lists), "idle-pass-lists")
	b.ReportMetric(float64(store.gets.Load()-gets), "idle-pass-gets")
	b.ReportMetric(writesSince(before, after), "idle-pass-api-writes")
	b.ReportMetric(float64(listTook.Milliseconds()), "idle-pass-list-ms")
}
