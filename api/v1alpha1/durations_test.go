package v1alpha1_test

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// These tests need no API server: they check the generated CRDs against the Go types, and the
// duration pattern against Go's parser.

// Every duration field is bounded the same way (docs/validation.md).
const (
	durationMaxLength = 32
	durationUpperRule = "duration(self) <= duration('87600h')"
)

// durationUpperBound is an upper bound of at most durationUpperRule's 87600h, written in
// hours (a hook's timeout is bounded at 1h).
var durationUpperBound = regexp.MustCompile(`duration\(self\) <= duration\('([0-9]{1,5})h'\)`)

// boundedAbove reports whether rule bounds the duration at 87600h or less.
func boundedAbove(rule string) bool {
	m := durationUpperBound.FindStringSubmatch(rule)
	if m == nil {
		return false
	}
	hours, err := strconv.Atoi(m[1])
	return err == nil && hours <= 87600
}

// A duration rule first checks the value against a pattern, and parses it only if it matches:
// CEL's && does not evaluate the right side once the left is false. The ttl rule first lets
// "0" through (never expire), which the pattern, requiring a unit, would refuse.
var durationGuard = regexp.MustCompile(`^(?:self == '0' \|\| \()?self != '' && self\.matches\('([^']+)'\) && `)

// crdSchema is the part of an OpenAPI schema these tests read.
type crdSchema struct {
	Type        string               `json:"type"`
	MaxLength   *int64               `json:"maxLength"`
	Properties  map[string]crdSchema `json:"properties"`
	Items       *crdSchema           `json:"items"`
	Validations []struct {
		Rule    string `json:"rule"`
		Message string `json:"message"`
	} `json:"x-kubernetes-validations"`
}

// loadCRDSchemas reads every generated CRD: the v1alpha1 schema of each kind.
func loadCRDSchemas(t *testing.T) map[string]crdSchema {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(testenv.CRDDir(), "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in %s: %v", testenv.CRDDir(), err)
	}
	schemas := map[string]crdSchema{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		js, err := yaml.ToJSON(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var crd struct {
			Spec struct {
				Names    struct{ Kind string } `json:"names"`
				Versions []struct {
					Name   string `json:"name"`
					Schema struct {
						OpenAPIV3Schema crdSchema `json:"openAPIV3Schema"`
					} `json:"schema"`
				} `json:"versions"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(js, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, v := range crd.Spec.Versions {
			if v.Name == cairnv1.GroupVersion.Version {
				schemas[crd.Spec.Names.Kind] = v.Schema.OpenAPIV3Schema
			}
		}
	}
	return schemas
}

// durationPaths returns the JSON paths (dot-separated, "[]" for list items) of every
// metav1.Duration field under t, following Cairn's own types only.
func durationPaths(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		if t.Kind() == reflect.Slice {
			prefix += "[]"
		}
		t = t.Elem()
	}
	if t == reflect.TypeFor[metav1.Duration]() {
		return []string{prefix}
	}
	if t.Kind() != reflect.Struct || t.PkgPath() != reflect.TypeFor[cairnv1.Backup]().PkgPath() {
		return nil
	}
	var paths []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
			continue
		case name == "" && strings.Contains(opts, "inline") || name == "" && f.Anonymous:
			paths = append(paths, durationPaths(f.Type, prefix)...)
		default:
			paths = append(paths, durationPaths(f.Type, strings.TrimPrefix(prefix+"."+name, "."))...)
		}
	}
	return paths
}

// schemaAt finds the schema of a path from durationPaths.
func schemaAt(root crdSchema, path string) (crdSchema, bool) {
	s := root
	for _, part := range strings.Split(path, ".") {
		name := strings.TrimRight(part, "[]")
		next, ok := s.Properties[name]
		if !ok {
			return crdSchema{}, false
		}
		s = next
		for range strings.Count(part, "[]") {
			if s.Items == nil {
				return crdSchema{}, false
			}
			s = *s.Items
		}
	}
	return s, true
}

// cairnKinds are the root kinds of the API group (not their lists).
func cairnKinds(t *testing.T) map[string]reflect.Type {
	t.Helper()
	s := runtime.NewScheme()
	if err := cairnv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]reflect.Type{}
	for gvk, typ := range s.AllKnownTypes() {
		// The scheme also registers the meta kinds (ListOptions, ...) in the group version.
		own := typ.PkgPath() == reflect.TypeFor[cairnv1.Backup]().PkgPath()
		if own && gvk.GroupVersion() == cairnv1.GroupVersion && !strings.HasSuffix(gvk.Kind, "List") {
			kinds[gvk.Kind] = typ
		}
	}
	return kinds
}

// durationPattern is the pattern of the duration rules, the same in every one of them.
func durationPattern(t *testing.T) *regexp.Regexp {
	t.Helper()
	schemas := loadCRDSchemas(t)
	s, ok := schemaAt(schemas["Backup"], "spec.ttl")
	if !ok || len(s.Validations) == 0 {
		t.Fatal("Backup spec.ttl has no rule")
	}
	m := durationGuard.FindStringSubmatch(s.Validations[0].Rule)
	if m == nil {
		t.Fatalf("the ttl rule does not start with the pattern guard: %s", s.Validations[0].Rule)
	}
	return regexp.MustCompile(m[1])
}

// A duration that reaches the manager's informer unparseable stops it from listing the whole
// kind (issue 12): every duration of every kind must be bounded at admission.
func TestEveryDurationFieldIsBounded(t *testing.T) {
	schemas := loadCRDSchemas(t)
	pattern := durationPattern(t).String()
	found := 0
	for kind, typ := range cairnKinds(t) {
		root, ok := schemas[kind]
		if !ok {
			t.Errorf("no CRD for kind %s", kind)
			continue
		}
		for _, path := range durationPaths(typ, "") {
			found++
			s, ok := schemaAt(root, path)
			if !ok {
				t.Errorf("%s %s: not in the CRD schema", kind, path)
				continue
			}
			if s.MaxLength == nil || *s.MaxLength > durationMaxLength {
				t.Errorf("%s %s: maxLength %v, want at most %d", kind, path, s.MaxLength, durationMaxLength)
			}
			bounded := false
			for _, v := range s.Validations {
				m := durationGuard.FindStringSubmatch(v.Rule)
				if m != nil && m[1] == pattern && boundedAbove(v.Rule) && v.Message != "" {
					bounded = true
				}
			}
			if !bounded {
				t.Errorf("%s %s: no rule that checks the duration pattern before %q", kind, path, durationUpperRule)
			}
		}
	}
	// ttl, itemOperationTimeout, validationFrequency, backupSyncPeriod at least: the walk must
	// find them.
	if found < 4 {
		t.Errorf("found %d duration fields, want at least 4", found)
	}
}

// Whatever the pattern lets through, Go (and CEL, which uses Go's parser) can parse: the
// per-unit digit limits keep every component, and their sum, below the int64 nanoseconds a
// time.Duration holds.
func TestDurationPatternAdmitsOnlyParseableValues(t *testing.T) {
	re := durationPattern(t)

	// The largest value of every unit, all together, with long fractions, far past maxLength.
	worst := "99999.999999h9999999.999999m999999999.999999s999999999999.999999ms" +
		"999999999999999.999999µs999999999999999999.999999ns"
	if !re.MatchString(worst) {
		t.Fatalf("the pattern does not match %q", worst)
	}
	if _, err := time.ParseDuration(worst); err != nil {
		t.Fatalf("the pattern lets through %q, which Go cannot parse: %v", worst, err)
	}

	// One more digit in any unit is refused.
	for _, over := range []string{"100000h", "10000000m", "1000000000s", "1000000000000ms", "1000000000000000us", "1000000000000000000ns"} {
		if re.MatchString(over) {
			t.Errorf("the pattern lets through %q", over)
		}
	}

	// Random strings over the pattern's alphabet: every match parses.
	rng := rand.New(rand.NewPCG(12, 2026))
	alphabet := []string{"0", "1", "5", "9", "9", "9", ".", "h", "m", "s", "ms", "us", "µs", "ns"}
	matched := 0
	for range 200000 {
		var b strings.Builder
		for b.Len() < 1+rng.IntN(40) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		s := b.String()
		if !re.MatchString(s) {
			continue
		}
		matched++
		if _, err := time.ParseDuration(s); err != nil {
			t.Fatalf("the pattern lets through %q, which Go cannot parse: %v", s, err)
		}
	}
	// Random values built from the grammar, each unit at its digit limit.
	units := []struct {
		unit   string
		digits int
	}{{"h", 5}, {"m", 7}, {"s", 9}, {"ms", 12}, {"us", 15}, {"ns", 18}}
	for range 20000 {
		var b strings.Builder
		for _, u := range units {
			if rng.IntN(2) == 0 {
				continue
			}
			b.WriteString(strconv.FormatInt(rng.Int64N(pow10(u.digits)), 10))
			if rng.IntN(3) == 0 {
				b.WriteString("." + strconv.FormatInt(rng.Int64N(1e12), 10))
			}
			b.WriteString(u.unit)
		}
		s := b.String()
		if s == "" {
			continue
		}
		if !re.MatchString(s) {
			t.Fatalf("the pattern refuses %q", s)
		}
		matched++
		if _, err := time.ParseDuration(s); err != nil {
			t.Fatalf("the pattern lets through %q, which Go cannot parse: %v", s, err)
		}
	}
	if matched < 20000 {
		t.Errorf("only %d samples matched the pattern", matched)
	}
}

// Every duration a Go client writes (time.Duration.String) up to the upper bound matches.
func TestDurationPatternAcceptsGoFormattedDurations(t *testing.T) {
	re := durationPattern(t)
	rng := rand.New(rand.NewPCG(3, 4))
	limit := int64(87600 * time.Hour)
	for _, d := range []time.Duration{time.Second, 1500 * time.Millisecond, time.Minute, 720 * time.Hour, time.Duration(limit), time.Duration(limit - 1)} {
		if !re.MatchString(d.String()) {
			t.Errorf("the pattern refuses %q", d.String())
		}
	}
	for range 10000 {
		d := time.Duration(rng.Int64N(limit) + 1)
		if !re.MatchString(d.String()) {
			t.Fatalf("the pattern refuses %q", d.String())
		}
	}
}

func pow10(n int) int64 {
	p := int64(1)
	for range n {
		p *= 10
	}
	return p
}
