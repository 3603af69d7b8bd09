package queue

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/selection"
)

func backupSelecting(uid string, generation int64, included ...string) *cairnv1.Backup {
	return &cairnv1.Backup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "cairn-system", Name: uid, UID: types.UID(uid), Generation: generation},
		Spec:       cairnv1.BackupSpec{IncludedNamespaces: included},
	}
}

// sameSet reports whether two resolutions are one and the same (not resolved twice).
func sameSet(a, b selection.NamespaceSet) bool {
	return len(a.Names) > 0 && len(b.Names) > 0 && &a.Names[0] == &b.Names[0]
}

func TestResolutions(t *testing.T) {
	r := NewResolutions("cairn-system")
	teams := backupSelecting("teams", 1, "team-*")

	r.Begin([]string{"team-b", "team-a", "tools"})
	first := r.Resolve(teams)
	if want := (selection.NamespaceSet{Names: []string{"team-a", "team-b"}}); !reflect.DeepEqual(first, want) {
		t.Fatalf("Resolve = %+v, want %+v", first, want)
	}
	r.End()

	// The same namespaces, in another order: the backup is not resolved again.
	r.Begin([]string{"tools", "team-a", "team-b"})
	if again := r.Resolve(teams); !sameSet(again, first) {
		t.Errorf("the same backup and namespaces were resolved again")
	}
	r.End()

	// A new namespace: resolved again, and it is in.
	r.Begin([]string{"tools", "team-a", "team-b", "team-c"})
	if got := r.Resolve(teams); !reflect.DeepEqual(got.Names, []string{"team-a", "team-b", "team-c"}) {
		t.Errorf("after team-c was created, Resolve = %+v", got)
	}
	r.End()

	// A new generation of the same backup: resolved again.
	changed := backupSelecting("teams", 2, "tools")
	r.Begin([]string{"tools", "team-a", "team-b", "team-c"})
	if got := r.Resolve(changed); !reflect.DeepEqual(got.Names, []string{"tools"}) {
		t.Errorf("generation 2 resolves to %+v, want [tools]", got)
	}
	r.End()
}

func TestResolutionsForgetBackupsAPassDidNotAskAbout(t *testing.T) {
	r := NewResolutions("cairn-system")
	a, b := backupSelecting("a", 1, "ns1"), backupSelecting("b", 1, "ns2")
	r.Begin([]string{"ns1", "ns2"})
	r.Resolve(a)
	r.Resolve(b)
	r.End()
	if r.Len() != 2 {
		t.Fatalf("Len = %d after resolving two backups", r.Len())
	}
	r.Begin([]string{"ns1", "ns2"})
	r.Resolve(a) // b was deleted, or has started and finished
	r.End()
	if r.Len() != 1 {
		t.Errorf("Len = %d, want 1: the backup the pass did not ask about is remembered", r.Len())
	}
}

func TestResolutionsWithoutUID(t *testing.T) {
	r := NewResolutions("cairn-system")
	r.Begin([]string{"ns1"})
	team := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "x"}}
	if got := r.Resolve(team); !reflect.DeepEqual(got.Names, []string{"team-a"}) {
		t.Errorf("a team backup with no filter resolves to %+v, want its own namespace", got)
	}
	r.End()
	if r.Len() != 0 {
		t.Errorf("a backup with no UID was remembered")
	}
}
