package restore_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	discoveryfake "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/restore"
)

// observingAction starts one operation per ConfigMap and observes what each became
// (restore.CreatedObserver); it cannot take note of ConfigMap "unrecorded".
type observingAction struct {
	restore.SyncAction
	mu        sync.Mutex
	created   map[string]types.UID // operation ID → the UID it was told
	cancelled []string
}

func (*observingAction) Name() string { return "test/observing" }
func (*observingAction) AppliesTo() []schema.GroupResource {
	return []schema.GroupResource{{Resource: "configmaps"}}
}
func (*observingAction) Execute(_ context.Context, in restore.ActionInput) (restore.ActionOutput, error) {
	return restore.ActionOutput{Item: in.Item, OperationID: "op-" + in.Item.GetName()}, nil
}
func (a *observingAction) Created(_ context.Context, operationID string, _ *cairnv1.Restore, created *unstructured.Unstructured) error {
	if created.GetName() == "unrecorded" {
		return errors.New("the record could not be written")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.created[operationID] = created.GetUID()
	return nil
}
func (a *observingAction) Cancel(_ context.Context, operationID string, _ *cairnv1.Restore) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cancelled = append(a.cancelled, operationID)
	return nil
}

// An action whose operations observe creations is told the object the create answered (its
// UID) before the restore follows them; it is not told of an object that existed already;
// when it cannot take note, the item is an error and its operation is abandoned, not followed.
func TestRunTellsWhatWasCreated(t *testing.T) {
	store, keys := commitBackup(t, []item{
		{"configmaps", "", "shop", object("v1", "ConfigMap", "shop", "made", nil)},
		{"configmaps", "", "shop", object("v1", "ConfigMap", "shop", "there", map[string]any{"data": map[string]any{"k": "backed up"}})},
		{"configmaps", "", "shop", object("v1", "ConfigMap", "shop", "unrecorded", nil)},
	})
	existing := &unstructured.Unstructured{Object: object("v1", "ConfigMap", "shop", "there", map[string]any{"data": map[string]any{"k": "changed since"}})}
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), existing)
	dyn.PrependReactor("create", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		obj := a.(clienttesting.CreateAction).GetObject().(*unstructured.Unstructured)
		obj.SetUID(types.UID("uid-of-" + obj.GetName())) // as the API server answers; the tracker stores it
		return false, nil, nil
	})
	action := &observingAction{created: map[string]types.UID{}}
	runner := &restore.Runner{Dynamic: dyn, Discovery: &discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{}},
		Workers: 1, Actions: restore.NewActions(action)}
	rs := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Namespace: "cairn-system", Name: "r1"}, Status: cairnv1.RestoreStatus{BackupName: "b1"},
		Spec: cairnv1.RestoreSpec{IncludedResources: []string{"configmaps"}}}
	res := runner.Run(context.Background(), restore.Request{Restore: rs, OperatorNamespace: "cairn-system", Source: store, BackupKeys: keys})
	if res.Ending != restore.Finished {
		t.Fatalf("run ended %s (%s)", res.Ending, res.FailureReason)
	}
	if len(action.created) != 1 || action.created["op-made"] != "uid-of-made" {
		t.Errorf("told %v; want only op-made, with the UID its create answered", action.created)
	}
	var followed []string
	for _, op := range res.Operations {
		followed = append(followed, op.OperationID)
	}
	if !slices.Equal(followed, []string{"op-made"}) {
		t.Errorf("operations followed %v, want [op-made]", followed)
	}
	slices.Sort(action.cancelled)
	if !slices.Equal(action.cancelled, []string{"op-there", "op-unrecorded"}) {
		t.Errorf("operations abandoned %v, want op-there (not created) and op-unrecorded (not recorded)", action.cancelled)
	}
	if res.Errors != 1 {
		t.Errorf("%d errors, want 1: the item whose creation could not be recorded", res.Errors)
	}
}
