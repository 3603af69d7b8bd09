package hooks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/restore"
)

// RestoreExecActionName names the restore's exec hook operations in its operations file.
const RestoreExecActionName = "cairn.dev/restore-exec-hooks"

// RestoreExecAction runs a restored pod's exec hooks (DESIGN.md section 17): a pod with exec
// hooks (SelectRestoreExec) gets one async operation of the restore, whose Progress waits
// until each hook's container runs (and is Ready, with waitForReady), each wait bounded by the
// hook's waitTimeout counted from the pod's creation (else by the restore's
// itemOperationTimeout, which bounds every operation), and then runs the hooks with the
// Runner, each bounded by its execTimeout. A hook that fails with onError Fail fails the
// operation, naming it (the restore ends PartiallyFailed); with Continue, it is in the
// operation's description and the restore's log. A container the pod does not have, or a pod
// that is gone or has ended, fails at once rather than being waited for. A cancel of the
// restore stops a running Progress, and with it a running hook.
type RestoreExecAction struct {
	restore.SyncAction
	Runner *Runner
}

func (RestoreExecAction) Name() string                      { return RestoreExecActionName }
func (RestoreExecAction) AppliesTo() []schema.GroupResource { return []schema.GroupResource{podsGR} }

// Execute selects the restored pod's exec hooks; a pod with any gets its operation, whose ID
// is "namespace/name#digest": the digest of the hooks selected here, so that hooks that
// change before they run (the pod's annotations edited meanwhile) are refused, not run.
func (a RestoreExecAction) Execute(_ context.Context, in restore.ActionInput) (restore.ActionOutput, error) {
	out := restore.ActionOutput{Item: in.Item}
	if in.Facts.Restore == nil {
		return out, nil
	}
	var pod corev1.Pod
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(in.Item.Object, &pod); err != nil {
		return out, err
	}
	hooks, errs := SelectRestoreExec(&pod, in.Facts.Restore.Spec.Hooks)
	for _, err := range errs {
		out.Errors = append(out.Errors, fmt.Sprintf("exec hooks not run: %v", err))
	}
	if len(hooks) == 0 {
		return out, nil
	}
	out.OperationID = pod.Namespace + "/" + pod.Name + "#" + digestOf(hooks)
	out.Notes = append(out.Notes, fmt.Sprintf("%d exec hooks wait for the pod to run", len(hooks)))
	return out, nil
}

// digestOf names a list of exec hooks: the first 12 hex digits of the SHA-256 of its JSON.
func digestOf(hooks []RestoreExec) string {
	raw, _ := json.Marshal(hooks)
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])[:12]
}

// parseExecOperation reads an operation ID of RestoreExecAction.
func parseExecOperation(operationID string) (namespace, name, digest string, ok bool) {
	pod, digest, ok := strings.Cut(operationID, "#")
	if !ok {
		return "", "", "", false
	}
	namespace, name, ok = strings.Cut(pod, "/")
	return namespace, name, digest, ok && namespace != "" && name != "" && digest != ""
}

// Progress waits for the pod's hook containers, then runs its exec hooks and completes (or
// fails), with the hooks it ran as its Result (backup.OperationHooks).
func (a RestoreExecAction) Progress(ctx context.Context, operationID string, rs *cairnv1.Restore) (backup.OperationProgress, error) {
	namespace, name, digest, ok := parseExecOperation(operationID)
	if !ok {
		return backup.OperationProgress{Err: fmt.Sprintf("operation %q names no pod", operationID)}, nil
	}
	pod := namespace + "/" + name
	what := "exec hooks of pod " + pod
	p := backup.OperationProgress{Description: what}
	// A refusal, or a pod that is gone, fails every hook at once; the hooks are then those
	// the pod as it is (or the spec alone, once it is gone) selects.
	failAll := func(live *corev1.Pod, problem error) (backup.OperationProgress, error) {
		if live == nil {
			live = &corev1.Pod{}
			live.Namespace, live.Name = namespace, name
		}
		hooks, errs := SelectRestoreExec(live, rs.Spec.Hooks)
		if len(hooks) == 0 {
			p.Err = fmt.Sprintf("%s not run: %v", what, problem)
			return p, nil
		}
		rep := a.Runner.runEach(ctx, rs, namespace, name, nil, plainHooks(hooks), func(int) error { return problem })
		return ranHooks(ctx, p, what, rep, len(hooks), errs)
	}
	if err := a.Runner.allowed(ctx, rs, namespace); err != nil {
		live, _ := a.Runner.pod(ctx, namespace, name)
		return failAll(live, err)
	}
	live, err := a.Runner.pod(ctx, namespace, name)
	switch {
	case errors.Is(err, errPodGone):
		return failAll(nil, err)
	case err != nil:
		return p, err
	}
	hooks, errs := SelectRestoreExec(live, rs.Spec.Hooks)
	if got := digestOf(hooks); got != digest {
		p.Err = fmt.Sprintf("%s not run: the pod's hooks changed after it was restored (its annotations were edited), and Cairn runs only the hooks it restored", what)
		return p, nil
	}
	plan := PlanRestoreExec(live, hooks, a.Runner.clock().Now())
	if plan.Wait != "" {
		p.Description = what + " wait: " + plan.Wait
		return p, nil
	}
	rep := a.Runner.runEach(ctx, rs, namespace, name, live, plainHooks(hooks), func(i int) error { return plan.Failures[i] })
	return ranHooks(ctx, p, what, rep, len(hooks), errs)
}

// Cancel ends the operation: nothing runs between its Progress calls, and a running call is
// stopped by its own context.
func (RestoreExecAction) Cancel(context.Context, string, *cairnv1.Restore) error { return nil }

func plainHooks(hooks []RestoreExec) []Hook {
	out := make([]Hook, len(hooks))
	for i, h := range hooks {
		out[i] = h.Hook
	}
	return out
}

// ExecPlan is what a restored pod's exec hooks do now: wait (Wait says for what), or run,
// Failures[i] failing the i-th hook without running it (nil: it runs).
type ExecPlan struct {
	Wait     string
	Failures []error
}

// PlanRestoreExec decides whether a restored pod's exec hooks wait or run now. Each hook waits
// until its container (the pod's first when it names none) is running, and Ready when it
// waits for ready, unless it fails at once: its container is not in the pod, the pod has
// ended, or its waitTimeout has passed since the pod was created. The hooks wait while any
// waits — except that a failure at once of a Fail hook that comes before every waiting hook
// ends them now (the hooks before it run, those after it do not): a failure is never held
// back behind a wait.
func PlanRestoreExec(pod *corev1.Pod, hooks []RestoreExec, now time.Time) ExecPlan {
	plan := ExecPlan{Failures: make([]error, len(hooks))}
	firstWait := -1
	for i, h := range hooks {
		container := h.Container
		if container == "" && len(pod.Spec.Containers) > 0 {
			container = pod.Spec.Containers[0].Name
		}
		waiting := ""
		switch {
		case !hasContainer(pod, container):
			plan.Failures[i] = fmt.Errorf("container %q is not in pod %s/%s", container, pod.Namespace, pod.Name)
		case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
			plan.Failures[i] = fmt.Errorf("pod %s/%s has ended (%s): its containers will not run again", pod.Namespace, pod.Name, pod.Status.Phase)
		default:
			waiting = containerWait(pod, container, h.WaitForReady)
		}
		if waiting == "" {
			continue
		}
		if waited := now.Sub(pod.CreationTimestamp.Time); h.WaitTimeout > 0 && waited >= h.WaitTimeout {
			plan.Failures[i] = fmt.Errorf("waited %s (its waitTimeout) for %s", h.WaitTimeout, waiting)
			continue
		}
		if firstWait < 0 {
			firstWait = i
			plan.Wait = waiting
		}
	}
	if firstWait < 0 {
		return plan
	}
	for i := 0; i < firstWait; i++ {
		if plan.Failures[i] != nil && hooks[i].OnError != cairnv1.HookErrorModeContinue {
			plan.Wait = ""
			return plan
		}
	}
	return plan
}

func hasContainer(pod *corev1.Pod, name string) bool {
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return true
		}
	}
	return false
}

// containerWait says what container of pod is waited for ("" when it is running, and Ready
// when ready says so).
func containerWait(pod *corev1.Pod, container string, ready bool) string {
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name != container {
			continue
		}
		switch {
		case s.State.Running == nil:
			return fmt.Sprintf("container %q to run", container)
		case ready && !s.Ready:
			return fmt.Sprintf("container %q to be Ready", container)
		}
		return ""
	}
	if ready {
		return fmt.Sprintf("container %q to run and be Ready", container)
	}
	return fmt.Sprintf("container %q to run", container)
}
