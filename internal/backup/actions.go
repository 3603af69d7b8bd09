package backup

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// ItemID names one item.
type ItemID struct {
	schema.GroupResource
	Namespace string
	Name      string
}

func (id ItemID) String() string {
	if id.Namespace == "" {
		return id.GroupResource.String() + "/" + id.Name
	}
	return id.GroupResource.String() + "/" + id.Namespace + "/" + id.Name
}

// ExecuteResult is what a BackupItemAction returns for one item.
type ExecuteResult struct {
	// Item is the item to write (the input, possibly changed).
	Item *unstructured.Unstructured
	// AdditionalItems are backed up with this item, by the same worker (PVCs of a pod).
	AdditionalItems []ItemID
	// OperationIDs name the async operations that keep running after Execute (a pod's volume
	// copies: one each), each recorded and followed on its own.
	OperationIDs []string
	// PostOperationItems are added to the backup once its operations complete.
	PostOperationItems []ItemID
	// Notes are logged against the item (what the action chose not to do, and why); Warnings
	// too, counted as the backup's warnings; Errors too, counted as the backup's errors (it
	// ends PartiallyFailed), the item still written.
	Notes, Warnings, Errors []string
	// Hooks counts the hooks the action ran for the item (internal/hooks); they are counted
	// even when Execute returns an error.
	Hooks HookCounts
}

// HookCounts counts hooks run and hooks failed (status.hookStatus).
type HookCounts struct {
	Attempted int32 `json:"attempted"`
	Failed    int32 `json:"failed"`
}

// Add returns the sum of c and o.
func (c HookCounts) Add(o HookCounts) HookCounts {
	return HookCounts{Attempted: c.Attempted + o.Attempted, Failed: c.Failed + o.Failed}
}

// Status is c as a backup's or restore's status.hookStatus; nil when no hook ran.
func (c HookCounts) Status() *cairnv1.HookStatus {
	if c == (HookCounts{}) {
		return nil
	}
	return &cairnv1.HookStatus{HooksAttempted: c.Attempted, HooksFailed: c.Failed}
}

// HookCountsOfStatus reads status.hookStatus.
func HookCountsOfStatus(s *cairnv1.HookStatus) HookCounts {
	if s == nil {
		return HookCounts{}
	}
	return HookCounts{Attempted: s.HooksAttempted, Failed: s.HooksFailed}
}

// OperationHooks is the part of an operation's Result that counts the hooks it ran: an
// operation that runs hooks (a pod's post hooks that wait for its volume copies) reports them
// so, completed or failed.
type OperationHooks struct {
	Hooks *HookCounts `json:"hooks,omitempty"`
	// Continued counts the hooks that failed with onError Continue: each a warning of the
	// backup or restore.
	Continued int32 `json:"continued,omitempty"`
}

// HookCountsOf sums the hooks the operations ran (OperationHooks in their Results), and
// those that failed and continued (warnings).
func HookCountsOf(ops []Operation) (sum HookCounts, continued int32) {
	for _, op := range ops {
		if len(op.Result) == 0 {
			continue
		}
		var r OperationHooks
		if err := json.Unmarshal(op.Result, &r); err == nil && r.Hooks != nil {
			sum = sum.Add(*r.Hooks)
			continued += r.Continued
		}
	}
	return sum, continued
}

// OperationProgress is what Progress reports of an async operation.
type OperationProgress struct {
	Completed bool
	// PostOperationItems, on completion, are more items to add to the backup: those known only
	// once the operation is done (the VolumeSnapshotContent of a snapshot).
	PostOperationItems []ItemID
	Err                string
	NCompleted         int64
	NTotal             int64
	Units              string
	Description        string
	Started            time.Time
	Updated            time.Time
	// Result is what a completed operation produced that the backup must remember, in the
	// action's own encoding (a volume copy: its snapshot); it is kept in the operations file,
	// so it reaches a second cluster with the backup. A failed operation's Result is kept too
	// (the hooks it ran: OperationHooks).
	Result json.RawMessage
}

// BackupItemAction is a plugin that sees every item of the resources it applies to (v2 of
// DESIGN.md section 6). Actions are registered in-process.
type BackupItemAction interface {
	// Name identifies the action in logs and recorded operations.
	Name() string
	// AppliesTo lists the resources the action sees; empty means every resource.
	AppliesTo() []schema.GroupResource
	Execute(ctx context.Context, item *unstructured.Unstructured, b *cairnv1.Backup) (ExecuteResult, error)
	Progress(ctx context.Context, operationID string, b *cairnv1.Backup) (OperationProgress, error)
	Cancel(ctx context.Context, operationID string, b *cairnv1.Backup) error
}

// Registry holds the actions, in registration order.
type Registry struct {
	actions []BackupItemAction
}

// CustomResource is a resource that a CRD serves, and the CRD's name.
type CustomResource struct {
	schema.GroupResource
	Kind string
	CRD  string
}

// NewRegistry returns a registry with the built-in actions and then extra. customResources
// are the resources CRDs serve, for the action that backs up a custom resource's CRD.
func NewRegistry(customResources []CustomResource, extra ...BackupItemAction) *Registry {
	r := &Registry{}
	r.Register(podVolumesAction{}, pvcVolumeAction{})
	if len(customResources) > 0 {
		r.Register(newCustomResourceDefinitionAction(customResources))
	}
	r.Register(extra...)
	return r
}

// Register adds actions.
func (r *Registry) Register(actions ...BackupItemAction) { r.actions = append(r.actions, actions...) }

// For returns the actions that apply to gr.
func (r *Registry) For(gr schema.GroupResource) []BackupItemAction {
	var out []BackupItemAction
	for _, a := range r.actions {
		applies := a.AppliesTo()
		if len(applies) == 0 {
			out = append(out, a)
			continue
		}
		for _, x := range applies {
			if x == gr {
				out = append(out, a)
				break
			}
		}
	}
	return out
}

// Named returns the action called name, or nil.
func (r *Registry) Named(name string) BackupItemAction {
	for _, a := range r.actions {
		if a.Name() == name {
			return a
		}
	}
	return nil
}

// Tracker binds the action called name to the backup b, for Advance and Cancel; nil when no
// action has that name.
func (r *Registry) Tracker(name string, b *cairnv1.Backup) OperationTracker {
	return backupTracker(r.Named(name), b)
}

// syncAction is the part of the built-in actions that have no async operations.
type syncAction struct{}

func (syncAction) Progress(context.Context, string, *cairnv1.Backup) (OperationProgress, error) {
	return OperationProgress{}, fmt.Errorf("this action starts no operations")
}

func (syncAction) Cancel(context.Context, string, *cairnv1.Backup) error { return nil }

var (
	podsGR = schema.GroupResource{Resource: "pods"}
	pvcsGR = schema.GroupResource{Resource: "persistentvolumeclaims"}
	pvsGR  = schema.GroupResource{Resource: "persistentvolumes"}
	crdsGR = schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}
	nsGR   = schema.GroupResource{Resource: "namespaces"}
)

// podVolumesAction adds the PVCs a pod mounts.
type podVolumesAction struct{ syncAction }

func (podVolumesAction) Name() string                      { return "cairn.dev/pod-volumes" }
func (podVolumesAction) AppliesTo() []schema.GroupResource { return []schema.GroupResource{podsGR} }
func (podVolumesAction) Execute(_ context.Context, item *unstructured.Unstructured, _ *cairnv1.Backup) (ExecuteResult, error) {
	res := ExecuteResult{Item: item}
	volumes, _, _ := unstructured.NestedSlice(item.Object, "spec", "volumes")
	for _, v := range volumes {
		vm, ok := v.(map[string]any)
		if !ok {
			continue
		}
		claim, _, _ := unstructured.NestedString(vm, "persistentVolumeClaim", "claimName")
		if claim != "" {
			res.AdditionalItems = append(res.AdditionalItems, ItemID{GroupResource: pvcsGR, Namespace: item.GetNamespace(), Name: claim})
		}
	}
	return res, nil
}

// pvcVolumeAction adds the PV a PVC is bound to.
type pvcVolumeAction struct{ syncAction }

func (pvcVolumeAction) Name() string                      { return "cairn.dev/pvc-volume" }
func (pvcVolumeAction) AppliesTo() []schema.GroupResource { return []schema.GroupResource{pvcsGR} }
func (pvcVolumeAction) Execute(_ context.Context, item *unstructured.Unstructured, _ *cairnv1.Backup) (ExecuteResult, error) {
	res := ExecuteResult{Item: item}
	if pv, _, _ := unstructured.NestedString(item.Object, "spec", "volumeName"); pv != "" {
		res.AdditionalItems = append(res.AdditionalItems, ItemID{GroupResource: pvsGR, Name: pv})
	}
	return res, nil
}

// customResourceDefinitionAction adds the CRD of a custom resource.
type customResourceDefinitionAction struct {
	syncAction
	resources []schema.GroupResource
	crds      map[schema.GroupKind]string
}

func newCustomResourceDefinitionAction(customResources []CustomResource) customResourceDefinitionAction {
	a := customResourceDefinitionAction{crds: map[schema.GroupKind]string{}}
	for _, cr := range customResources {
		a.resources = append(a.resources, cr.GroupResource)
		a.crds[schema.GroupKind{Group: cr.Group, Kind: cr.Kind}] = cr.CRD
	}
	return a
}

func (customResourceDefinitionAction) Name() string { return "cairn.dev/custom-resource-definition" }

// AppliesTo is exactly the resources CRDs serve.
func (a customResourceDefinitionAction) AppliesTo() []schema.GroupResource { return a.resources }

func (a customResourceDefinitionAction) Execute(_ context.Context, item *unstructured.Unstructured, _ *cairnv1.Backup) (ExecuteResult, error) {
	res := ExecuteResult{Item: item}
	if crd, ok := a.crds[item.GroupVersionKind().GroupKind()]; ok {
		res.AdditionalItems = append(res.AdditionalItems, ItemID{GroupResource: crdsGR, Name: crd})
	}
	return res, nil
}
