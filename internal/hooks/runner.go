package hooks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/exec"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// Executor runs a command in a pod's container (the pods/exec subresource), writing its
// output to stdout and stderr, and returns when it ended or ctx did. A command that ran and
// exited non-zero returns an error with ExitStatus (k8s.io/client-go/util/exec.ExitError).
// RemoteExecutor is the real one; tests give a fake.
type Executor interface {
	Exec(ctx context.Context, namespace, pod, container string, command []string, stdout, stderr io.Writer) error
}

// Access says whether owner (the Backup or Restore whose hooks run) may run commands in pods
// of namespace: denied, when not empty, says why not (its requester may not create pods/exec
// there, DESIGN.md section 15); err is a failure to find out.
type Access func(ctx context.Context, owner client.Object, namespace string) (denied string, err error)

// DefaultOutputTail is how much of a hook's stdout and of its stderr (each, their last bytes)
// the backup's log keeps.
const DefaultOutputTail = 4 << 10

// Runner runs hooks, one at a time, each bounded by its timeout.
type Runner struct {
	// Executor runs the commands.
	Executor Executor
	// Pods reads a pod afresh before its hooks run: a pod that is gone, or a container that
	// is not in it or not running, fails its hooks at once rather than waiting on an exec.
	Pods client.Reader
	// Access, when set, is asked before a pod's hooks run; nil means the operator's own
	// rights (an administrator's backup or restore).
	Access Access
	// Disabled says why no hook may run ("" when they may): the manager was started without
	// the pods/exec permission (--hooks-enabled=false). Every hook then fails, saying so.
	Disabled string
	// DefaultTimeout bounds a hook that sets none; 0 means cairnv1.DefaultHookTimeout.
	DefaultTimeout time.Duration
	// OutputTail is how many bytes of each stream are kept; 0 means DefaultOutputTail.
	OutputTail int
	// Clock times the hooks; nil means the real clock.
	Clock clock.PassiveClock
}

// Timeout is the timeout of hooks that set none.
func (r *Runner) Timeout() time.Duration {
	if r.DefaultTimeout > 0 {
		return r.DefaultTimeout
	}
	return cairnv1.DefaultHookTimeout
}

func (r *Runner) clock() clock.PassiveClock {
	if r.Clock == nil {
		return clock.RealClock{}
	}
	return r.Clock
}

// Outcome is how one hook ran.
type Outcome struct {
	Hook      Hook
	Pod       string
	Container string
	Duration  time.Duration
	// ExitCode is the command's exit code; -1 when it did not exit (never started, cut off).
	ExitCode       int
	Stdout, Stderr string
	// Err says why the hook failed; nil when it succeeded.
	Err error
}

// Failed reports whether the hook failed.
func (o Outcome) Failed() bool { return o.Err != nil }

// Message is the outcome in one line for the backup's log: the hook, where it ran, the
// command, how long it took, its exit code, and the tails of its output.
func (o Outcome) Message() string {
	var b strings.Builder
	result := "succeeded"
	if o.Err != nil {
		result = "failed: " + o.Err.Error()
	}
	fmt.Fprintf(&b, "Hook %s %s (pod %s, container %s, command %q, duration %s, exit code %d)",
		o.Hook.Name, result, o.Pod, o.Container, o.Hook.Command, o.Duration.Round(time.Millisecond), o.ExitCode)
	if o.Stdout != "" {
		fmt.Fprintf(&b, "; stdout: %q", o.Stdout)
	}
	if o.Stderr != "" {
		fmt.Fprintf(&b, "; stderr: %q", o.Stderr)
	}
	return b.String()
}

// Report is what running one pod's hooks of one phase came to.
type Report struct {
	Outcomes []Outcome
	// Attempted and Failed count the hooks tried and those that failed.
	Attempted, Failed int
	// Failure names the hook whose failure fails the backup or restore (onError Fail); "" when
	// none did.
	// The hooks after it were not run.
	Failure string
}

// RunAll runs hooks (one phase of one pod, Select's order) one after the other. The pod is
// read again first. A hook that fails with onError Fail stops the rest, which are not tried;
// one with Continue does not. ctx ending (the backup cancelled) abandons the running hook at
// once and tries no more.
func (r *Runner) RunAll(ctx context.Context, owner client.Object, namespace, name string, hooks []Hook) Report {
	if len(hooks) == 0 {
		return Report{}
	}
	pod, problem := r.prepare(ctx, owner, namespace, name)
	return r.runEach(ctx, owner, namespace, name, pod, hooks, func(int) error { return problem })
}

// runEach runs hooks in pod one after the other, as RunAll says; problem says why the i-th
// hook fails without being run (nil: it runs).
func (r *Runner) runEach(ctx context.Context, owner client.Object, namespace, name string, pod *corev1.Pod, hooks []Hook, problem func(i int) error) Report {
	var rep Report
	for i, h := range hooks {
		if ctx.Err() != nil {
			break
		}
		var o Outcome
		if err := problem(i); err != nil {
			o = Outcome{Hook: h, Pod: namespace + "/" + name, Container: h.Container, ExitCode: -1, Err: err}
		} else {
			o = r.run(ctx, owner, pod, h)
		}
		rep.Outcomes = append(rep.Outcomes, o)
		rep.Attempted++
		if !o.Failed() {
			continue
		}
		rep.Failed++
		if h.OnError != cairnv1.HookErrorModeContinue {
			rep.Failure = fmt.Sprintf("hook %s failed in pod %s/%s: %v", h.Name, namespace, name, o.Err)
			break
		}
	}
	return rep
}

// prepare finds whether the pod's hooks may run: hooks enabled, the backup allowed to exec
// there, the pod still there. problem fails every hook of the pod at once.
func (r *Runner) prepare(ctx context.Context, owner client.Object, namespace, name string) (*corev1.Pod, error) {
	if err := r.allowed(ctx, owner, namespace); err != nil {
		return nil, err
	}
	return r.pod(ctx, namespace, name)
}

// allowed says why owner may not run hooks in pods of namespace (nil when it may): hooks
// disabled, or its requester without pods/exec there.
func (r *Runner) allowed(ctx context.Context, owner client.Object, namespace string) error {
	if r.Disabled != "" {
		return errors.New(r.Disabled)
	}
	if r.Access != nil {
		denied, err := r.Access(ctx, owner, namespace)
		if err != nil {
			return fmt.Errorf("asking whether the %s may run commands in pods of namespace %s: %w", noun(owner), namespace, err)
		}
		if denied != "" {
			return errors.New(denied)
		}
	}
	return nil
}

// errPodGone: the pod whose hooks were to run does not exist (any more).
var errPodGone = errors.New("is gone")

// noun names owner's kind in messages: "backup" or "restore".
func noun(owner client.Object) string {
	if _, ok := owner.(*cairnv1.Restore); ok {
		return "restore"
	}
	return "backup"
}

// pod reads the pod afresh; a pod that is gone says so.
func (r *Runner) pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	var pod corev1.Pod
	if err := r.Pods.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("pod %s/%s %w", namespace, name, errPodGone)
		}
		return nil, fmt.Errorf("reading pod %s/%s: %w", namespace, name, err)
	}
	return &pod, nil
}

// containerProblem says why a hook cannot run in container of pod ("" when it can): the
// container must be in the pod's spec and running.
func containerProblem(pod *corev1.Pod, container string) string {
	found := false
	for _, c := range pod.Spec.Containers {
		if c.Name == container {
			found = true
		}
	}
	if !found {
		return fmt.Sprintf("container %q is not in pod %s/%s", container, pod.Namespace, pod.Name)
	}
	if pod.Status.Phase != corev1.PodRunning {
		return fmt.Sprintf("pod %s/%s is %s, not Running", pod.Namespace, pod.Name, phaseOr(pod.Status.Phase))
	}
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == container {
			if s.State.Running == nil {
				return fmt.Sprintf("container %q of pod %s/%s is not running", container, pod.Namespace, pod.Name)
			}
			return ""
		}
	}
	return fmt.Sprintf("container %q of pod %s/%s has no status: it is not running", container, pod.Namespace, pod.Name)
}

func phaseOr(p corev1.PodPhase) string {
	if p == "" {
		return "not started"
	}
	return string(p)
}

// run runs one hook in pod, bounded by its timeout. The executor runs apart: when the
// timeout or ctx ends first, the command is abandoned (the exec stream is closed through
// its context) and the hook fails at once, whatever the executor does next.
func (r *Runner) run(ctx context.Context, owner client.Object, pod *corev1.Pod, h Hook) Outcome {
	container := h.Container
	if container == "" && len(pod.Spec.Containers) > 0 {
		container = pod.Spec.Containers[0].Name
	}
	o := Outcome{Hook: h, Pod: pod.Namespace + "/" + pod.Name, Container: container, ExitCode: -1}
	if problem := containerProblem(pod, container); problem != "" {
		o.Err = errors.New(problem)
		return o
	}
	timeout := h.Timeout
	if timeout <= 0 {
		timeout = r.Timeout()
	}
	execCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	limit := r.OutputTail
	if limit <= 0 {
		limit = DefaultOutputTail
	}
	stdout, stderr := &tail{limit: limit}, &tail{limit: limit}
	start := r.clock().Now()
	done := make(chan error, 1)
	go func() {
		done <- r.Executor.Exec(execCtx, pod.Namespace, pod.Name, container, h.Command, stdout, stderr)
	}()
	var err error
	select {
	case err = <-done:
	case <-execCtx.Done():
	}
	o.Duration = r.clock().Since(start)
	o.Stdout, o.Stderr = stdout.String(), stderr.String()
	switch {
	case ctx.Err() != nil:
		o.Err = fmt.Errorf("abandoned: the %s was stopped (%w)", noun(owner), context.Cause(ctx))
	case execCtx.Err() != nil:
		o.Err = fmt.Errorf("timed out after %s: the command was abandoned", timeout)
	case err != nil:
		o.Err = execError(err, pod.Namespace)
		var exit exec.ExitError
		if errors.As(err, &exit) {
			o.ExitCode = exit.ExitStatus()
		}
	default:
		o.ExitCode = 0
	}
	return o
}

// execError says what a failed exec means.
func execError(err error, namespace string) error {
	var exit exec.ExitError
	switch {
	case errors.As(err, &exit):
		return fmt.Errorf("the command exited with code %d", exit.ExitStatus())
	case apierrors.IsForbidden(err):
		return fmt.Errorf("the manager is forbidden to create pods/exec in namespace %s (the chart's hooks.enabled grants it): %w", namespace, err)
	}
	return fmt.Errorf("running the command: %w", err)
}

// tail keeps the last limit bytes written to it; safe for concurrent use, since an
// abandoned command may still be writing.
type tail struct {
	mu    sync.Mutex
	limit int
	buf   []byte
	cut   bool
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) >= t.limit {
		t.cut = t.cut || len(p) > t.limit || len(t.buf) > 0
		t.buf = append(t.buf[:0], p[len(p)-t.limit:]...)
		return n, nil
	}
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.limit; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.cut = true
	}
	return n, nil
}

// String is what was kept, with "…" in front when earlier output was dropped.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cut {
		return "…" + string(t.buf)
	}
	return string(t.buf)
}
