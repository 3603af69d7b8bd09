package selection

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
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
		{name: "a named namespace excluded by a wildcard", f: NamespaceFilter{Included: []string{"ns1", "kube-system"}, Excluded: []string{"kube-*"}}, want: NamespaceSet{Names: []string{"ns1"}}},
		{name: "a namespace named twice, and matched by a wildcard too", f: NamespaceFilter{Included: []string{"ns1", "ns?", "ns1"}}, want: NamespaceSet{Names: []string{"ns1", "ns2"}}},
		{name: "a character class", f: NamespaceFilter{Included: []string{"team-[a]"}}, want: NamespaceSet{Names: []string{"team-a"}}},
		{name: "every name excluded", f: NamespaceFilter{Included: []string{"ns1"}, Excluded: []string{"ns1"}}, want: NamespaceSet{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.f.Resolve(cluster); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Resolve = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestLiteralNames(t *testing.T) {
	tests := []struct {
		name   string
		f      NamespaceFilter
		want   []string
		wantOK bool
	}{
		{name: "names, sorted, without repeats", f: NamespaceFilter{Included: []string{"ns2", "ns1", "ns2"}}, want: []string{"ns1", "ns2"}, wantOK: true},
		{name: "names minus those excluded, by name or pattern", f: NamespaceFilter{Included: []string{"ns1", "kube-system", "ns2"}, Excluded: []string{"kube-*", "ns2"}},
			want: []string{"ns1"}, wantOK: true},
		{name: "every name excluded", f: NamespaceFilter{Included: []string{"ns1"}, Excluded: []string{"ns?"}}, wantOK: true},
		{name: "no filter is every namespace", f: NamespaceFilter{}},
		{name: "star is every namespace", f: NamespaceFilter{Included: []string{"ns1", "*"}}},
		{name: "a wildcard depends on the namespaces that exist", f: NamespaceFilter{Included: []string{"ns1", "team-*"}}},
		{name: "a question mark too", f: NamespaceFilter{Included: []string{"ns?"}}},
		{name: "a character class too", f: NamespaceFilter{Included: []string{"team-[ab]"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.f.LiteralNames()
			if !reflect.DeepEqual(got, tt.want) || ok != tt.wantOK {
				t.Errorf("LiteralNames = %q, %v; want %q, %v", got, ok, tt.want, tt.wantOK)
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

// overlapOf is whether a and b share a namespace, and which, as Claims holding only a says.
func overlapOf(a, b NamespaceSet) (overlaps bool, shared string) {
	var c Claims
	c.Add(a)
	_, shared, overlaps = c.FirstOverlap(b)
	return overlaps, shared
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
			got, shared := overlapOf(tt.a, tt.b)
			if got != tt.want || shared != tt.wantShared {
				t.Errorf("overlap = %v, %q; want %v, %q", got, shared, tt.want, tt.wantShared)
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

// resolveByScan is Resolve as its definition reads: every cluster namespace the filter
// matches, plus the namespaces named outright that it does not exclude.
func resolveByScan(f NamespaceFilter, clusterNamespaces []string) NamespaceSet {
	if f.SelectsAll() {
		return NamespaceSet{All: true}
	}
	seen := map[string]bool{}
	var names []string
	for _, ns := range clusterNamespaces {
		if f.Matches(ns) && !seen[ns] {
			seen[ns] = true
			names = append(names, ns)
		}
	}
	for _, p := range f.Included {
		if !strings.ContainsAny(p, `*?[\`) && f.Matches(p) && !seen[p] {
			seen[p] = true
			names = append(names, p)
		}
	}
	sort.Strings(names)
	return NamespaceSet{Names: names}
}

func TestResolveAgreesWithAScanOfEveryNamespace(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	unsorted := slices.Clone(cluster)
	slices.Reverse(unsorted)
	words := []string{"ns1", "ns2", "ns3", "team-a", "team-b", "kube-system", "future", "ns?", "team-*", "*-b", "n*", "kube-*", "[x", "t?am-[ab]", "team-[a]", "tools*", "z*"}
	pick := func() []string {
		var out []string
		for range rng.IntN(4) {
			out = append(out, words[rng.IntN(len(words))])
		}
		return out
	}
	for range 2000 {
		f := NamespaceFilter{Included: pick(), Excluded: pick()}
		if len(f.Included) == 0 {
			f.Included = []string{"ns1"}
		}
		want := resolveByScan(f, cluster)
		for _, namespaces := range [][]string{cluster, unsorted} {
			if got := f.Resolve(namespaces); !reflect.DeepEqual(got, want) {
				t.Fatalf("Resolve(%+v) against %v = %+v, a scan says %+v", f, namespaces, got, want)
			}
		}
	}
}

func TestClaimsFirstOverlap(t *testing.T) {
	set := func(names ...string) NamespaceSet { return NamespaceSet{Names: names} }
	all := NamespaceSet{All: true}
	tests := []struct {
		name       string
		claims     []NamespaceSet
		s          NamespaceSet
		wantOK     bool
		wantIndex  int
		wantShared string
	}{
		{name: "nothing recorded", s: all},
		{name: "disjoint", claims: []NamespaceSet{set("a"), set("b", "c")}, s: set("d")},
		{name: "the first set holding a shared namespace", claims: []NamespaceSet{set("a"), set("b", "c"), set("c")}, s: set("c", "d"),
			wantOK: true, wantIndex: 1, wantShared: "c"},
		{name: "the earliest set wins over the smallest namespace", claims: []NamespaceSet{set("z"), set("a")}, s: set("a", "z"),
			wantOK: true, wantIndex: 0, wantShared: "z"},
		{name: "the first namespace shared with that set", claims: []NamespaceSet{set("b"), set("a", "c", "d")}, s: set("c", "d"),
			wantOK: true, wantIndex: 1, wantShared: "c"},
		{name: "everything overlaps the first set", claims: []NamespaceSet{set(), set("a")}, s: all, wantOK: true, wantIndex: 0},
		{name: "a recorded set of everything", claims: []NamespaceSet{set("x"), all, set("a")}, s: set("a"), wantOK: true, wantIndex: 1},
		{name: "a set before the one of everything", claims: []NamespaceSet{set("a"), all}, s: set("a"), wantOK: true, wantIndex: 0, wantShared: "a"},
		{name: "empty sets overlap nothing", claims: []NamespaceSet{set(), set("a")}, s: set()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Claims
			for _, s := range tt.claims {
				c.Add(s)
			}
			i, shared, ok := c.FirstOverlap(tt.s)
			if ok != tt.wantOK || (ok && (i != tt.wantIndex || shared != tt.wantShared)) {
				t.Errorf("FirstOverlap = %d, %q, %v; want %d, %q, %v", i, shared, ok, tt.wantIndex, tt.wantShared, tt.wantOK)
			}
		})
	}
}

// TestClaimsAgreeWithOverlap checks FirstOverlap against the overlap with each recorded set in
// turn, on random sets.
func TestClaimsAgreeWithOverlap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	randomSet := func() NamespaceSet {
		if rng.IntN(15) == 0 {
			return NamespaceSet{All: true}
		}
		picked := map[string]bool{}
		for range rng.IntN(4) {
			picked[fmt.Sprintf("ns%02d", rng.IntN(20))] = true
		}
		var names []string
		for ns := range picked {
			names = append(names, ns)
		}
		sort.Strings(names)
		return NamespaceSet{Names: names}
	}
	for range 500 {
		var c Claims
		var recorded []NamespaceSet
		for range rng.IntN(12) {
			s := randomSet()
			c.Add(s)
			recorded = append(recorded, s)
		}
		for range 10 {
			s := randomSet()
			wantOK, wantIndex, wantShared := false, 0, ""
			for i, r := range recorded {
				if ok, shared := overlapOf(r, s); ok {
					wantOK, wantIndex, wantShared = true, i, shared
					break
				}
			}
			i, shared, ok := c.FirstOverlap(s)
			if ok != wantOK || i != wantIndex || shared != wantShared {
				t.Fatalf("FirstOverlap(%+v) over %+v = %d, %q, %v; set by set it is %d, %q, %v", s, recorded, i, shared, ok, wantIndex, wantShared, wantOK)
			}
		}
	}
}
