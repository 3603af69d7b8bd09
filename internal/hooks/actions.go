package hooks

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
)

// The names of the hook actions: in logs, and the post hooks' operations in the operations file.
const (
	PreActionName  = "cairn.dev/pre-hooks"
	PostActionName = "cairn.dev/post-hooks"
)

var podsGR = schema.GroupResource{Resource: "pods"}

// PreAction runs a pod's pre hooks before the pod is written and before its volume copies
// start: it must be registered before the volume copy action (podvolume.BackupAction), as
// the registry runs a pod's actions in registration order. A pre hook that fails with onError
// Fail fails the item: the pod is not backed up, its volumes are not copied and its post hooks
// do not run (Velero's rule); one with Continue is a warning.
type PreAction struct{ Runner *Runner }

func (PreAction) Name() string                      { return PreActionName }
func (PreAction) AppliesTo() []schema.GroupResource { return []schema.GroupResource{podsGR} }

func (a PreAction) Execute(ctx context.Context, item *unstructured.Unstructured, b *cairnv1.Backup) (backup.ExecuteResult, error) {
	res := backup.ExecuteResult{Item: item}
	pod, hooks, errs, err := a.Runner.selectFor(item, b, Pre)
	if err != nil {
		return res, err
	}
	res.Errors = append(res.Errors, errs...)
	rep := a.Runner.RunAll(ctx, b, pod.Namespace, pod.Name, hooks)
	record(&res, rep)
	if rep.Failure != "" {
		return res, fmt.Errorf("%s; the pod is left out of the backup", rep.Failure)
	}
	return res, nil
}

// PostAction runs a pod's post hooks, registered after the volume copy action. A pod whose
// volumes this backup copies (its PodVolumeBackups, labelled with the backup's UID) gets one
// async operation of the backup (operation ID "namespace/name"), whose Progress waits until
// every copy of the pod has ended, whatever its outcome, and then runs the post hooks: the
// application is let go once its data has been read. A pod without copies has its post hooks
// run at once, in Execute. A post hook that fails with onError Fail is an error of the backup
// (PartiallyFailed), naming the hook; with Continue, a warning.
type PostAction struct {
	Runner *Runner
	// Reader lists the PodVolumeBackups, uncached: the copy action created them a moment ago.
	Reader client.Reader
	// Namespace is the operator's namespace, where the PodVolumeBackups are.
	Namespace string
}

func (PostAction) Name() string                      { return PostActionName }
func (PostAction) AppliesTo() []schema.GroupResource { return []schema.GroupResource{podsGR} }

func (a PostAction) Execute(ctx context.Context, item *unstructured.Unstructured, b *cairnv1.Backup) (backup.ExecuteResult, error) {
	res := backup.ExecuteResult{Item: item}
	pod, hooks, errs, err := a.Runner.selectFor(item, b, Post)
	if err != nil {
		return res, err
	}
	res.Errors = append(res.Errors, errs...)
	if len(hooks) == 0 {
		return res, nil
	}
	copying, _, err := a.copies(ctx, b, pod.Namespace, pod.Name)
	if err != nil {
		return res, fmt.Errorf("finding the volume copies the post hooks wait for: %w", err)
	}
	if copying > 0 {
		res.OperationIDs = []string{pod.Namespace + "/" + pod.Name}
		res.Notes = append(res.Notes, fmt.Sprintf("%d post hooks wait for the pod's %d volume copies", len(hooks), copying))
		return res, nil
	}
	rep := a.Runner.RunAll(ctx, b, pod.Namespace, pod.Name, hooks)
	record(&res, rep)
	if rep.Failure != "" {
		res.Errors = append(res.Errors, rep.Failure)
	}
	return res, nil
}

// copies counts the pod's PodVolumeBackups of backup b, and those not ended.
func (a PostAction) copies(ctx context.Context, b *cairnv1.Backup, namespace, name string) (all, running int, err error) {
	var list cairnv1.PodVolumeBackupList
	if err := a.Reader.List(ctx, &list, client.InNamespace(a.Namespace), client.MatchingLabels{cairnv1.PodVolumeBackupUIDLabel: string(b.UID)}); err != nil {
		return 0, 0, err
	}
	for _, pvb := range list.Items {
		if pvb.Spec.Pod.Namespace != namespace || pvb.Spec.Pod.Name != name {
			continue
		}
		all++
		if !pvb.Status.Phase.IsTerminal() {
			running++
		}
	}
	return all, running, nil
}

// Progress waits for the pod's volume copies to end, then runs its post hooks (each bounded
// by its timeout, all by the operation call's) and completes, with the hooks it ran as its
// Result (backup.OperationHooks); a hook that fails with onError Fail fails the operation,
// naming it. A stopped call (the backup cancelled) abandons the running hook at once.
func (a PostAction) Progress(ctx context.Context, operationID string, b *cairnv1.Backup) (backup.OperationProgress, error) {
	namespace, name, ok := strings.Cut(operationID, "/")
	if !ok {
		return backup.OperationProgress{Err: fmt.Sprintf("operation %q names no pod", operationID)}, nil
	}
	p := backup.OperationProgress{Description: fmt.Sprintf("post hooks of pod %s", operationID)}
	all, running, err := a.copies(ctx, b, namespace, name)
	if err != nil {
		return p, err
	}
	if running > 0 {
		p.Description = fmt.Sprintf("post hooks of pod %s wait for %d of its %d volume copies", operationID, running, all)
		return p, nil
	}
	var pod corev1.Pod
	hooks, errs := []Hook(nil), []error(nil)
	if err := a.Runner.Pods.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &pod); err == nil {
		hooks, errs = Select(&pod, b.Spec.Hooks, Post, a.Runner.Timeout())
	} else if client.IgnoreNotFound(err) != nil {
		return p, err
	} else {
		// The pod is gone: its hooks fail at once, named by the spec, as RunAll says.
		pod.Namespace, pod.Name = namespace, name
		hooks, errs = Select(&pod, b.Spec.Hooks, Post, a.Runner.Timeout())
	}
	rep := a.Runner.RunAll(ctx, b, namespace, name, hooks)
	return ranHooks(ctx, p, "post hooks of pod "+operationID, rep, len(hooks), errs)
}

// ranHooks is the progress of an operation whose hooks (what names them) ran as rep says, of
// total; errs name hooks that could not be read. The counts are its Result
// (backup.OperationHooks), completed or failed; a hook that failed with onError Fail fails
// it, naming the hook; a completed one's description has every hook's run (Outcome.Message),
// those that failed and continued first.
func ranHooks(ctx context.Context, p backup.OperationProgress, what string, rep Report, total int, errs []error) (backup.OperationProgress, error) {
	counts := backup.HookCounts{Attempted: int32(rep.Attempted), Failed: int32(rep.Failed)}
	result := backup.OperationHooks{Hooks: &counts}
	for _, o := range rep.Outcomes {
		if o.Failed() && o.Hook.OnError == cairnv1.HookErrorModeContinue {
			result.Continued++
		}
	}
	var err error
	if p.Result, err = json.Marshal(result); err != nil {
		return p, err
	}
	p.NCompleted, p.NTotal = int64(rep.Attempted), int64(total)
	var problems []string
	for _, e := range errs {
		problems = append(problems, e.Error())
	}
	for _, o := range rep.Outcomes {
		if o.Failed() {
			problems = append(problems, o.Message())
		}
	}
	switch {
	case ctx.Err() != nil:
		p.Err = fmt.Sprintf("%s stopped: %v", what, context.Cause(ctx))
	case rep.Failure != "":
		p.Err = strings.Join(append([]string{rep.Failure}, problems...), "; ")
	default:
		// The description is kept in the operations file: it records every hook's run.
		p.Completed = true
		p.Description = what + " ran"
		if len(problems) > 0 {
			p.Description = fmt.Sprintf("%s ran; failed and continued: %s", what, strings.Join(problems, "; "))
		}
		for _, o := range rep.Outcomes {
			if !o.Failed() {
				p.Description += "; " + o.Message()
			}
		}
	}
	return p, nil
}

// Cancel ends the operation: nothing runs between its Progress calls, and a running call is
// stopped by its own context.
func (PostAction) Cancel(context.Context, string, *cairnv1.Backup) error { return nil }

// Progress and Cancel of the pre hooks: they start no operation.
func (PreAction) Progress(context.Context, string, *cairnv1.Backup) (backup.OperationProgress, error) {
	return backup.OperationProgress{}, fmt.Errorf("the pre hooks start no operations")
}

func (PreAction) Cancel(context.Context, string, *cairnv1.Backup) error { return nil }

// selectFor decodes a pod item and selects its hooks of phase; errs name what of its hooks
// could not be read, each an error of the item.
func (r *Runner) selectFor(item *unstructured.Unstructured, b *cairnv1.Backup, phase Phase) (*corev1.Pod, []Hook, []string, error) {
	var pod corev1.Pod
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(item.Object, &pod); err != nil {
		return nil, nil, nil, err
	}
	hooks, errs := Select(&pod, b.Spec.Hooks, phase, r.Timeout())
	var messages []string
	for _, e := range errs {
		messages = append(messages, fmt.Sprintf("%s hooks not run: %v", phase, e))
	}
	return &pod, hooks, messages, nil
}

// record puts a report's outcomes in the item's result: each hook's run in the log, a failed
// Continue hook as a warning, and the counts.
func record(res *backup.ExecuteResult, rep Report) {
	for _, o := range rep.Outcomes {
		if o.Failed() && o.Hook.OnError == cairnv1.HookErrorModeContinue {
			res.Warnings = append(res.Warnings, o.Message())
			continue
		}
		res.Notes = append(res.Notes, o.Message())
	}
	res.Hooks = res.Hooks.Add(backup.HookCounts{Attempted: int32(rep.Attempted), Failed: int32(rep.Failed)})
}
