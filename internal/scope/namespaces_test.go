package scope

import (
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

var cluster = []string{"default", "kube-system", "ns1", "ns2", "team-a", "team-b", "tools"}

func TestResolve(t *testing.T) {
	tests := []struct {
		name string
		f    NamespaceFilter
		want NamespaceSet
	}{
		{name: "no filter is everything", f: NamespaceFilter{}, want: NamespaceSet{All: true}},
		{name: "star is everything, even with exclusions", f: NamespaceFilter{Included: []string{"*"}, Excluded: []string{"ns1"}}, want: NamespaceSet{All: true}},
		{name: "names", f: NamespaceFilter{Included: []string{"ns2", "ns1"}}, want: NamespaceSet{Names: []string{"ns1", "ns2"}}},
		{name: "wildcard", f: NamespaceFilter{Included: []string{"team-*"}}, want: NamespaceSet{Names: []string{"team-a", "team-b"}}},
		{name: "question mark", f: NamespaceFilter{Included: []string{"ns?"}}, want: NamespaceSet{Names: []string{"ns1", "ns2"}}},
		{name: "wildcard minus exclusion", f: NamespaceFilter{Included: []string{"team-*", "ns1"}, Excluded: []string{"team-b"}}, want: NamespaceSet{Names: []string{"ns1", "team-a"}}},
		{name: "excluded wildcard", f: NamespaceFilter{Included: []string{"*-*"}, Excluded: []string{"kube-*"}}, want: NamespaceSet{Names: []string{"team-a", "team-b"}}},
		{name: "a named namespace that does not exist yet", f: NamespaceFilter{Included: []string{"future"}}, want: NamespaceSet{Names: []string{"future"}}},
		{name: "a wildcard that matches nothing", f: NamespaceFilter{Included: []string{"zzz-*"}}, want: NamespaceSet{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.f.Resolve(cluster); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Resolve = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestForBackupAppliesTheTenancyRule(t *testing.T) {
	team := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a"}}
	if got := ForBackup(team, "cairn-system").Resolve(cluster); !reflect.DeepEqual(got, NamespaceSet{Names: []string{"team-a"}}) {
		t.Errorf("a team backup with no filter selects %+v, want only its own namespace", got)
	}
	admin := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "cairn-system"}}
	if got := ForBackup(admin, "cairn-system").Resolve(cluster); !got.All {
		t.Errorf("an admin backup with no filter selects %+v, want everything", got)
	}
}

func TestOverlap(t *testing.T) {
	set := func(names ...string) NamespaceSet { return NamespaceSet{Names: names} }
	all := NamespaceSet{All: true}
	tests := []struct {
		name       string
		a, b       NamespaceSet
		want       bool
		wantShared string
	}{
		{name: "disjoint", a: set("ns1", "ns2"), b: set("ns3"), want: false},
		{name: "shared", a: set("ns1", "ns2"), b: set("ns2", "ns3", "ns5"), want: true, wantShared: "ns2"},
		{name: "all overlaps a set", a: all, b: set("ns9"), want: true},
		{name: "all overlaps all", a: all, b: all, want: true},
		{name: "all overlaps even an empty set", a: set(), b: all, want: true},
		{name: "empty sets do not overlap", a: set(), b: set(), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, shared := Overlap(tt.a, tt.b)
			if got != tt.want || shared != tt.wantShared {
				t.Errorf("Overlap = %v, %q; want %v, %q", got, shared, tt.want, tt.wantShared)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		f    NamespaceFilter
		want string
	}{
		{f: NamespaceFilter{Included: []string{"ns1", "team-*", "*", "n?"}, Excluded: []string{"kube-*"}}},
		{f: NamespaceFilter{Included: []string{"Bad_Name"}}, want: `spec.includedNamespaces: "Bad_Name" is not a valid namespace name`},
		{f: NamespaceFilter{Excluded: []string{"[abc"}}, want: `spec.excludedNamespaces: "[abc" is not a valid wildcard pattern`},
		{f: NamespaceFilter{Included: []string{"team_*"}}, want: `"team_*" may contain only lowercase letters, digits, '-', '*' and '?'`},
		{f: NamespaceFilter{Included: []string{""}}, want: `"" is empty`},
	}
	for _, tt := range tests {
		got := strings.Join(tt.f.Validate(), "; ")
		if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
			t.Errorf("Validate(%+v) = %q, want %q", tt.f, got, tt.want)
		}
	}
}
