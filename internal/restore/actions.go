package restore

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/velerofmt"
)

// Facts are what actions may ask about the rest of the restore.
type Facts struct {
	// PVRestored reports whether the PersistentVolume named name is restored by this restore.
	// Nil means none is.
	PVRestored func(name string) bool
	// BackedUp returns an item of the backup, as backed up, or nil when the backup does not
	// hold it (nil: none). The run answers it for VolumeSnapshots and VolumeSnapshotContents.
	BackedUp func(ref ItemRef) *unstructured.Unstructured
	// SnapshotOf returns the backup's VolumeSnapshot of the claim namespace/name (as backed
	// up) and its VolumeSnapshotContent; nils when the backup holds none (nil: none).
	SnapshotOf func(namespace, claim string) (vs, vsc *unstructured.Unstructured)
	// Restore is the restore being run.
	Restore *cairnv1.Restore
	// SnapshotAllowed says whether the restore may make a VolumeSnapshotContent for a snapshot
	// handle of the backup, with the operator's rights (nil: it may). A team restore may only
	// for a handle this cluster's own record of the backup holds (tenancy.go).
	SnapshotAllowed func(ctx context.Context, handle string) error
	// BackupOperations returns the async operations the backup recorded (its volume copies'
	// snapshots among them), read from its location once (nil: none).
	BackupOperations func(ctx context.Context) ([]backup.Operation, error)
	// BackupLocation is the name of the backup's storage location.
	BackupLocation string
	// VeleroVolumes, for a backup synced from a Velero location, returns the PodVolumeBackups
	// of the backed-up pod namespace/name whose volumes Velero's file-system backup copied
	// (velerofmt.CopiedVolumes; nil: not a Velero backup).
	VeleroVolumes func(ctx context.Context, namespace, pod string) ([]velerofmt.PodVolumeBackup, error)
}

func (f Facts) pvRestored(name string) bool { return f.PVRestored != nil && f.PVRestored(name) }

// ActionInput is what a RestoreItemAction gets for one item.
type ActionInput struct {
	// Item is the prepared item (Prepare's output); the action returns it, changed.
	Item *unstructured.Unstructured
	// Original is the item as backed up; actions never modify it.
	Original *unstructured.Unstructured
	Options  Options
	Facts    Facts
}

// ActionOutput is what a RestoreItemAction returns for one item.
type ActionOutput struct {
	// Item is the item to create (may be the input's Item, changed).
	Item *unstructured.Unstructured
	// Skip says not to restore this item; SkipReason says why.
	Skip       bool
	SkipReason string
	// AdditionalItems are items of the backup, named as backed up (their namespace before
	// mapping), to restore before this one when the restore's filters let them through as
	// additional items and it has not restored them already.
	AdditionalItems []ItemRef
	// OperationID, when set, names an async operation that keeps running after the item is
	// created: the restore waits for it (WaitingForPluginOperations) through Progress.
	OperationID string
	// Notes are logged against the item (what the action added, and why); Errors too, counted
	// as the restore's errors (it ends PartiallyFailed), the item still restored.
	Notes, Errors []string
}

// Action is a RestoreItemAction (v2): it sees every prepared item of the resources it applies
// to before the item is created, and may start an async operation that the restore waits for.
// Actions are registered in-process.
type Action interface {
	// Name identifies the action in logs and recorded operations.
	Name() string
	// AppliesTo lists the resources the action sees; empty means every resource.
	AppliesTo() []schema.GroupResource
	Execute(ctx context.Context, in ActionInput) (ActionOutput, error)
	// Progress reports how the operation operationID (from Execute) is doing.
	Progress(ctx context.Context, operationID string, rs *cairnv1.Restore) (backup.OperationProgress, error)
	// Cancel stops the operation operationID: the restore was cancelled, or it timed out.
	Cancel(ctx context.Context, operationID string, rs *cairnv1.Restore) error
}

// SyncAction gives an action that starts no operations its Progress and Cancel.
type SyncAction struct{}

// Progress says an operation is complete: a synchronous action starts none.
func (SyncAction) Progress(context.Context, string, *cairnv1.Restore) (backup.OperationProgress, error) {
	return backup.OperationProgress{Completed: true}, nil
}

// Cancel has nothing to stop.
func (SyncAction) Cancel(context.Context, string, *cairnv1.Restore) error { return nil }

// Named returns the action named name, or nil.
func (a *Actions) Named(name string) Action {
	for _, action := range a.actions {
		if action.Name() == name {
			return action
		}
	}
	return nil
}

// Tracker binds the action named name to the restore rs, for backup.Advance and
// backup.Cancel; nil when no action has that name.
func (a *Actions) Tracker(name string, rs *cairnv1.Restore) backup.OperationTracker {
	action := a.Named(name)
	if action == nil {
		return nil
	}
	return boundAction{action, rs}
}

type boundAction struct {
	action Action
	rs     *cairnv1.Restore
}

func (b boundAction) Progress(ctx context.Context, id string) (backup.OperationProgress, error) {
	return b.action.Progress(ctx, id, b.rs)
}

func (b boundAction) Cancel(ctx context.Context, id string) error {
	return b.action.Cancel(ctx, id, b.rs)
}

// Actions is the built-in actions plus extra ones, in registration order.
type Actions struct {
	actions []Action
}

// NewActions returns the built-in actions and then extra.
func NewActions(extra ...Action) *Actions {
	a := &Actions{actions: []Action{
		podAction{}, serviceAction{}, pvcAction{}, pvAction{}, jobAction{}, bindingSubjectsAction{},
	}}
	a.actions = append(a.actions, extra...)
	return a
}

// For returns the actions that apply to gr, in registration order.
func (a *Actions) For(gr schema.GroupResource) []Action {
	var out []Action
	for _, action := range a.actions {
		applies := action.AppliesTo()
		if len(applies) == 0 {
			out = append(out, action)
			continue
		}
		for _, x := range applies {
			if x == gr {
				out = append(out, action)
				break
			}
		}
	}
	return out
}

var (
	servicesGR            = schema.GroupResource{Resource: "services"}
	pvcsGR                = schema.GroupResource{Resource: "persistentvolumeclaims"}
	pvsGR                 = schema.GroupResource{Resource: "persistentvolumes"}
	roleBindingsGR        = schema.GroupResource{Group: "rbac.authorization.k8s.io", Resource: "rolebindings"}
	clusterRoleBindingsGR = schema.GroupResource{Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"}
)

// podAction makes a backed-up pod one the API server creates and the scheduler places anew.
type podAction struct{ SyncAction }

// tokenVolumePrefix names the projected service-account token volume that the ServiceAccount
// admission plugin adds to pods ("kube-api-access-" and five random characters).
const tokenVolumePrefix = "kube-api-access-"

func (podAction) Name() string                      { return "cairn.dev/pod" }
func (podAction) AppliesTo() []schema.GroupResource { return []schema.GroupResource{podsGR} }

// Execute clears what pins the pod to where it ran or what admission derives again:
//   - spec.nodeName: the node may not exist; the scheduler places the pod.
//   - spec.priority, and spec.preemptionPolicy when a priorityClassName is set: the Priority
//     admission plugin computes them from the class and refuses a pod whose values differ
//     (a class of the same name may have another value here).
//   - spec.ephemeralContainers: the API server refuses them on create.
//   - the service-account token volumes and their mounts: the projected kube-api-access-*
//     volume that admission added, and the legacy <serviceAccountName>-token-* secret
//     volumes (their secrets are generated per cluster). Admission mounts a fresh token, or
//     none, as the pod's service account now says.
func (podAction) Execute(_ context.Context, in ActionInput) (ActionOutput, error) {
	out := ActionOutput{Item: in.Item}
	spec, ok := nestedMap(objectOf(in.Item), "spec")
	if !ok {
		return out, nil
	}
	delete(spec, "nodeName")
	delete(spec, "priority")
	if class, _ := spec["priorityClassName"].(string); class != "" {
		delete(spec, "preemptionPolicy")
	}
	delete(spec, "ephemeralContainers")

	serviceAccount, _ := spec["serviceAccountName"].(string)
	if serviceAccount == "" {
		serviceAccount = "default"
	}
	volumes, ok := spec["volumes"].([]any)
	if !ok {
		return out, nil
	}
	dropped := map[string]bool{}
	kept := volumes[:0:0]
	for _, v := range volumes {
		vm, _ := v.(map[string]any)
		name, _ := vm["name"].(string)
		if isTokenVolume(vm, name, serviceAccount) {
			dropped[name] = true
			continue
		}
		kept = append(kept, v)
	}
	if len(dropped) == 0 {
		return out, nil
	}
	spec["volumes"] = kept
	for _, field := range []string{"containers", "initContainers"} {
		containers, _ := spec[field].([]any)
		for _, c := range containers {
			cm, ok := c.(map[string]any)
			if !ok {
				continue
			}
			mounts, ok := cm["volumeMounts"].([]any)
			if !ok {
				continue
			}
			keptMounts := mounts[:0:0]
			for _, m := range mounts {
				mm, _ := m.(map[string]any)
				if name, _ := mm["name"].(string); dropped[name] {
					continue
				}
				keptMounts = append(keptMounts, m)
			}
			cm["volumeMounts"] = keptMounts
		}
	}
	return out, nil
}

// isTokenVolume reports whether the pod volume v, named name, is a service-account token
// volume: a projected kube-api-access-* volume with a serviceAccountToken source, or a
// secret volume of a legacy token secret of the pod's service account.
func isTokenVolume(v map[string]any, name, serviceAccount string) bool {
	switch {
	case strings.HasPrefix(name, tokenVolumePrefix):
		sources, _, _ := unstructured.NestedSlice(v, "projected", "sources")
		for _, s := range sources {
			if sm, ok := s.(map[string]any); ok && sm["serviceAccountToken"] != nil {
				return true
			}
		}
	case strings.HasPrefix(name, serviceAccount+"-token-"):
		secret, _, _ := unstructured.NestedString(v, "secret", "secretName")
		return strings.HasPrefix(secret, serviceAccount+"-token-")
	}
	return false
}

// serviceAction lets the cluster assign a restored Service's addresses and ports again.
type serviceAction struct{ SyncAction }

func (serviceAction) Name() string                      { return "cairn.dev/service" }
func (serviceAction) AppliesTo() []schema.GroupResource { return []schema.GroupResource{servicesGR} }

// Execute clears spec.clusterIP and spec.clusterIPs (the address may be taken, or outside the
// cluster's service range), except on a headless service ("None"), and, unless
// preserveNodePorts, every spec.ports[].nodePort and spec.healthCheckNodePort (the cluster
// assigns new ones). An ExternalName service has neither and is left as it is.
func (serviceAction) Execute(_ context.Context, in ActionInput) (ActionOutput, error) {
	out := ActionOutput{Item: in.Item}
	spec, ok := nestedMap(objectOf(in.Item), "spec")
	if !ok {
		return out, nil
	}
	if t, _ := spec["type"].(string); t == "ExternalName" {
		return out, nil
	}
	if !isHeadless(spec) {
		delete(spec, "clusterIP")
		delete(spec, "clusterIPs")
	}
	if in.Options.PreserveNodePorts {
		return out, nil
	}
	delete(spec, "healthCheckNodePort")
	ports, _ := spec["ports"].([]any)
	for _, p := range ports {
		if pm, ok := p.(map[string]any); ok {
			delete(pm, "nodePort")
		}
	}
	return out, nil
}

// isHeadless reports whether the service spec asks for no cluster IP.
func isHeadless(spec map[string]any) bool {
	if ip, _ := spec["clusterIP"].(string); ip == "None" {
		return true
	}
	ips, _ := spec["clusterIPs"].([]any)
	return len(ips) > 0 && ips[0] == "None"
}

// The annotations that record a claim's binding and provisioning where it was backed up.
const (
	annBindCompleted          = "pv.kubernetes.io/bind-completed"
	annBoundByController      = "pv.kubernetes.io/bound-by-controller"
	annSelectedNode           = "volume.kubernetes.io/selected-node"
	annStorageProvisioner     = "volume.kubernetes.io/storage-provisioner"
	annBetaStorageProvisioner = "volume.beta.kubernetes.io/storage-provisioner"
)

// pvcAction makes a restored claim bind again: to its restored volume, or to a new one.
type pvcAction struct{ SyncAction }

func (pvcAction) Name() string                      { return "cairn.dev/persistentvolumeclaim" }
func (pvcAction) AppliesTo() []schema.GroupResource { return []schema.GroupResource{pvcsGR} }

// Execute removes the annotations the PV controller set when it bound the claim, and the
// selected node (which may not exist). spec.volumeName stays when this restore restores that
// volume, so the two bind again; otherwise it goes, with the storage-provisioner annotations,
// and the claim's storage class provisions a new volume.
func (pvcAction) Execute(_ context.Context, in ActionInput) (ActionOutput, error) {
	out := ActionOutput{Item: in.Item}
	obj := objectOf(in.Item)
	deleteAnnotations(obj, annBindCompleted, annBoundByController, annSelectedNode)
	spec, ok := nestedMap(obj, "spec")
	if !ok {
		return out, nil
	}
	if volume, _ := spec["volumeName"].(string); volume != "" && in.Facts.pvRestored(volume) {
		return out, nil
	}
	delete(spec, "volumeName")
	deleteAnnotations(obj, annStorageProvisioner, annBetaStorageProvisioner)
	return out, nil
}

// pvAction restores a PersistentVolume only when its data outlives its claim.
type pvAction struct{ SyncAction }

func (pvAction) Name() string                      { return "cairn.dev/persistentvolume" }
func (pvAction) AppliesTo() []schema.GroupResource { return []schema.GroupResource{pvsGR} }

// Execute skips the volume unless restorePVs and its reclaim policy is Retain: a Delete
// volume's storage went with its claim, and the restored claim is provisioned a new one. A
// restored volume is bound again to its claim: claimRef's namespace is mapped, and its uid and
// resourceVersion (the claim's where it was backed up) and the binding annotations go, so
// the volume waits for the restored claim of that name.
func (pvAction) Execute(_ context.Context, in ActionInput) (ActionOutput, error) {
	out := ActionOutput{Item: in.Item}
	if !in.Options.RestorePVs {
		return skip(in.Item, "restorePVs is false"), nil
	}
	if in.Facts.SnapshotOf != nil && in.Original != nil {
		ns, _, _ := unstructured.NestedString(in.Original.Object, "spec", "claimRef", "namespace")
		claim, _, _ := unstructured.NestedString(in.Original.Object, "spec", "claimRef", "name")
		if vs, vsc := in.Facts.SnapshotOf(ns, claim); vs != nil && vsc != nil {
			return skip(in.Item, "its claim is restored from its CSI snapshot, onto a new volume"), nil
		}
	}
	obj := objectOf(in.Item)
	policy, _, _ := unstructured.NestedString(obj, "spec", "persistentVolumeReclaimPolicy")
	if policy != "Retain" {
		if policy == "" {
			policy = "unset"
		}
		return skip(in.Item, fmt.Sprintf("persistentVolumeReclaimPolicy is %s, not Retain: its claim is provisioned a new volume", policy)), nil
	}
	deleteAnnotations(obj, annBindCompleted, annBoundByController)
	claimRef, ok := nestedMap(obj, "spec", "claimRef")
	if !ok {
		return out, nil
	}
	delete(claimRef, "uid")
	delete(claimRef, "resourceVersion")
	if ns, _ := claimRef["namespace"].(string); ns != "" {
		claimRef["namespace"] = in.Options.MapNamespace(ns)
	}
	return out, nil
}

func skip(item *unstructured.Unstructured, reason string) ActionOutput {
	return ActionOutput{Item: item, Skip: true, SkipReason: reason}
}

// The labels by which a job's selector names its own pods, by the job's uid.
const (
	controllerUIDLabel       = "batch.kubernetes.io/controller-uid"
	legacyControllerUIDLabel = "controller-uid"
)

// jobAction lets the API server generate a restored job's selector again.
type jobAction struct{ SyncAction }

func (jobAction) Name() string                      { return "cairn.dev/job" }
func (jobAction) AppliesTo() []schema.GroupResource { return []schema.GroupResource{jobsGR} }

// Execute drops the controller-uid entries from the pod template's labels: they hold the
// backed-up job's uid, and the API server refuses a job whose generated selector and labels do
// not hold the new one. A selector the API server generated (manualSelector not true) is
// removed, to be generated again; from a manual one only the controller-uid entries go.
func (jobAction) Execute(_ context.Context, in ActionInput) (ActionOutput, error) {
	out := ActionOutput{Item: in.Item}
	obj := objectOf(in.Item)
	if labels, ok := nestedMap(obj, "spec", "template", "metadata", "labels"); ok {
		delete(labels, controllerUIDLabel)
		delete(labels, legacyControllerUIDLabel)
	}
	spec, ok := nestedMap(obj, "spec")
	if !ok {
		return out, nil
	}
	if manual, _ := spec["manualSelector"].(bool); !manual {
		delete(spec, "selector")
		return out, nil
	}
	if matchLabels, ok := nestedMap(spec, "selector", "matchLabels"); ok {
		delete(matchLabels, controllerUIDLabel)
		delete(matchLabels, legacyControllerUIDLabel)
	}
	return out, nil
}

// bindingSubjectsAction maps the namespaces of a binding's service accounts.
type bindingSubjectsAction struct{ SyncAction }

func (bindingSubjectsAction) Name() string { return "cairn.dev/binding-subjects" }
func (bindingSubjectsAction) AppliesTo() []schema.GroupResource {
	return []schema.GroupResource{roleBindingsGR, clusterRoleBindingsGR}
}

// Execute maps the namespace of every ServiceAccount subject, so that a binding restored with
// namespaceMapping grants its role to the restored service accounts. Users and groups have no
// namespace.
func (bindingSubjectsAction) Execute(_ context.Context, in ActionInput) (ActionOutput, error) {
	out := ActionOutput{Item: in.Item}
	subjects, _ := objectOf(in.Item)["subjects"].([]any)
	for _, s := range subjects {
		sm, ok := s.(map[string]any)
		if !ok {
			continue
		}
		if kind, _ := sm["kind"].(string); kind != "ServiceAccount" {
			continue
		}
		if ns, _ := sm["namespace"].(string); ns != "" {
			sm["namespace"] = in.Options.MapNamespace(ns)
		}
	}
	return out, nil
}

// MergeServiceAccount merges the backed-up service account desired into existing, the one
// already in the cluster (a namespace's default service account, which the serviceaccount
// controller creates as soon as the namespace exists): secrets and imagePullSecrets are their
// union by name, desired's labels and annotations are added without changing existing ones
// (but for the cairn.dev backup and restore labels, which say who wrote the object last), and
// automountServiceAccountToken is taken from desired when existing does not set it. merged is a
// copy of existing with these changes; changed is false when there are none. Neither input is
// modified.
func MergeServiceAccount(existing, desired *unstructured.Unstructured) (merged *unstructured.Unstructured, changed bool) {
	if existing == nil {
		return nil, false
	}
	merged = existing.DeepCopy()
	if merged.Object == nil {
		merged.Object = map[string]any{}
	}
	from := objectOf(desired)
	for _, field := range []string{"secrets", "imagePullSecrets"} {
		if mergeByName(merged.Object, field, from[field]) {
			changed = true
		}
	}
	if v, ok := from["automountServiceAccountToken"].(bool); ok {
		if _, set := merged.Object["automountServiceAccountToken"]; !set {
			merged.Object["automountServiceAccountToken"] = v
			changed = true
		}
	}
	for _, field := range []string{"labels", "annotations"} {
		add, _ := nestedMap(from, "metadata", field)
		if mergeStrings(merged.Object, field, add) {
			changed = true
		}
	}
	return merged, changed
}

// mergeByName appends to the list obj[field] the entries of add whose name it does not hold.
// It reports whether it appended any. A field that is not a list is left alone.
func mergeByName(obj map[string]any, field string, add any) bool {
	entries, _ := add.([]any)
	current, found := obj[field]
	list, isList := current.([]any)
	if found && current != nil && !isList {
		return false
	}
	names := map[string]bool{}
	for _, e := range list {
		if em, ok := e.(map[string]any); ok {
			if name, ok := em["name"].(string); ok {
				names[name] = true
			}
		}
	}
	appended := false
	for _, e := range entries {
		em, ok := e.(map[string]any)
		if !ok {
			continue
		}
		name, ok := em["name"].(string)
		if !ok || name == "" || names[name] {
			continue
		}
		names[name] = true
		list = append(list, copyJSON(em))
		appended = true
	}
	if appended {
		obj[field] = list
	}
	return appended
}

// mergeStrings adds to the metadata map field (labels or annotations) of obj the string
// entries of add that it does not hold, and sets the cairn.dev backup and restore labels. It
// reports whether it changed anything.
func mergeStrings(obj map[string]any, field string, add map[string]any) bool {
	if len(add) == 0 {
		return false
	}
	md, ok := obj["metadata"].(map[string]any)
	if !ok {
		return false
	}
	current, found := md[field]
	m, isMap := current.(map[string]any)
	if found && current != nil && !isMap {
		return false
	}
	changed := false
	for k, v := range add {
		s, ok := v.(string)
		if !ok {
			continue
		}
		old, set := m[k]
		overwrite := field == "labels" && (k == cairnv1.BackupNameLabel || k == cairnv1.RestoreNameLabel)
		if set && (!overwrite || old == s) {
			continue
		}
		if m == nil {
			m = map[string]any{}
			md[field] = m
		}
		m[k] = s
		changed = true
	}
	return changed
}

// deleteAnnotations removes keys from obj's annotations, when they are an object.
func deleteAnnotations(obj map[string]any, keys ...string) {
	annotations, ok := nestedMap(obj, "metadata", "annotations")
	if !ok {
		return
	}
	for _, k := range keys {
		delete(annotations, k)
	}
}

// objectOf is u's content, or nil for a nil u.
func objectOf(u *unstructured.Unstructured) map[string]any {
	if u == nil {
		return nil
	}
	return u.Object
}

// copyJSON deep-copies a JSON object.
func copyJSON(m map[string]any) map[string]any {
	return (&unstructured.Unstructured{Object: m}).DeepCopy().Object
}
