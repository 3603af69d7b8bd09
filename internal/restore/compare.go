package restore

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// MaxDifferences is how many paths Differences names at most.
const MaxDifferences = 5

// Matches reports whether the existing object already is what the restore would create: every field of desired
// (ignoring status, the server-set metadata — uid, resourceVersion, generation, creationTimestamp, managedFields,
// ownerReferences, selfLink — and the cairn.dev/restore-name label) is present and equal in existing; maps compare
// recursively (existing may have more fields, e.g. server defaults or an assigned clusterIP), lists compare whole.
//
// The cairn.dev/backup-name label is ignored too: an object the restore did not make (an
// untouched object of a namespace restored again) has neither label, and is still the same
// object. Lists compare whole in that they must have the same length; their elements compare
// in order by the same rule, so a port whose nodePort the cluster assigned still matches the
// backed-up port whose nodePort was cleared. A null or empty map or list in desired matches an
// absent field, and numbers compare by value (3 and 3.0 are equal).
func Matches(desired, existing *unstructured.Unstructured) bool {
	return len(compare(desired, existing, 1)) == 0
}

// Differences names up to a few top-level paths where they differ, for the warning ("spec.replicas, data.key").
// Paths go down to where the two differ, at most MaxDifferences of them, in a stable order:
// "spec.replicas", `metadata.labels["app.kubernetes.io/name"]`, "spec.ports[0].port"; a path
// whose value has another type or, for lists, another length, ends there.
func Differences(desired, existing *unstructured.Unstructured) []string {
	return compare(desired, existing, MaxDifferences)
}

// UpdatePatch is the JSON merge patch that makes existing carry desired's fields (for existingResourcePolicy update):
// desired without status and server-set metadata; it never removes fields that only existing has
// (of a well-formed desired: a field that is an object in existing and a string in desired is
// replaced, and the API server refuses the result).
// It holds neither apiVersion and kind nor name and namespace (the request names the object),
// and no nulls outside lists (a null in a merge patch removes the field). Lists are replaced
// whole, as a merge patch does.
func UpdatePatch(desired *unstructured.Unstructured) ([]byte, error) {
	patch := withoutServerFields(desired, true)
	delete(patch, "apiVersion")
	delete(patch, "kind")
	if md, ok := patch["metadata"].(map[string]any); ok {
		delete(md, "name")
		delete(md, "namespace")
	}
	b, err := json.Marshal(withoutNulls(patch))
	if err != nil {
		return nil, fmt.Errorf("encoding the update patch: %w", err)
	}
	return b, nil
}

// withoutServerFields is a shallow copy of desired's content without status and the
// server-set metadata, and without the cairn.dev backup and restore labels unless keepLabels.
// The maps it changes (the top level, metadata and labels) are copies, the rest is shared.
func withoutServerFields(desired *unstructured.Unstructured, keepLabels bool) map[string]any {
	out := shallowCopy(objectOf(desired))
	delete(out, "status")
	md, ok := out["metadata"].(map[string]any)
	if !ok {
		return out
	}
	md = shallowCopy(md)
	out["metadata"] = md
	for _, f := range serverSetMetadata {
		delete(md, f)
	}
	if labels, ok := md["labels"].(map[string]any); ok && !keepLabels {
		labels = shallowCopy(labels)
		delete(labels, cairnv1.BackupNameLabel)
		delete(labels, cairnv1.RestoreNameLabel)
		md["labels"] = labels
	}
	return out
}

func shallowCopy(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// withoutNulls is m without null values, in m and in the maps it holds (not inside lists).
func withoutNulls(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		switch x := v.(type) {
		case nil:
		case map[string]any:
			out[k] = withoutNulls(x)
		default:
			out[k] = v
		}
	}
	return out
}

// compare returns up to limit paths where existing lacks or differs from a field of desired.
func compare(desired, existing *unstructured.Unstructured, limit int) []string {
	if existing == nil {
		return []string{"(the whole object)"}
	}
	c := comparison{limit: limit}
	c.walk("", withoutServerFields(desired, false), objectOf(existing))
	return c.paths
}

type comparison struct {
	limit int
	paths []string
}

func (c *comparison) done() bool { return len(c.paths) >= c.limit }

func (c *comparison) differ(path string) {
	if path == "" {
		path = "(the whole object)"
	}
	c.paths = append(c.paths, path)
}

// walk compares the value d of desired with e of existing at path.
func (c *comparison) walk(path string, d, e any) {
	if c.done() || d == nil {
		return
	}
	switch dv := d.(type) {
	case map[string]any:
		em, ok := e.(map[string]any)
		if !ok && e != nil {
			c.differ(path)
			return
		}
		// An absent map is an empty one: the paths name the keys it lacks.
		keys := make([]string, 0, len(dv))
		for k := range dv {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if c.done() {
				return
			}
			ev, found := em[k]
			if !found && isEmpty(dv[k]) {
				continue
			}
			c.walk(joinKey(path, k), dv[k], ev)
		}
	case []any:
		el, ok := e.([]any)
		if !ok {
			if e != nil || len(dv) > 0 {
				c.differ(path)
			}
			return
		}
		if len(el) != len(dv) {
			c.differ(path)
			return
		}
		for i := range dv {
			if c.done() {
				return
			}
			c.walk(path+"["+strconv.Itoa(i)+"]", dv[i], el[i])
		}
	default:
		if !scalarEqual(d, e) {
			c.differ(path)
		}
	}
}

// isEmpty reports whether v is null or an empty map or list: what an absent field means.
func isEmpty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	}
	return false
}

// scalarEqual compares two JSON scalars; numbers compare by value, whichever decoder read them.
func scalarEqual(a, b any) bool {
	if x, ok := number(a); ok {
		y, ok := number(b)
		return ok && x == y
	}
	return reflect.DeepEqual(a, b)
}

// number is v as a float64 when v is a JSON number (as encoding/json, the unstructured decoder
// or a typed conversion leave it). Integers beyond 2^53 lose precision; two that differ only
// there compare equal, which is harmless for a warning.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case int:
		return float64(x), true
	case int32:
		return float64(x), true
	case float64:
		return x, !math.IsNaN(x)
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	return 0, false
}

var plainKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// joinKey appends the map key k to path: ".k", or `["k"]` when k is not a plain word (a
// label such as app.kubernetes.io/name).
func joinKey(path, k string) string {
	if !plainKey.MatchString(k) {
		return path + "[" + strconv.Quote(k) + "]"
	}
	if path == "" {
		return k
	}
	return path + "." + k
}
