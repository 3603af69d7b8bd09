package backupsync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backupsync"
	"github.com/cairn-backup/cairn/internal/controller/stores"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// openGate is a startup recovery that has already run.
type openGate struct{}

func (openGate) Wait(context.Context) error { return nil }

// A synced backup whose status the API server refuses (a marker Cairn did not write) ends in
// FailedValidation saying why, and the pass goes on with the others to its end.
func TestSyncPassGoesOnWhenAStatusIsRefused(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC))
	dir := t.TempDir()
	fs, err := storage.NewFilesystem(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"fine", "refused"} {
		keys := storage.Layout{}.Backup("team", name)
		origin := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name, UID: types.UID("origin-" + name)}}
		m, err := backupsync.Marker(origin, cairnv1.BackupPhaseCompleted, "1.1.0", storage.ArchiveDigest{SHA256: "abc", Size: 1}, clk.Now(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := storage.WriteMetadata(ctx, fs, keys, m); err != nil {
			t.Fatal(err)
		}
	}
	bsl := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "dr", Namespace: "cairn-system"},
		Spec: cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, AccessMode: cairnv1.AccessModeReadOnly,
			Config: map[string]string{cairnv1.ConfigKeyPath: dir}, BackupSyncPeriod: &metav1.Duration{Duration: time.Hour}},
		Status: cairnv1.BackupStorageLocationStatus{Phase: cairnv1.StorageLocationPhaseAvailable}}
	team := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}
	scheme := testenv.Scheme()
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(bsl, team).
		WithStatusSubresource(&cairnv1.Backup{}, &cairnv1.BackupStorageLocation{}).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if b, ok := obj.(*cairnv1.Backup); ok && b.Name == "refused" && b.Status.Phase == cairnv1.BackupPhaseCompleted {
					return apierrors.NewInvalid(schema.GroupKind{Group: "cairn.dev", Kind: "Backup"}, b.Name,
						field.ErrorList{field.TooLong(field.NewPath("status", "formatVersion"), "", 16)})
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		}).Build()
	r := &Reconciler{Client: c, Namespace: "cairn-system", DefaultPeriod: time.Minute,
		Stores: stores.Stores{Client: c, Namespace: "cairn-system"}, Clock: clk, Recorder: events.NewFakeRecorder(100),
		Gate: openGate{}, Catalog: &backupsync.Catalog{}}

	res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(bsl)})
	if err != nil || res.RequeueAfter != time.Hour {
		t.Fatalf("Reconcile = %+v, %v; want the next pass in an hour", res, err)
	}
	var fine, refused cairnv1.Backup
	if err := c.Get(ctx, types.NamespacedName{Namespace: "team", Name: "fine"}, &fine); err != nil {
		t.Fatal(err)
	}
	if fine.Status.Phase != cairnv1.BackupPhaseCompleted || fine.Status.OriginUID != "origin-fine" {
		t.Errorf("fine: status %+v, want Completed from its marker", fine.Status)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "team", Name: "refused"}, &refused); err != nil {
		t.Fatal(err)
	}
	if refused.Status.Phase != cairnv1.BackupPhaseFailedValidation || refused.Status.StorageLocation != "dr" ||
		len(refused.Status.ValidationErrors) != 1 || !strings.Contains(refused.Status.ValidationErrors[0], "status.formatVersion") {
		t.Errorf("refused: status %+v, want FailedValidation with the API server's message", refused.Status)
	}
	var got cairnv1.BackupStorageLocation
	if err := c.Get(ctx, client.ObjectKeyFromObject(bsl), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.LastSyncedTime == nil {
		t.Error("the pass did not reach its end: no lastSyncedTime")
	}
}

// lockedStore fails every read of one key, as a store does for an object the credentials may
// not read.
type lockedStore struct {
	storage.ObjectStore
	locked string
}

func (s lockedStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if key == s.locked {
		return nil, errors.New("AccessDenied: the credentials may not read this object")
	}
	return s.ObjectStore.Get(ctx, key)
}

// TestSyncPassSkipsAMarkerItCannotRead: one marker the storage refuses to read is skipped and
// reported; the pass syncs the others and reaches its end.
func TestSyncPassSkipsAMarkerItCannotRead(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC))
	dir := t.TempDir()
	fs, err := storage.NewFilesystem(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"fine", "locked"} {
		origin := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name, UID: types.UID("origin-" + name)}}
		m, err := backupsync.Marker(origin, cairnv1.BackupPhaseCompleted, "1.1.0", storage.ArchiveDigest{SHA256: "abc", Size: 1}, clk.Now(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := storage.WriteMetadata(ctx, fs, storage.Layout{}.Backup("team", name), m); err != nil {
			t.Fatal(err)
		}
	}
	bsl := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "dr", Namespace: "cairn-system"},
		Spec: cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, AccessMode: cairnv1.AccessModeReadOnly,
			Config: map[string]string{cairnv1.ConfigKeyPath: dir}, BackupSyncPeriod: &metav1.Duration{Duration: time.Hour}},
		Status: cairnv1.BackupStorageLocationStatus{Phase: cairnv1.StorageLocationPhaseAvailable}}
	scheme := testenv.Scheme()
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(bsl, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}).
		WithStatusSubresource(&cairnv1.Backup{}, &cairnv1.BackupStorageLocation{}).Build()
	recorder := events.NewFakeRecorder(100)
	locked := storage.Layout{}.Backup("team", "locked").Metadata
	r := &Reconciler{Client: c, Namespace: "cairn-system", DefaultPeriod: time.Minute,
		Stores: stores.Stores{Client: c, Namespace: "cairn-system", Wrap: func(_ *cairnv1.BackupStorageLocation, s storage.ObjectStore) storage.ObjectStore {
			return lockedStore{ObjectStore: s, locked: locked}
		}}, Clock: clk, Recorder: recorder, Gate: openGate{}, Catalog: &backupsync.Catalog{}}

	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(bsl)}); err != nil {
		t.Fatalf("Reconcile: %v; want the pass to go on past the marker it cannot read", err)
	}
	var fine cairnv1.Backup
	if err := c.Get(ctx, types.NamespacedName{Namespace: "team", Name: "fine"}, &fine); err != nil || fine.Status.Phase != cairnv1.BackupPhaseCompleted {
		t.Errorf("fine: %v, status %+v; want Completed", err, fine.Status)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "team", Name: "locked"}, &cairnv1.Backup{}); !apierrors.IsNotFound(err) {
		t.Errorf("locked: %v; want no object for a marker that could not be read", err)
	}
	var got cairnv1.BackupStorageLocation
	if err := c.Get(ctx, client.ObjectKeyFromObject(bsl), &got); err != nil || got.Status.LastSyncedTime == nil {
		t.Errorf("the pass did not reach its end: %v, %+v", err, got.Status)
	}
	reported := false
	for len(recorder.Events) > 0 {
		if e := <-recorder.Events; strings.Contains(e, "team/locked") && strings.Contains(e, "AccessDenied") {
			reported = true
		}
	}
	if !reported {
		t.Error("no event names the marker that could not be read")
	}
}

// listingStore lists only key by key (its List fails, as holding every key of a large location
// would) and records the deadline its listing was given. more, when set, hands out further
// keys after the store's own.
type listingStore struct {
	storage.ObjectStore
	deadline *time.Time
	more     func(yield func(string) bool)
}

func (s listingStore) List(context.Context, string) ([]string, error) {
	return nil, errors.New("List holds every key of the location in memory: use ListFunc")
}

func (s listingStore) ListFunc(ctx context.Context, prefix string, fn func(string) error) error {
	*s.deadline, _ = ctx.Deadline()
	if err := s.ObjectStore.(storage.Lister).ListFunc(ctx, prefix, fn); err != nil || s.more == nil {
		return err
	}
	for key := range s.more {
		if err := fn(key); err != nil {
			return err
		}
	}
	return nil
}

// syncOneMarker is a read-only location "dr" holding the marker of team/fine, a fake client
// with it and namespace team, and a reconciler whose stores are wrapped by wrap.
func syncOneMarker(t *testing.T, timeout time.Duration, wrap func(storage.ObjectStore) storage.ObjectStore) (*Reconciler, client.Client, *cairnv1.BackupStorageLocation, *events.FakeRecorder) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC))
	dir := t.TempDir()
	fs, err := storage.NewFilesystem(dir)
	if err != nil {
		t.Fatal(err)
	}
	origin := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "fine", UID: "origin-fine"}}
	m, err := backupsync.Marker(origin, cairnv1.BackupPhaseCompleted, "1.1.0", storage.ArchiveDigest{SHA256: "abc", Size: 1}, clk.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := storage.WriteMetadata(context.Background(), fs, storage.Layout{}.Backup("team", "fine"), m); err != nil {
		t.Fatal(err)
	}
	bsl := &cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "dr", Namespace: "cairn-system"},
		Spec: cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, AccessMode: cairnv1.AccessModeReadOnly,
			Config: map[string]string{cairnv1.ConfigKeyPath: dir}, BackupSyncPeriod: &metav1.Duration{Duration: time.Hour}},
		Status: cairnv1.BackupStorageLocationStatus{Phase: cairnv1.StorageLocationPhaseAvailable}}
	scheme := testenv.Scheme()
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(bsl, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}).
		WithStatusSubresource(&cairnv1.Backup{}, &cairnv1.BackupStorageLocation{}).Build()
	recorder := events.NewFakeRecorder(100)
	r := &Reconciler{Client: c, Namespace: "cairn-system", DefaultPeriod: time.Minute,
		Stores: stores.Stores{Client: c, Namespace: "cairn-system", Timeout: timeout, Wrap: func(_ *cairnv1.BackupStorageLocation, s storage.ObjectStore) storage.ObjectStore {
			return wrap(s)
		}}, Clock: clk, Recorder: recorder, Gate: openGate{}, Catalog: &backupsync.Catalog{}}
	return r, c, bsl, recorder
}

// The pass lists the location through the store's ListFunc, key by key, never with one List
// of everything; and that listing has its own timeout, longer than the small calls'.
func TestSyncPassListsKeyByKeyWithItsOwnTimeout(t *testing.T) {
	ctx := context.Background()
	var deadline time.Time
	r, c, bsl, _ := syncOneMarker(t, time.Second, func(s storage.ObjectStore) storage.ObjectStore {
		return listingStore{ObjectStore: s, deadline: &deadline}
	})
	start := time.Now()
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(bsl)}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	var fine cairnv1.Backup
	if err := c.Get(ctx, types.NamespacedName{Namespace: "team", Name: "fine"}, &fine); err != nil || fine.Status.Phase != cairnv1.BackupPhaseCompleted {
		t.Errorf("fine: %v, status %+v; want Completed", err, fine.Status)
	}
	if got := deadline.Sub(start); got < stores.ListTimeoutFactor*time.Second {
		t.Errorf("the listing was given %s; want %d times the 1s storage timeout", got, stores.ListTimeoutFactor)
	}
}

// A location with more committed backups than a pass considers is not synced: the pass fails
// with ErrTooManyBackups, makes no Backup, and a Warning event on the location says why.
func TestSyncPassRefusesTooManyBackups(t *testing.T) {
	ctx := context.Background()
	var deadline time.Time
	r, c, bsl, recorder := syncOneMarker(t, 0, func(s storage.ObjectStore) storage.ObjectStore {
		return listingStore{ObjectStore: s, deadline: &deadline, more: func(yield func(string) bool) {
			for i := range storage.MaxCommittedBackups {
				if !yield(storage.Layout{}.Backup("team", fmt.Sprintf("b%d", i)).Metadata) {
					return
				}
			}
		}}
	})
	_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(bsl)})
	if !errors.Is(err, storage.ErrTooManyBackups) {
		t.Fatalf("Reconcile: %v; want ErrTooManyBackups", err)
	}
	var backups cairnv1.BackupList
	if err := c.List(ctx, &backups); err != nil || len(backups.Items) != 0 {
		t.Errorf("the pass made %d backups (%v); want none", len(backups.Items), err)
	}
	reported := false
	for len(recorder.Events) > 0 {
		if e := <-recorder.Events; strings.Contains(e, "TooManyBackups") && strings.Contains(e, "more than 100000") {
			reported = true
		}
	}
	if !reported {
		t.Error("no Warning event says the location holds too many backups")
	}
}
