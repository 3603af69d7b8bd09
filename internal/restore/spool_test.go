package restore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/restore"
	"github.com/cairn-backup/cairn/internal/storage"
)

func TestParseItemPath(t *testing.T) {
	long := strings.Repeat("a", 253)
	tests := []struct {
		entry         string
		wantGR        schema.GroupResource
		wantNamespace string
		wantName      string
		wantErr       string // a part of the error; "" when the entry is an item
	}{
		{entry: "resources/configmaps/namespaces/shop/settings.json", wantGR: schema.GroupResource{Resource: "configmaps"}, wantNamespace: "shop", wantName: "settings"},
		{entry: "resources/deployments.apps/namespaces/shop/web.json", wantGR: schema.GroupResource{Group: "apps", Resource: "deployments"}, wantNamespace: "shop", wantName: "web"},
		{entry: "resources/widgets.example.com/namespaces/shop/w1.json", wantGR: schema.GroupResource{Group: "example.com", Resource: "widgets"}, wantNamespace: "shop", wantName: "w1"},
		{entry: "resources/namespaces/cluster/shop.json", wantGR: schema.GroupResource{Resource: "namespaces"}, wantName: "shop"},
		{entry: "resources/customresourcedefinitions.apiextensions.k8s.io/cluster/widgets.example.com.json",
			wantGR: schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}, wantName: "widgets.example.com"},
		{entry: "resources/clusterroles.rbac.authorization.k8s.io/cluster/system:aggregate-to-admin.json",
			wantGR: schema.GroupResource{Group: "rbac.authorization.k8s.io", Resource: "clusterroles"}, wantName: "system:aggregate-to-admin"},
		{entry: "resources/configmaps/namespaces/shop/my.settings.json", wantGR: schema.GroupResource{Resource: "configmaps"}, wantNamespace: "shop", wantName: "my.settings"},
		{entry: "resources/persistentvolumes/cluster/" + long + ".json", wantGR: schema.GroupResource{Resource: "persistentvolumes"}, wantName: long},
		{entry: "resources/configmaps/namespaces/" + strings.Repeat("n", 63) + "/a.json", wantGR: schema.GroupResource{Resource: "configmaps"}, wantNamespace: strings.Repeat("n", 63), wantName: "a"},

		{entry: "../resources/configmaps/namespaces/shop/x.json", wantErr: "not an item entry"},
		{entry: "resources/../configmaps/namespaces/shop/x.json", wantErr: "no resource"},
		{entry: "resources/configmaps/namespaces/shop/../x.json", wantErr: "not an item entry"},
		{entry: "resources/configmaps/namespaces/../x.json", wantErr: "namespace"},
		{entry: "resources/deployments./namespaces/shop/web.json", wantErr: "an empty group"},
		{entry: "resources/configmaps/cluster/../x.json", wantErr: "not an item entry"},
		{entry: "/resources/configmaps/namespaces/shop/x.json", wantErr: "not an item entry"},
		{entry: "resources/configmaps/x.json", wantErr: "not an item entry"},
		{entry: "resources/configmaps/namespaces/shop.json", wantErr: "not an item entry"},
		{entry: "resources/configmaps/namespaces/shop/extra/x.json", wantErr: "not an item entry"},
		{entry: "resources/namespaces/cluster/a/b.json", wantErr: "not an item entry"},
		{entry: "resources/configmaps/clusters/x.json", wantErr: "not an item entry"},
		{entry: "resources/configmaps/elsewhere/shop/x.json", wantErr: "not an item entry"},
		{entry: "backups/configmaps/namespaces/shop/x.json", wantErr: "not an item entry"},
		{entry: archive.VersionPath, wantErr: "not an item entry"},
		{entry: "resources//namespaces/shop/x.json", wantErr: "no resource"},
		{entry: "resources/.apps/namespaces/shop/x.json", wantErr: "no resource"},
		{entry: "resources/configmaps/namespaces/Shop/x.json", wantErr: "namespace"},
		{entry: "resources/configmaps/namespaces/shop_a/x.json", wantErr: "namespace"},
		{entry: "resources/configmaps/namespaces/-shop/x.json", wantErr: "namespace"},
		{entry: "resources/configmaps/namespaces/shop.a/x.json", wantErr: "namespace"},
		{entry: "resources/configmaps/namespaces/" + strings.Repeat("n", 64) + "/x.json", wantErr: "namespace"},
		{entry: "resources/configmaps/namespaces//x.json", wantErr: "namespace"},
		{entry: "resources/configmaps/namespaces/shop/.json", wantErr: "not an object name"},
		{entry: "resources/namespaces/cluster/.json", wantErr: "not an object name"},
		{entry: "resources/configmaps/namespaces/shop/..json", wantErr: "not an object name"},
		{entry: "resources/configmaps/namespaces/shop/...json", wantErr: "not an object name"},
		{entry: "resources/namespaces/cluster/...json", wantErr: "not an object name"},
		{entry: "resources/persistentvolumes/cluster/" + long + "a.json", wantErr: "not an object name"},
		{entry: "resources/configmaps/namespaces/shop/x.yaml", wantErr: "not an item entry"},
		{entry: "resources/configmaps/namespaces/shop/x", wantErr: "not an item entry"},
		{entry: "resources/configmaps/namespaces/shop/x.json/", wantErr: "not an item entry"},
		{entry: "", wantErr: "not an item entry"},
	}
	for _, tt := range tests {
		t.Run(tt.entry, func(t *testing.T) {
			gr, namespace, name, err := restore.ParseItemPath(tt.entry)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), fmt.Sprintf("%q", tt.entry)) {
					t.Errorf("ParseItemPath = %v, %q, %q, %v; want an error naming the entry and saying %q", gr, namespace, name, err, tt.wantErr)
				}
				if gr != (schema.GroupResource{}) || namespace != "" || name != "" {
					t.Errorf("ParseItemPath refused the entry but returned %v, %q, %q", gr, namespace, name)
				}
				return
			}
			if err != nil || gr != tt.wantGR || namespace != tt.wantNamespace || name != tt.wantName {
				t.Errorf("ParseItemPath = %v, %q, %q, %v; want %v, %q, %q", gr, namespace, name, err, tt.wantGR, tt.wantNamespace, tt.wantName)
			}
			// What the archive writer writes, the parser reads back.
			if back := archive.ItemPath(gr.Resource, gr.Group, namespace, name); back != tt.entry {
				t.Errorf("archive.ItemPath of the parsed parts = %q, want %q", back, tt.entry)
			}
		})
	}
}

// spoolEntry is one entry of a test archive, written as it is.
type spoolEntry struct {
	name string
	data string
}

// spoolArchive writes entries (after metadata/version) into an archive, stores it in a
// filesystem store and returns the store, the key and the digest of the upload.
func spoolArchive(t *testing.T, entries []spoolEntry) (storage.ObjectStore, string, storage.ArchiveDigest) {
	t.Helper()
	var buf bytes.Buffer
	w, err := archive.NewWriter(&buf, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := w.AddEntry(e.name, []byte(e.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	store, err := storage.NewFilesystem(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	key := storage.Layout{}.Backup("shop", "b").Archive
	digest, err := storage.PutArchive(context.Background(), store, key, &buf)
	if err != nil {
		t.Fatal(err)
	}
	return store, key, digest
}

// spooledItems reads back every item of gr.
func spooledItems(t *testing.T, s *restore.Spool, gr schema.GroupResource) []restore.SpooledItem {
	t.Helper()
	var items []restore.SpooledItem
	if err := s.Each(gr, func(item restore.SpooledItem) error {
		items = append(items, item)
		return nil
	}); err != nil {
		t.Fatalf("Each(%s) = %v", gr, err)
	}
	return items
}

// assertEmptyDir fails unless dir exists and holds nothing.
func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		names := make([]string, len(left))
		for i, e := range left {
			names[i] = e.Name()
		}
		t.Errorf("%s holds %q, want nothing left on disk", dir, names)
	}
}

var (
	grConfigMaps  = schema.GroupResource{Resource: "configmaps"}
	grDeployments = schema.GroupResource{Group: "apps", Resource: "deployments"}
	grWidgets     = schema.GroupResource{Group: "example.com", Resource: "widgets"}
	grNamespaces  = schema.GroupResource{Resource: "namespaces"}
)

func TestSpoolReadsItemsBackPerResourceInArchiveOrder(t *testing.T) {
	pretty := "{\n  \"kind\": \"ConfigMap\",\n  \"data\": {\"k\": \"line one\\nline two\"}\n}\n"
	store, key, digest := spoolArchive(t, []spoolEntry{
		{archive.ItemPath("configmaps", "", "shop", "b-second"), `{"kind":"ConfigMap","metadata":{"name":"b-second"}}`},
		{archive.ItemPath("deployments", "apps", "shop", "web"), `{"kind":"Deployment"}`},
		{archive.ItemPath("namespaces", "", "", "shop"), `{"kind":"Namespace"}`},
		{archive.ItemPath("configmaps", "", "other", "a-first"), pretty},
		{archive.ItemPath("widgets", "example.com", "shop", "w1"), `{"kind":"Widget","spec":{"size":3}}`},
		{archive.ItemPath("configmaps", "", "shop", "settings"), `{"kind":"ConfigMap","metadata":{"name":"not-what-the-path-says","namespace":"elsewhere"}}`},
		{archive.ItemPath("namespaces", "", "", "other"), `{"kind":"Namespace"}`},
	})
	scratch := t.TempDir()
	s, err := restore.NewSpool(context.Background(), store, key, digest, scratch)
	if err != nil {
		t.Fatalf("NewSpool = %v", err)
	}
	defer s.Close()

	if s.FormatVersion != archive.FormatVersion {
		t.Errorf("FormatVersion = %q, want %q (metadata/version, trimmed)", s.FormatVersion, archive.FormatVersion)
	}
	if len(s.Problems) != 0 || s.MoreProblems != 0 {
		t.Errorf("Problems = %q (+%d), want none", s.Problems, s.MoreProblems)
	}
	if got, want := s.Resources(), []schema.GroupResource{grConfigMaps, grDeployments, grNamespaces, grWidgets}; !reflect.DeepEqual(got, want) {
		t.Errorf("Resources = %v, want %v (sorted)", got, want)
	}
	for gr, want := range map[schema.GroupResource]int{grConfigMaps: 3, grDeployments: 1, grNamespaces: 2, grWidgets: 1, {Resource: "secrets"}: 0} {
		if got := s.Count(gr); got != want {
			t.Errorf("Count(%s) = %d, want %d", gr, got, want)
		}
	}

	type placed struct{ namespace, name, object string }
	read := func(gr schema.GroupResource) []placed {
		var out []placed
		for _, item := range spooledItems(t, s, gr) {
			var obj map[string]any
			if err := json.Unmarshal(item.Object, &obj); err != nil {
				t.Fatalf("%s %s/%s: the object read back is not JSON: %v", gr, item.Namespace, item.Name, err)
			}
			canonical, _ := json.Marshal(obj)
			out = append(out, placed{item.Namespace, item.Name, string(canonical)})
		}
		return out
	}
	wantConfigMaps := []placed{
		{"shop", "b-second", `{"kind":"ConfigMap","metadata":{"name":"b-second"}}`},
		{"other", "a-first", `{"data":{"k":"line one\nline two"},"kind":"ConfigMap"}`},
		// The archive's placement names the item, whatever its own metadata says.
		{"shop", "settings", `{"kind":"ConfigMap","metadata":{"name":"not-what-the-path-says","namespace":"elsewhere"}}`},
	}
	if got := read(grConfigMaps); !reflect.DeepEqual(got, wantConfigMaps) {
		t.Errorf("configmaps read back:\n got %q\nwant %q", got, wantConfigMaps)
	}
	if got, want := read(grNamespaces), []placed{{"", "shop", `{"kind":"Namespace"}`}, {"", "other", `{"kind":"Namespace"}`}}; !reflect.DeepEqual(got, want) {
		t.Errorf("namespaces read back:\n got %q\nwant %q", got, want)
	}
	if got, want := read(grWidgets), []placed{{"shop", "w1", `{"kind":"Widget","spec":{"size":3}}`}}; !reflect.DeepEqual(got, want) {
		t.Errorf("widgets read back:\n got %q\nwant %q", got, want)
	}
	if got := read(schema.GroupResource{Resource: "secrets"}); len(got) != 0 {
		t.Errorf("a resource not in the archive read back %q", got)
	}
	// Reading a resource again gives the same items: the spool is read, not consumed.
	if got := read(grConfigMaps); !reflect.DeepEqual(got, wantConfigMaps) {
		t.Errorf("configmaps read a second time:\n got %q\nwant %q", got, wantConfigMaps)
	}

	errStop := errors.New("stop")
	calls := 0
	err = s.Each(grConfigMaps, func(restore.SpooledItem) error {
		calls++
		return errStop
	})
	if err != errStop || calls != 1 { //nolint:errorlint // returned as it is
		t.Errorf("Each with a failing callback = %v after %d calls, want its error after 1", err, calls)
	}

	if left, _ := os.ReadDir(scratch); len(left) != 1 {
		t.Errorf("the scratch directory holds %d entries, want the spool's one directory", len(left))
	}
	s.Close()
	assertEmptyDir(t, scratch)
	s.Close() // a second Close is harmless
}

func TestSpoolProblems(t *testing.T) {
	entries := []spoolEntry{
		{"notes.txt", "hello"},
		{"metadata/other", "x"},
		{"resources/configmaps/namespaces/Bad_NS/a.json", `{}`},
		{archive.ItemPath("configmaps", "", "shop", "not-json"), `{"kind":`},
		{archive.ItemPath("configmaps", "", "shop", "array"), `[{"kind":"ConfigMap"}]`},
		{archive.ItemPath("configmaps", "", "shop", "string"), `"ConfigMap"`},
		{archive.ItemPath("configmaps", "", "shop", "null"), `null`},
		{archive.ItemPath("configmaps", "", "shop", "empty"), ``},
		{archive.ItemPath("configmaps", "", "shop", "good"), ` {"kind":"ConfigMap"}`},
	}
	store, key, digest := spoolArchive(t, entries)
	s, err := restore.NewSpool(context.Background(), store, key, digest, t.TempDir())
	if err != nil {
		t.Fatalf("NewSpool = %v", err)
	}
	defer s.Close()
	if len(s.Problems) != len(entries)-1 || s.MoreProblems != 0 {
		t.Fatalf("Problems = %q (+%d), want one for each of the %d odd entries", s.Problems, s.MoreProblems, len(entries)-1)
	}
	for i, e := range entries[:len(entries)-1] {
		if !strings.Contains(s.Problems[i], e.name) {
			t.Errorf("problem %d = %q, want it to name %s", i, s.Problems[i], e.name)
		}
	}
	items := spooledItems(t, s, grConfigMaps)
	if len(items) != 1 || items[0].Name != "good" || s.Count(grConfigMaps) != 1 {
		t.Errorf("configmaps = %+v (count %d), want only the good one", items, s.Count(grConfigMaps))
	}
}

func TestSpoolProblemsAreBounded(t *testing.T) {
	const extra = 7
	var entries []spoolEntry
	for i := range restore.MaxSpoolProblems + extra {
		entries = append(entries, spoolEntry{fmt.Sprintf("resources/configmaps/namespaces/shop/bad-%d.yaml", i), "{}"})
		if i%10 == 0 {
			entries = append(entries, spoolEntry{archive.ItemPath("configmaps", "", "shop", fmt.Sprintf("good-%d", i)), `{"kind":"ConfigMap"}`})
		}
	}
	store, key, digest := spoolArchive(t, entries)
	s, err := restore.NewSpool(context.Background(), store, key, digest, t.TempDir())
	if err != nil {
		t.Fatalf("NewSpool = %v", err)
	}
	defer s.Close()
	if len(s.Problems) != restore.MaxSpoolProblems || s.MoreProblems != extra {
		t.Errorf("%d problems kept and %d more counted, want %d and %d", len(s.Problems), s.MoreProblems, restore.MaxSpoolProblems, extra)
	}
	if !strings.Contains(s.Problems[0], "bad-0.yaml") || !strings.Contains(s.Problems[restore.MaxSpoolProblems-1], fmt.Sprintf("bad-%d.yaml", restore.MaxSpoolProblems-1)) {
		t.Errorf("the problems kept are not the first ones: %q ... %q", s.Problems[0], s.Problems[len(s.Problems)-1])
	}
	if got, want := s.Count(grConfigMaps), (restore.MaxSpoolProblems+extra+9)/10; got != want {
		t.Errorf("%d good items spooled, want %d", got, want)
	}
}

// midReadFailingStore serves objects through readers that fail after half of their bytes.
type midReadFailingStore struct {
	storage.ObjectStore
	err error
}

func (s midReadFailingStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := s.ObjectStore.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(rc)
	_ = rc.Close()
	if err != nil {
		return nil, err
	}
	return io.NopCloser(io.MultiReader(bytes.NewReader(data[:len(data)/2]), errorReader{s.err})), nil
}

type errorReader struct{ err error }

func (e errorReader) Read([]byte) (int, error) { return 0, e.err }

func TestSpoolLeavesNothingOnDiskWhenTheArchiveIsNotTheCommittedOne(t *testing.T) {
	var entries []spoolEntry
	for i := range 50 {
		entries = append(entries,
			spoolEntry{archive.ItemPath("configmaps", "", "shop", fmt.Sprintf("cm-%d", i)), fmt.Sprintf(`{"kind":"ConfigMap","data":{"i":"%d"}}`, i)},
			spoolEntry{archive.ItemPath("secrets", "", "shop", fmt.Sprintf("s-%d", i)), fmt.Sprintf(`{"kind":"Secret","data":{"i":"%d"}}`, i)})
	}
	errConn := errors.New("connection reset by peer")
	tests := []struct {
		name   string
		change func(t *testing.T, store storage.ObjectStore, key string) storage.ObjectStore
		want   error
	}{
		{name: "a flipped byte", want: storage.ErrChecksumMismatch, change: func(t *testing.T, store storage.ObjectStore, key string) storage.ObjectStore {
			data := readAll(t, store, key)
			data[len(data)*2/3] ^= 0x01
			mustPutBytes(t, store, key, data)
			return store
		}},
		{name: "a flipped byte in the gzip trailer", want: storage.ErrChecksumMismatch, change: func(t *testing.T, store storage.ObjectStore, key string) storage.ObjectStore {
			data := readAll(t, store, key)
			data[len(data)-3] ^= 0x01
			mustPutBytes(t, store, key, data)
			return store
		}},
		{name: "truncated", want: storage.ErrChecksumMismatch, change: func(t *testing.T, store storage.ObjectStore, key string) storage.ObjectStore {
			data := readAll(t, store, key)
			mustPutBytes(t, store, key, data[:len(data)-100])
			return store
		}},
		{name: "gone", want: storage.ErrNotFound, change: func(t *testing.T, store storage.ObjectStore, key string) storage.ObjectStore {
			if err := store.Delete(context.Background(), key); err != nil {
				t.Fatal(err)
			}
			return store
		}},
		{name: "the store failing mid-read", want: errConn, change: func(t *testing.T, store storage.ObjectStore, _ string) storage.ObjectStore {
			return midReadFailingStore{ObjectStore: store, err: errConn}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, key, digest := spoolArchive(t, entries)
			store = tt.change(t, store, key)
			scratch := t.TempDir()
			s, err := restore.NewSpool(context.Background(), store, key, digest, scratch)
			if !errors.Is(err, tt.want) || s != nil {
				t.Fatalf("NewSpool = %v, %v; want no spool and %v", s, err, tt.want)
			}
			if !errors.Is(tt.want, storage.ErrChecksumMismatch) && errors.Is(err, storage.ErrChecksumMismatch) {
				t.Errorf("NewSpool = %v: not a checksum mismatch", err)
			}
			assertEmptyDir(t, scratch)
		})
	}
}

func TestSpoolScratchDirectory(t *testing.T) {
	store, key, digest := spoolArchive(t, []spoolEntry{{archive.ItemPath("configmaps", "", "shop", "a"), `{"kind":"ConfigMap"}`}})
	t.Run("empty means the system's temporary directory", func(t *testing.T) {
		tmp := t.TempDir()
		t.Setenv("TMPDIR", tmp)
		s, err := restore.NewSpool(context.Background(), store, key, digest, "")
		if err != nil {
			t.Fatal(err)
		}
		if left, _ := os.ReadDir(tmp); len(left) != 1 {
			t.Errorf("the temporary directory holds %d entries, want the spool's directory", len(left))
		}
		s.Close()
		assertEmptyDir(t, tmp)
	})
	t.Run("a scratch directory that cannot be used", func(t *testing.T) {
		notADir := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(notADir, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if s, err := restore.NewSpool(context.Background(), store, key, digest, notADir); err == nil || s != nil {
			t.Errorf("NewSpool under a file = %v, %v; want an error", s, err)
		}
	})
}

func readAll(t *testing.T, store storage.ObjectStore, key string) []byte {
	t.Helper()
	rc, err := store.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func mustPutBytes(t *testing.T, store storage.ObjectStore, key string, data []byte) {
	t.Helper()
	if err := store.Put(context.Background(), key, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
}

func TestIsVersionedCopy(t *testing.T) {
	for entry, want := range map[string]bool{
		"resources/configmaps/v1-preferredversion/namespaces/shop/web.json":                                         true,
		"resources/deployments.apps/v1-preferredversion/namespaces/shop/web.json":                                   true,
		"resources/customresourcedefinitions.apiextensions.k8s.io/v1-preferredversion/cluster/widgets.example.json": true,
		"resources/widgets.example.com/v2beta1/namespaces/shop/blue.json":                                           true,
		"resources/configmaps/namespaces/shop/web.json":                                                             false,
		"resources/configmaps/namespaces/v1-preferredversion/web.json":                                              false, // a namespace of that name
		"resources/namespaces/cluster/v1.json":                                                                      false,
		"resources/configmaps/v1/other/shop/web.json":                                                               false,
		"resources/configmaps/version1/namespaces/shop/web.json":                                                    false,
		"metadata/version": false,
	} {
		if got := restore.IsVersionedCopy(entry); got != want {
			t.Errorf("IsVersionedCopy(%q) = %v, want %v", entry, got, want)
		}
	}
}
