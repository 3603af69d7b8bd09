package repository

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSnapshotIdentityMatches(t *testing.T) {
	velero := SnapshotIdentity{SourcePrefix: "snapshot-pod-volume/kopia/shop/db-0/", Tags: map[string]string{"ns": "shop", "pod": "db-0"}}
	emptyDir := SnapshotIdentity{Tags: map[string]string{"pod-namespace": "shop", "pod": "db-0", "volume": "data"}}
	claim := SnapshotIdentity{Tags: map[string]string{"pvc-uid": "u-1"}}
	emptyDirSource := `/cairn/{"pod":"db-0","pod-namespace":"shop","volume":"data"}`
	for _, tc := range []struct {
		name   string
		of     SnapshotIdentity
		source string
		tags   map[string]string
		want   bool
	}{
		{"no identity: no snapshot", SnapshotIdentity{}, "/cairn/{}", nil, false},
		{"no identity: not even an untagged one", SnapshotIdentity{}, "", nil, false},
		{"Cairn, an emptyDir: the pod's namespace, name and volume", emptyDir, emptyDirSource,
			map[string]string{"pod-namespace": "shop", "pod": "db-0", "volume": "data"}, true},
		{"Cairn, another volume of the pod", emptyDir, `/cairn/{"pod":"db-0","pod-namespace":"shop","volume":"cache"}`,
			map[string]string{"pod-namespace": "shop", "pod": "db-0", "volume": "cache"}, false},
		{"Cairn, the volume of another pod", emptyDir, `/cairn/{"pod":"db-1","pod-namespace":"shop","volume":"data"}`,
			map[string]string{"pod-namespace": "shop", "pod": "db-1", "volume": "data"}, false},
		{"Cairn, a claim: its UID", claim, `/cairn/{"pvc-uid":"u-1"}`, map[string]string{"pvc-uid": "u-1"}, true},
		{"Cairn, another claim", claim, `/cairn/{"pvc-uid":"u-2"}`, map[string]string{"pvc-uid": "u-2"}, false},
		{"Cairn, an emptyDir's snapshot for a claim", claim, emptyDirSource,
			map[string]string{"pod-namespace": "shop", "pod": "db-0", "volume": "data"}, false},
		{"Velero v1.17+: the source names the namespace and pod", velero, "snapshot-pod-volume/kopia/shop/db-0/data", nil, true},
		{"Velero v1.12-v1.16: the node's path, and the tags name them", velero, "/host_pods/uid/volumes/kubernetes.io~empty-dir/data",
			map[string]string{"ns": "shop", "pod": "db-0", "volume": "data", "snapshot-uploader": "kopia"}, true},
		{"another pod's source", velero, "snapshot-pod-volume/kopia/shop/db-01/data", nil, false},
		{"another namespace's source", velero, "snapshot-pod-volume/kopia/other/db-0/data", map[string]string{"ns": "other", "pod": "db-0"}, false},
		{"one tag differs", velero, "/host_pods/uid/volumes/kubernetes.io~empty-dir/data", map[string]string{"ns": "other", "pod": "db-0"}, false},
		{"a tag is missing", velero, "/host_pods/uid/volumes/kubernetes.io~empty-dir/data", map[string]string{"pod": "db-0"}, false},
		{"tags only, none", SnapshotIdentity{Tags: map[string]string{"ns": "shop"}}, "", nil, false},
		{"a source prefix only: tags do not count", SnapshotIdentity{SourcePrefix: "x/"}, "y/", map[string]string{"ns": "shop"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.of.matches(tc.source, tc.tags); got != tc.want {
				t.Errorf("matches(%q, %v) = %v, want %v", tc.source, tc.tags, got, tc.want)
			}
		})
	}
}

// Restore writes a snapshot only when it is of what RestoreOptions.Of says, by its source or
// by the tags recorded on it, and writes nothing otherwise.
func TestRestoreChecksWhatTheSnapshotIsOf(t *testing.T) {
	f := newFixture(t)
	r := f.mustOpen(t)
	src := makeTree(t)
	res, err := r.Snapshot(t.Context(), src, map[string]string{"ns": "shop", "pod": "db-0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	source, err := r.SnapshotSource(t.Context(), res.ID)
	if err != nil || !strings.HasPrefix(source, "/cairn/") {
		t.Fatalf("SnapshotSource = %q, %v", source, err)
	}
	refused := filepath.Join(t.TempDir(), "refused")
	_, err = r.Restore(t.Context(), res.ID, refused, RestoreOptions{Of: SnapshotIdentity{SourcePrefix: "snapshot-pod-volume/kopia/shop/db-0/", Tags: map[string]string{"ns": "other", "pod": "db-0"}}})
	if err == nil || !strings.Contains(err.Error(), "not of snapshot-pod-volume/kopia/shop/db-0/... or tagged ns=other,pod=db-0: it is not restored") {
		t.Errorf("Restore of a snapshot of another pod: %v", err)
	}
	if entries, _ := os.ReadDir(refused); len(entries) > 0 {
		t.Errorf("a refused snapshot wrote %d entries", len(entries))
	}
	if _, err := r.Restore(t.Context(), res.ID, filepath.Join(t.TempDir(), "tagged"), RestoreOptions{Of: SnapshotIdentity{SourcePrefix: "snapshot-pod-volume/kopia/shop/db-0/", Tags: map[string]string{"ns": "shop", "pod": "db-0"}}}); err != nil {
		t.Errorf("Restore of a snapshot tagged with its pod: %v", err)
	}
}

// Restore writes nothing when it is not told what the snapshot must be of.
func TestRestoreRequiresAnIdentity(t *testing.T) {
	f := newFixture(t)
	r := f.mustOpen(t)
	res, err := r.Snapshot(t.Context(), makeTree(t), map[string]string{"pvc-uid": "u-1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "dst")
	_, err = r.Restore(t.Context(), res.ID, dst, RestoreOptions{})
	if err == nil || !strings.Contains(err.Error(), "the restore did not say what it must be of") {
		t.Errorf("Restore without an identity: %v", err)
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Errorf("a refused restore made its target: %v", err)
	}
}
