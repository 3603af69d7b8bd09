package podvolume

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cairn-backup/cairn/internal/restore"
)

// A pod of a Velero backup whose volumes Velero's file-system backup copied is refused, per
// volume, naming each volume and snapshot: never made with empty volumes.
func TestRestoreActionRefusesVeleroCopiedVolumes(t *testing.T) {
	pod := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"namespace": "shop", "name": "db-0"}}}
	copied := map[string][]string{"shop/db-0": {"data (Velero kopia snapshot k1)", "logs (Velero kopia snapshot k2)"}}
	facts := restore.Facts{VeleroVolumes: func(_ context.Context, namespace, name string) ([]string, error) {
		return copied[namespace+"/"+name], nil
	}}
	_, err := RestoreAction{}.Execute(context.Background(), restore.ActionInput{Item: pod.DeepCopy(), Original: pod, Facts: facts})
	if err == nil || !strings.Contains(err.Error(), "volume data (Velero kopia snapshot k1), volume logs (Velero kopia snapshot k2)") ||
		!strings.Contains(err.Error(), "Cairn cannot restore") {
		t.Fatalf("Execute = %v, want an error naming each volume and its snapshot", err)
	}
	other := pod.DeepCopy()
	other.SetName("web-0")
	out, err := RestoreAction{}.Execute(context.Background(), restore.ActionInput{Item: other.DeepCopy(), Original: other, Facts: facts})
	if err != nil || out.Item.GetName() != "web-0" {
		t.Errorf("a pod Velero copied no volume of: %v, %v; want it restored as it is", out.Item, err)
	}
}
