package hooks

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// RestoreExec is one exec hook of a restored pod: a Hook (its Timeout is the exec timeout)
// and how long, and for what, it waits before it runs.
type RestoreExec struct {
	Hook
	// WaitTimeout bounds the wait for the container to run (and be Ready), counted from the
	// pod's creation; 0 means no bound of its own (the restore's itemOperationTimeout).
	WaitTimeout time.Duration
	// WaitForReady waits for the container to be Ready, not only running.
	WaitForReady bool
}

// The annotation prefixes of restore hooks, Cairn's first: the first prefix whose defining
// annotation is set is the pod's hook of that kind (never mixed key by key).
var (
	restoreExecPrefixes = []string{"post.hook.restore.cairn.dev/", "post.hook.restore.velero.io/"}
	restoreInitPrefixes = []string{"init.hook.restore.cairn.dev/", "init.hook.restore.velero.io/"}
)

// The keys under the restore hook prefixes.
const (
	annotationExecTimeout    = "exec-timeout"
	annotationWaitTimeout    = "wait-timeout"
	annotationWaitForReady   = "wait-for-ready"
	annotationContainerImage = "container-image"
	annotationContainerName  = "container-name"
)

// DefaultInitHookContainer names an init hook's container when its annotations name none.
const DefaultInitHookContainer = "restore-hook"

// maxWaitTimeout is the longest wait-timeout, as the CRD bounds waitTimeout.
const maxWaitTimeout = 87600 * time.Hour

// RestoreExecFromAnnotations reads the pod's annotation exec hook
// (post.hook.restore.cairn.dev/{container,command,on-error,exec-timeout,wait-timeout,
// wait-for-ready}, or Velero's post.hook.restore.velero.io/*): nil when it has none (no command
// annotation under either prefix). Cairn's prefix wins. An annotation that cannot be read is
// an error naming it: the hook is not run.
func RestoreExecFromAnnotations(annotations map[string]string) (*RestoreExec, error) {
	for _, prefix := range restoreExecPrefixes {
		raw, ok := annotations[prefix+annotationCommand]
		if !ok {
			continue
		}
		hook, err := annotationHook(annotations, prefix, raw, Post, annotationExecTimeout, cairnv1.DefaultRestoreExecTimeout)
		if err != nil {
			return nil, err
		}
		h := &RestoreExec{Hook: *hook}
		if v, ok := annotations[prefix+annotationWaitTimeout]; ok {
			if h.WaitTimeout, err = parseDuration(v, maxWaitTimeout); err != nil {
				return nil, fmt.Errorf("annotation %s%s: %w", prefix, annotationWaitTimeout, err)
			}
		}
		if v, ok := annotations[prefix+annotationWaitForReady]; ok {
			if h.WaitForReady, err = strconv.ParseBool(strings.TrimSpace(v)); err != nil {
				return nil, fmt.Errorf("annotation %s%s: %q is neither true nor false", prefix, annotationWaitForReady, v)
			}
		}
		return h, nil
	}
	return nil, nil
}

// RestoreInitFromAnnotations reads the pod's annotation init hook
// (init.hook.restore.cairn.dev/{container-image,container-name,command}, or Velero's
// init.hook.restore.velero.io/*): one init container, nil when the pod has none (neither an
// image nor a command annotation under either prefix). Cairn's prefix wins. The image is
// required; the command is optional (the image's entrypoint runs); the name defaults to
// DefaultInitHookContainer.
func RestoreInitFromAnnotations(annotations map[string]string) (*corev1.Container, error) {
	for _, prefix := range restoreInitPrefixes {
		image, hasImage := annotations[prefix+annotationContainerImage]
		raw, hasCommand := annotations[prefix+annotationCommand]
		if !hasImage && !hasCommand {
			continue
		}
		if strings.TrimSpace(image) == "" {
			return nil, fmt.Errorf("annotation %s%s: an init hook needs an image", prefix, annotationContainerImage)
		}
		c := &corev1.Container{Name: DefaultInitHookContainer, Image: strings.TrimSpace(image)}
		if name, ok := annotations[prefix+annotationContainerName]; ok {
			c.Name = strings.TrimSpace(name)
			if problem := containerNameProblem(c.Name); problem != "" {
				return nil, fmt.Errorf("annotation %s%s: %s", prefix, annotationContainerName, problem)
			}
		}
		if hasCommand {
			command, err := parseCommand(raw)
			if err != nil {
				return nil, fmt.Errorf("annotation %s%s: %w", prefix, annotationCommand, err)
			}
			c.Command = command
		}
		return c, nil
	}
	return nil, nil
}

// containerNameProblem says why name cannot name a container ("" when it can): a DNS label.
func containerNameProblem(name string) string {
	if name == "" || len(name) > 63 {
		return fmt.Sprintf("%q is not a container name: 1 to 63 characters", name)
	}
	for i, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
		case r == '-' && i > 0 && i < len(name)-1:
		default:
			return fmt.Sprintf("%q is not a container name: lowercase letters, digits and '-', beginning and ending with a letter or digit", name)
		}
	}
	return ""
}

// parseDuration reads a duration annotation: a Go duration from 1s to limit.
func parseDuration(v string, limit time.Duration) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration such as 30s or 5m", v)
	}
	if d < time.Second || d > limit {
		return 0, fmt.Errorf("%q is not from 1s to %s", v, limit)
	}
	return d, nil
}

// SelectRestoreInit returns the init hook containers of pod — the backed-up pod with its
// restored namespace — in the order they are added. The pod's annotation init hook takes the
// place of the specs' init hooks (Velero's rule); else the init hooks of each spec that
// selects the pod apply, in spec order, each spec's in its order. errs name what could not be
// read; what was read still applies, except that an unreadable annotation hook applies
// nothing in its place (the spec hooks are not meant for that pod).
func SelectRestoreInit(pod *corev1.Pod, spec *cairnv1.RestoreHooks) (containers []corev1.Container, errs []error) {
	annotated, err := RestoreInitFromAnnotations(pod.Annotations)
	switch {
	case err != nil:
		return nil, []error{err}
	case annotated != nil:
		return []corev1.Container{*annotated}, nil
	}
	errs = eachSelecting(pod, spec, func(_ string, _ int, h cairnv1.RestoreResourceHook) {
		if h.Init != nil {
			containers = append(containers, h.Init.InitContainers...)
		}
	})
	return containers, errs
}

// SelectRestoreExec returns the exec hooks of pod (as SelectRestoreInit has it), in the order
// they run, by the same rule: the pod's annotation exec hook, else the specs' exec hooks.
func SelectRestoreExec(pod *corev1.Pod, spec *cairnv1.RestoreHooks) (hooks []RestoreExec, errs []error) {
	annotated, err := RestoreExecFromAnnotations(pod.Annotations)
	switch {
	case err != nil:
		return nil, []error{err}
	case annotated != nil:
		return []RestoreExec{*annotated}, nil
	}
	errs = eachSelecting(pod, spec, func(name string, i int, h cairnv1.RestoreResourceHook) {
		if h.Exec != nil {
			hooks = append(hooks, restoreExecOfSpec(fmt.Sprintf("spec %s postHooks[%d]", name, i), h.Exec))
		}
	})
	return hooks, errs
}

// eachSelecting calls f with each post hook of each spec that selects pod, in order; errs name
// the specs whose selector could not be read.
func eachSelecting(pod *corev1.Pod, spec *cairnv1.RestoreHooks, f func(spec string, i int, h cairnv1.RestoreResourceHook)) (errs []error) {
	if spec == nil {
		return nil
	}
	for _, rh := range spec.Resources {
		ok, err := podFilter{rh.Name, rh.IncludedNamespaces, rh.ExcludedNamespaces, rh.IncludedResources, rh.ExcludedResources, rh.LabelSelector}.matches(pod)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			continue
		}
		for i, h := range rh.PostHooks {
			f(rh.Name, i, h)
		}
	}
	return errs
}

// restoreExecOfSpec is the exec hook of a spec, with its defaults.
func restoreExecOfSpec(name string, e *cairnv1.RestoreExecHook) RestoreExec {
	h := RestoreExec{Hook: Hook{Name: name, Phase: Post, Container: e.Container, Command: e.Command, OnError: e.OnError,
		Timeout: cairnv1.DefaultRestoreExecTimeout}}
	if h.OnError == "" {
		h.OnError = cairnv1.HookErrorModeFail
	}
	if e.ExecTimeout != nil && e.ExecTimeout.Duration > 0 {
		h.Timeout = e.ExecTimeout.Duration
	}
	if e.WaitTimeout != nil && e.WaitTimeout.Duration > 0 {
		h.WaitTimeout = e.WaitTimeout.Duration
	}
	h.WaitForReady = e.WaitForReady != nil && *e.WaitForReady
	return h
}

// WithInitHooks returns the init containers of a restored pod with hooks added: after the
// leading containers named in first (Cairn's restore helper, when the pod has it, so that the
// hooks see the restored data), before the pod's own. A hook container whose name another of
// the pod's containers (or an earlier hook) has is an error naming it.
func WithInitHooks(pod *corev1.Pod, first string, hooks []corev1.Container) ([]corev1.Container, error) {
	taken := map[string]bool{}
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			taken[c.Name] = true
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		taken[c.Name] = true
	}
	for _, h := range hooks {
		if taken[h.Name] {
			return nil, fmt.Errorf("init hook container %q: the pod already has a container of that name", h.Name)
		}
		taken[h.Name] = true
	}
	at := 0
	if len(pod.Spec.InitContainers) > 0 && first != "" && pod.Spec.InitContainers[0].Name == first {
		at = 1
	}
	out := make([]corev1.Container, 0, len(pod.Spec.InitContainers)+len(hooks))
	out = append(out, pod.Spec.InitContainers[:at]...)
	out = append(out, hooks...)
	return append(out, pod.Spec.InitContainers[at:]...), nil
}
