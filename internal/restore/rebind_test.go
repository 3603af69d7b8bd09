package restore_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cairn-backup/cairn/internal/restore"
)

func pv(phase string, claimRef map[string]any) *unstructured.Unstructured {
	obj := map[string]any{"apiVersion": "v1", "kind": "PersistentVolume", "metadata": map[string]any{"name": "pv-1"}, "spec": map[string]any{}}
	if claimRef != nil {
		obj["spec"] = map[string]any{"claimRef": claimRef}
	}
	if phase != "" {
		obj["status"] = map[string]any{"phase": phase}
	}
	return &unstructured.Unstructured{Object: obj}
}

func TestReleasedToItsClaim(t *testing.T) {
	restored := pv("", map[string]any{"namespace": "shop", "name": "data"})
	tests := []struct {
		name     string
		existing *unstructured.Unstructured
		desired  *unstructured.Unstructured
		want     bool
	}{
		{"released by the claim being restored", pv("Released", map[string]any{"namespace": "shop", "name": "data", "uid": "old"}), restored, true},
		{"still bound", pv("Bound", map[string]any{"namespace": "shop", "name": "data", "uid": "live"}), restored, false},
		{"available: nothing to free", pv("Available", map[string]any{"namespace": "shop", "name": "data"}), restored, false},
		{"released, no uid left", pv("Released", map[string]any{"namespace": "shop", "name": "data"}), restored, false},
		{"released by another claim", pv("Released", map[string]any{"namespace": "shop", "name": "other", "uid": "old"}), restored, false},
		{"released in another namespace (a mapped restore)", pv("Released", map[string]any{"namespace": "shop", "name": "data", "uid": "old"}),
			pv("", map[string]any{"namespace": "shop-copy", "name": "data"}), false},
		{"no claimRef", pv("Released", nil), restored, false},
		{"a claimRef that is not an object", &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"claimRef": "x"}, "status": map[string]any{"phase": "Released"}}}, restored, false},
		{"nothing", nil, restored, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := restore.ReleasedToItsClaim(tt.existing, tt.desired); got != tt.want {
				t.Errorf("ReleasedToItsClaim = %v, want %v", got, tt.want)
			}
		})
	}
}
