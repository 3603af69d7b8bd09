package location_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/location"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func loc(name string, isDefault bool, age time.Duration) cairnv1.BackupStorageLocation {
	return cairnv1.BackupStorageLocation{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "cairn-system", CreationTimestamp: metav1.NewTime(t0.Add(-age))},
		Spec:       cairnv1.BackupStorageLocationSpec{Default: isDefault},
	}
}

func TestDefaults(t *testing.T) {
	deleting := loc("deleting", true, 3*time.Hour)
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	tests := []struct {
		name            string
		locs            []cairnv1.BackupStorageLocation
		wantDefault     string
		wantConflicting []string
	}{
		{name: "none", locs: nil},
		{name: "no default", locs: []cairnv1.BackupStorageLocation{loc("a", false, 0)}},
		{name: "one default", locs: []cairnv1.BackupStorageLocation{loc("a", false, time.Hour), loc("b", true, 0)}, wantDefault: "b"},
		{name: "two defaults: the older wins", locs: []cairnv1.BackupStorageLocation{loc("new", true, time.Minute), loc("old", true, time.Hour)},
			wantDefault: "old", wantConflicting: []string{"old", "new"}},
		{name: "same age: by name", locs: []cairnv1.BackupStorageLocation{loc("b", true, 0), loc("a", true, 0)},
			wantDefault: "a", wantConflicting: []string{"a", "b"}},
		{name: "a location being deleted is not the default", locs: []cairnv1.BackupStorageLocation{deleting, loc("b", true, 0)}, wantDefault: "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			def, conflicting := location.Defaults(tt.locs)
			got := ""
			if def != nil {
				got = def.Name
			}
			if got != tt.wantDefault || strings.Join(conflicting, ",") != strings.Join(tt.wantConflicting, ",") {
				t.Errorf("Defaults = %q, %v; want %q, %v", got, conflicting, tt.wantDefault, tt.wantConflicting)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	locs := []cairnv1.BackupStorageLocation{loc("a", false, 0), loc("main", true, 0)}
	tests := []struct {
		name, ask string
		locs      []cairnv1.BackupStorageLocation
		want      string
		wantErr   string
	}{
		{name: "named", ask: "a", locs: locs, want: "a"},
		{name: "default", ask: "", locs: locs, want: "main"},
		{name: "missing", ask: "zzz", locs: locs, wantErr: `storage location "zzz" does not exist in namespace cairn-system`},
		{name: "no default", ask: "", locs: locs[:1], wantErr: "no default storage location in namespace cairn-system"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := location.Resolve(tt.locs, "cairn-system", tt.ask)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got.Name != tt.want {
				t.Fatalf("Resolve = %v, %v; want %s", got, err, tt.want)
			}
		})
	}
}

func TestOpenConfigErrors(t *testing.T) {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "cairn-system"},
		Data:       map[string][]byte{"cloud": []byte("[default]\naws_access_key_id=a\naws_secret_access_key=b\n")},
	}
	reader := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(secret).Build()
	s3 := func(mut func(*cairnv1.BackupStorageLocationSpec)) *cairnv1.BackupStorageLocation {
		l := loc("s3", false, 0)
		l.Spec.Provider = cairnv1.StorageProviderS3
		l.Spec.ObjectStorage = &cairnv1.ObjectStorage{Bucket: "b"}
		l.Spec.Config = map[string]string{"endpoint": "http://127.0.0.1:1"}
		l.Spec.Credential = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "cloud"}
		mut(&l.Spec)
		return &l
	}
	tests := []struct {
		name    string
		bsl     *cairnv1.BackupStorageLocation
		wantErr string
	}{
		{name: "good s3", bsl: s3(func(*cairnv1.BackupStorageLocationSpec) {})},
		{name: "bad bool", bsl: s3(func(s *cairnv1.BackupStorageLocationSpec) { s.Config["forcePathStyle"] = "yes please" }),
			wantErr: `config.forcePathStyle must be true or false, not "yes please"`},
		{name: "missing key", bsl: s3(func(s *cairnv1.BackupStorageLocationSpec) { s.Credential.Key = "other" }),
			wantErr: `credential secret cairn-system/creds has no key "other"`},
		{name: "missing secret", bsl: s3(func(s *cairnv1.BackupStorageLocationSpec) { s.Credential.Name = "gone" }),
			wantErr: "credential secret cairn-system/gone does not exist"},
		{name: "wrong profile", bsl: s3(func(s *cairnv1.BackupStorageLocationSpec) { s.Config["profile"] = "prod" }),
			wantErr: "has no [prod] profile"},
		{name: "no bucket", bsl: s3(func(s *cairnv1.BackupStorageLocationSpec) { s.ObjectStorage = nil }),
			wantErr: "an s3 location needs objectStorage.bucket"},
		{name: "unknown provider", bsl: s3(func(s *cairnv1.BackupStorageLocationSpec) { s.Provider = "swift" }),
			wantErr: `unknown provider "swift"`},
		{name: "object lock on a filesystem location", bsl: func() *cairnv1.BackupStorageLocation {
			l := loc("fs", false, 0)
			l.Spec.Provider = cairnv1.StorageProviderFilesystem
			l.Spec.Config = map[string]string{"path": t.TempDir()}
			l.Spec.ObjectLock = &cairnv1.LocationObjectLock{Mode: cairnv1.ObjectLockModeCompliance, MinRetention: metav1.Duration{Duration: time.Hour}}
			return &l
		}(), wantErr: "spec.objectLock needs an s3, azure or gcs location"},
		{name: "filesystem without path", bsl: func() *cairnv1.BackupStorageLocation {
			l := loc("fs", false, 0)
			l.Spec.Provider = cairnv1.StorageProviderFilesystem
			return &l
		}(), wantErr: "a filesystem location needs config.path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := location.Open(context.Background(), reader, tt.bsl)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Open = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, location.ErrConfig) {
				t.Fatalf("Open = %v, want an ErrConfig containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestOpenReadOnlyRefusesWritesButReads(t *testing.T) {
	dir := t.TempDir()
	l := loc("fs", false, 0)
	l.Spec.Provider = cairnv1.StorageProviderFilesystem
	l.Spec.Config = map[string]string{"path": dir}
	l.Spec.ObjectStorage = &cairnv1.ObjectStorage{Prefix: "cluster-a"}
	rw, err := location.Open(context.Background(), nil, &l)
	if err != nil {
		t.Fatal(err)
	}
	keys := rw.Layout.Backup("ns", "b")
	if keys.Logs != "cluster-a/backups/ns/b/b-logs.gz" {
		t.Errorf("the layout ignores the prefix: %s", keys.Logs)
	}
	if err := rw.Put(context.Background(), keys.Logs, strings.NewReader("log")); err != nil {
		t.Fatal(err)
	}
	l.Spec.AccessMode = cairnv1.AccessModeReadOnly
	ro, err := location.Open(context.Background(), nil, &l)
	if err != nil {
		t.Fatal(err)
	}
	if err := ro.Put(context.Background(), keys.Archive, strings.NewReader("x")); !errors.Is(err, storage.ErrReadOnly) {
		t.Errorf("Put = %v, want ErrReadOnly", err)
	}
	if err := ro.Delete(context.Background(), keys.Logs); !errors.Is(err, storage.ErrReadOnly) {
		t.Errorf("Delete = %v, want ErrReadOnly", err)
	}
	if ok, err := ro.Exists(context.Background(), keys.Logs); !ok || err != nil {
		t.Errorf("Exists = %v, %v", ok, err)
	}
}

// A location with spec.objectLock is Unavailable on a bucket without Object Lock, saying so,
// and locks nothing unless asked; on a bucket with it, its store has the lock, in its mode.
func TestOpenObjectLock(t *testing.T) {
	server := testenv.StartVersionedS3Server(t)
	server.CreateLockedBucket("locked")
	server.CreateBucket("plain")
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "cairn-system"},
		Data:       map[string][]byte{"cloud": []byte(server.CredentialsFile())},
	}
	reader := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(secret).Build()
	open := func(bucket string, lock *cairnv1.LocationObjectLock) *location.Store {
		t.Helper()
		l := loc("s3-"+bucket, false, 0)
		l.Spec.Provider = cairnv1.StorageProviderS3
		l.Spec.ObjectStorage = &cairnv1.ObjectStorage{Bucket: bucket}
		l.Spec.Config = map[string]string{"endpoint": server.Endpoint(), "forcePathStyle": "true"}
		l.Spec.Credential = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "cloud"}
		l.Spec.ObjectLock = lock
		store, err := location.Open(context.Background(), reader, &l)
		if err != nil {
			t.Fatal(err)
		}
		return store
	}
	governance := &cairnv1.LocationObjectLock{Mode: cairnv1.ObjectLockModeGovernance, MinRetention: metav1.Duration{Duration: 48 * time.Hour}}
	if err := open("plain", governance).Validate(context.Background()); err == nil || !strings.Contains(err.Error(), `bucket "plain" at `+server.Endpoint()+` does not have Object Lock enabled`) {
		t.Errorf("a bucket without Object Lock: %v", err)
	}
	if store := open("plain", nil); store.Lock != nil || store.Validate(context.Background()) != nil {
		t.Errorf("a location without objectLock has a lock (%v) or is not valid", store.Lock)
	}
	store := open("locked", governance)
	if err := store.Validate(context.Background()); err != nil {
		t.Fatalf("a bucket with Object Lock: %v", err)
	}
	if store.Lock == nil || store.Lock.Mode != storage.LockGovernance || store.Lock.MinRetention != 48*time.Hour {
		t.Fatalf("the store's lock: %+v", store.Lock)
	}
}
