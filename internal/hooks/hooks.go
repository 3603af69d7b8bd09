// Package hooks runs backup and restore hooks (DESIGN.md section 17, docs/hooks.md): commands
// run in a backed-up pod's containers through the pods/exec subresource, before the pod and
// its volumes are backed up (pre) and after its volume copies have been read (post); and, on
// restore, init containers added to a restored pod and commands run in it once it runs.
//
// Which hooks apply to a pod, and in what order, is decided here by pure functions (Select,
// FromAnnotations, SelectRestore, RestoreFromAnnotations); running one is Runner.Run, over an
// Executor that tests replace; the backup's actions (actions.go) and the restore's
// (restoreactions.go) put them into the one item machinery of internal/backup and
// internal/restore.
package hooks

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/selection"
)

// Phase is when a backup hook runs.
type Phase string

const (
	// Pre hooks run before the pod and its volumes are backed up.
	Pre Phase = "pre"
	// Post hooks run after the pod's volume copies have been read (right after the pod when
	// it has none).
	Post Phase = "post"
)

// Hook is one exec hook that applies to one pod.
type Hook struct {
	// Name says where the hook comes from, for the log and errors: "spec quiesce pre[0]" or
	// "annotation pre.hook.backup.cairn.dev".
	Name      string
	Phase     Phase
	Container string
	Command   []string
	OnError   cairnv1.HookErrorMode
	Timeout   time.Duration
}

// The annotation prefixes of backup hooks: Cairn's, then Velero's, read so that workloads
// annotated for Velero work unchanged. Velero's legacy pre hook keys (hook.backup.velero.io/*,
// without a phase) are read too.
const (
	cairnAnnotationSuffix  = "hook.backup.cairn.dev/"
	veleroAnnotationSuffix = "hook.backup.velero.io/"
)

// The keys under each prefix.
const (
	annotationContainer = "container"
	annotationCommand   = "command"
	annotationOnError   = "on-error"
	annotationTimeout   = "timeout"
)

// annotationPrefixes are the prefixes read for phase, in precedence order: the first whose
// command annotation is set defines the pod's annotation hook.
func annotationPrefixes(phase Phase) []string {
	prefixes := []string{string(phase) + "." + cairnAnnotationSuffix, string(phase) + "." + veleroAnnotationSuffix}
	if phase == Pre {
		prefixes = append(prefixes, veleroAnnotationSuffix)
	}
	return prefixes
}

// FromAnnotations reads the pod's annotation hook of phase: nil when it has none (no command
// annotation under any prefix). Cairn's annotations win over Velero's: when
// pre.hook.backup.cairn.dev/command is set, only pre.hook.backup.cairn.dev/* are read (the
// prefixes are never mixed key by key). An annotation that cannot be read (a command that is
// not a JSON array of strings, an unknown on-error, a timeout that is not a positive
// duration) is an error naming it: the hook is not run.
func FromAnnotations(annotations map[string]string, phase Phase, defaultTimeout time.Duration) (*Hook, error) {
	for _, prefix := range annotationPrefixes(phase) {
		raw, ok := annotations[prefix+annotationCommand]
		if !ok {
			continue
		}
		return annotationHook(annotations, prefix, raw, phase, annotationTimeout, defaultTimeout)
	}
	return nil, nil
}

// annotationHook reads the exec hook whose annotations start with prefix (raw is its command
// annotation): the container, the command, on-error and, under timeoutKey, its timeout
// (defaultTimeout when unset). An annotation that cannot be read is an error naming it.
func annotationHook(annotations map[string]string, prefix, raw string, phase Phase, timeoutKey string, defaultTimeout time.Duration) (*Hook, error) {
	h := &Hook{Name: "annotation " + strings.TrimSuffix(prefix, "/"), Phase: phase,
		Container: annotations[prefix+annotationContainer], OnError: cairnv1.HookErrorModeFail, Timeout: defaultTimeout}
	command, err := parseCommand(raw)
	if err != nil {
		return nil, fmt.Errorf("annotation %s%s: %w", prefix, annotationCommand, err)
	}
	h.Command = command
	if v, ok := annotations[prefix+annotationOnError]; ok {
		if h.OnError, err = parseOnError(v); err != nil {
			return nil, fmt.Errorf("annotation %s%s: %w", prefix, annotationOnError, err)
		}
	}
	if v, ok := annotations[prefix+timeoutKey]; ok {
		if h.Timeout, err = parseTimeout(v); err != nil {
			return nil, fmt.Errorf("annotation %s%s: %w", prefix, timeoutKey, err)
		}
	}
	return h, nil
}

// parseCommand reads a command annotation: a JSON array of strings when it starts with '[',
// else one word (a command without arguments, as Velero reads it).
func parseCommand(raw string) ([]string, error) {
	trimmed := strings.TrimSpace(raw)
	if trimmed == "" {
		return nil, fmt.Errorf("the command is empty")
	}
	if !strings.HasPrefix(trimmed, "[") {
		return []string{trimmed}, nil
	}
	var command []string
	if err := json.Unmarshal([]byte(trimmed), &command); err != nil {
		return nil, fmt.Errorf("%q is not a JSON array of strings: %w", raw, err)
	}
	if len(command) == 0 || command[0] == "" {
		return nil, fmt.Errorf("%q names no command", raw)
	}
	return command, nil
}

// parseOnError reads an on-error annotation: Continue or Fail, in any case.
func parseOnError(v string) (cairnv1.HookErrorMode, error) {
	for _, mode := range []cairnv1.HookErrorMode{cairnv1.HookErrorModeContinue, cairnv1.HookErrorModeFail} {
		if strings.EqualFold(strings.TrimSpace(v), string(mode)) {
			return mode, nil
		}
	}
	return "", fmt.Errorf("%q is neither Continue nor Fail", v)
}

// MaxTimeout is the longest timeout a hook may have, as the CRD bounds spec hooks.
const MaxTimeout = time.Hour

// parseTimeout reads a timeout annotation: a Go duration from 1s to MaxTimeout.
func parseTimeout(v string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration such as 30s or 5m", v)
	}
	if d < time.Second || d > MaxTimeout {
		return 0, fmt.Errorf("%q is not from 1s to %s", v, MaxTimeout)
	}
	return d, nil
}

// namesPods reports whether a resource list names pods ("pods", "pod", "po", or "*" for
// every resource; a group-qualified name is never the core group's pods).
func namesPods(list []string) bool {
	return slices.ContainsFunc(list, func(s string) bool {
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "pods", "pod", "po", "*":
			return true
		}
		return false
	})
}

// appliesToPods reports whether a hook spec's resource lists keep pods.
func appliesToPods(included, excluded []string) bool {
	return (len(included) == 0 || namesPods(included)) && !namesPods(excluded)
}

// Selects reports whether a hook spec applies to a pod: its namespace (with `*` wildcards),
// its resources (pods) and its label selector. A selector that cannot be parsed is an error.
func Selects(spec cairnv1.BackupResourceHookSpec, pod *corev1.Pod) (bool, error) {
	return podFilter{spec.Name, spec.IncludedNamespaces, spec.ExcludedNamespaces, spec.IncludedResources, spec.ExcludedResources, spec.LabelSelector}.matches(pod)
}

// podFilter is what a backup or restore hook spec selects pods by.
type podFilter struct {
	name                                   string
	includedNamespaces, excludedNamespaces []string
	includedResources, excludedResources   []string
	labelSelector                          *metav1.LabelSelector
}

func (f podFilter) matches(pod *corev1.Pod) (bool, error) {
	if !(selection.NamespaceFilter{Included: f.includedNamespaces, Excluded: f.excludedNamespaces}).Matches(pod.Namespace) {
		return false, nil
	}
	if !appliesToPods(f.includedResources, f.excludedResources) {
		return false, nil
	}
	if f.labelSelector == nil {
		return true, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(f.labelSelector)
	if err != nil {
		return false, fmt.Errorf("hook spec %s: label selector: %w", f.name, err)
	}
	return sel.Matches(labels.Set(pod.Labels)), nil
}

// Select returns the hooks of phase that apply to pod, in the order they run: the pod's
// annotation hook when it has one — it takes the place of the spec's hooks for that phase,
// Velero's rule, so that a pod's owner decides how it is quiesced — else the hooks of each
// spec that selects the pod, in spec order, each spec's in its order. errs name what could
// not be read (the annotation hook, a spec's selector); what was read still runs, except
// that an unreadable annotation hook runs nothing in its place: the spec hooks it would have
// replaced are not meant for that pod.
func Select(pod *corev1.Pod, spec *cairnv1.BackupHooks, phase Phase, defaultTimeout time.Duration) (hooks []Hook, errs []error) {
	annotated, err := FromAnnotations(pod.Annotations, phase, defaultTimeout)
	switch {
	case err != nil:
		return nil, []error{err}
	case annotated != nil:
		return []Hook{*annotated}, nil
	case spec == nil:
		return nil, nil
	}
	for _, rh := range spec.Resources {
		ok, err := Selects(rh, pod)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			continue
		}
		list := rh.Pre
		if phase == Post {
			list = rh.Post
		}
		for i, h := range list {
			if h.Exec == nil {
				continue
			}
			hook := Hook{Name: fmt.Sprintf("spec %s %s[%d]", rh.Name, phase, i), Phase: phase,
				Container: h.Exec.Container, Command: h.Exec.Command, OnError: h.Exec.OnError, Timeout: defaultTimeout}
			if hook.OnError == "" {
				hook.OnError = cairnv1.HookErrorModeFail
			}
			if h.Exec.Timeout != nil && h.Exec.Timeout.Duration > 0 {
				hook.Timeout = h.Exec.Timeout.Duration
			}
			hooks = append(hooks, hook)
		}
	}
	return hooks, errs
}
