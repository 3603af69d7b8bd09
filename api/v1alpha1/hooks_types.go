package v1alpha1

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BackupHooks are commands run in the backed-up pods' containers around their backup
// (DESIGN.md section 17, docs/hooks.md): pre hooks before a pod and its volumes are backed up,
// post hooks after its volume copies have been read. Pods' hook annotations
// (pre.hook.backup.cairn.dev/*, and Velero's) run in addition.
type BackupHooks struct {
	// Resources are the hook specs, each applying to the pods it selects; all that select a
	// pod run, in this order. At most 10.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	Resources []BackupResourceHookSpec `json:"resources,omitempty"`
}

// BackupResourceHookSpec selects pods and says which commands run in them.
type BackupResourceHookSpec struct {
	// Name names the hook spec in the backup's log and errors.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// IncludedNamespaces are the namespaces whose pods the hooks apply to; `*` wildcards are
	// allowed. Empty means every namespace the backup selects. At most 20.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	// +kubebuilder:validation:items:MaxLength=63
	IncludedNamespaces []string `json:"includedNamespaces,omitempty"`

	// ExcludedNamespaces are namespaces whose pods the hooks do not apply to. At most 20.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	// +kubebuilder:validation:items:MaxLength=63
	ExcludedNamespaces []string `json:"excludedNamespaces,omitempty"`

	// IncludedResources and ExcludedResources are kept as Velero has them; hooks only ever run
	// in pods, so a list that leaves pods out ("pods", "pod", "po" or "*" name them) turns the
	// spec off. At most 10 each.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	// +kubebuilder:validation:items:MaxLength=253
	IncludedResources []string `json:"includedResources,omitempty"`

	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	// +kubebuilder:validation:items:MaxLength=253
	ExcludedResources []string `json:"excludedResources,omitempty"`

	// LabelSelector, when set, keeps the pods whose labels match it: at most 20 matchLabels
	// and 20 matchExpressions.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.matchLabels) || size(self.matchLabels) <= 20",message="matchLabels may have at most 20 entries"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || size(self.matchExpressions) <= 20",message="matchExpressions may have at most 20 entries"
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`

	// Pre are run, in order, before the pod and its volumes are backed up. At most 5.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=5
	Pre []BackupResourceHook `json:"pre,omitempty"`

	// Post are run, in order, after the pod's volume copies have finished reading (right
	// after the pod, when it has none). At most 5.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=5
	Post []BackupResourceHook `json:"post,omitempty"`
}

// BackupResourceHook is one hook; exec is the only kind a backup runs.
type BackupResourceHook struct {
	// Exec runs a command in a container of the pod (the pods/exec subresource).
	// +required
	Exec *ExecHook `json:"exec"`
}

// HookErrorMode says what a failed hook does to the backup.
// +kubebuilder:validation:Enum=Continue;Fail
type HookErrorMode string

const (
	// HookErrorModeContinue: a failed hook is a warning of the backup.
	HookErrorModeContinue HookErrorMode = "Continue"
	// HookErrorModeFail: a failed hook is an error of the backup, which ends PartiallyFailed
	// (Velero's rule); a failed pre hook also leaves its pod (and volumes) out.
	HookErrorModeFail HookErrorMode = "Fail"
)

// ExecHook is a command run in a pod's container.
type ExecHook struct {
	// Container is the container to run the command in; empty means the pod's first
	// container.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Container string `json:"container,omitempty"`

	// Command is the command and its arguments, run without a shell. At most 20 words of 1024
	// characters.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=20
	// +kubebuilder:validation:items:MaxLength=1024
	Command []string `json:"command"`

	// OnError says what a failure does to the backup: Fail (the default, as Velero) or
	// Continue.
	// +optional
	// +kubebuilder:default=Fail
	OnError HookErrorMode `json:"onError,omitempty"`

	// Timeout bounds the command: from 1s to 1h; unset means the manager's
	// --default-hook-timeout (30s unless changed). A command still running then is abandoned
	// and the hook fails.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self != '' && self.matches('^([0-9]{1,5}([.][0-9]+)?h)?([0-9]{1,7}([.][0-9]+)?m)?([0-9]{1,9}([.][0-9]+)?s)?([0-9]{1,12}([.][0-9]+)?ms)?([0-9]{1,15}([.][0-9]+)?(us|µs|μs))?([0-9]{1,18}([.][0-9]+)?ns)?$') && duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="timeout must be a duration from 1s to 1h, such as 30s or 5m"
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// DefaultHookTimeout is how long a hook without a timeout may run, unless the manager's
// --default-hook-timeout says otherwise.
const DefaultHookTimeout = 30 * time.Second

// HookStatus counts the hooks of a backup or restore (a restore counts its exec hooks: its
// init hooks are containers the kubelet runs).
type HookStatus struct {
	// HooksAttempted is the number of hooks run (or tried: a missing container counts).
	// +optional
	HooksAttempted int32 `json:"hooksAttempted,omitempty"`
	// HooksFailed is the number of those that failed, whatever their onError.
	// +optional
	HooksFailed int32 `json:"hooksFailed,omitempty"`
}

// RestoreHooks are what a restore adds to, and runs in, the pods it restores (DESIGN.md
// section 17, docs/hooks.md): init containers added to a restored pod after Cairn's restore
// helper (so they see the restored volume data), and commands run in a restored pod's
// containers once they run. Pods' restore hook annotations (post.hook.restore.cairn.dev/*,
// init.hook.restore.cairn.dev/*, and Velero's) take the place of the specs' hooks of their kind.
type RestoreHooks struct {
	// Resources are the hook specs, each applying to the restored pods it selects; all that
	// select a pod apply, in this order. At most 10.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	Resources []RestoreResourceHookSpec `json:"resources,omitempty"`
}

// RestoreResourceHookSpec selects restored pods and says what is added to them and run in them.
type RestoreResourceHookSpec struct {
	// Name names the hook spec in the restore's log and errors.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// IncludedNamespaces are the namespaces, as restored (after namespaceMapping), whose pods
	// the hooks apply to; `*` wildcards are allowed. Empty means every namespace the restore
	// writes. At most 20.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	// +kubebuilder:validation:items:MaxLength=63
	IncludedNamespaces []string `json:"includedNamespaces,omitempty"`

	// ExcludedNamespaces are restored namespaces whose pods the hooks do not apply to. At most 20.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	// +kubebuilder:validation:items:MaxLength=63
	ExcludedNamespaces []string `json:"excludedNamespaces,omitempty"`

	// IncludedResources and ExcludedResources are kept as Velero has them; hooks only ever
	// apply to pods, so a list that leaves pods out ("pods", "pod", "po" or "*" name them)
	// turns the spec off. At most 10 each.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	// +kubebuilder:validation:items:MaxLength=253
	IncludedResources []string `json:"includedResources,omitempty"`

	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	// +kubebuilder:validation:items:MaxLength=253
	ExcludedResources []string `json:"excludedResources,omitempty"`

	// LabelSelector, when set, keeps the pods whose labels (as backed up) match it: at most 20
	// matchLabels and 20 matchExpressions.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.matchLabels) || size(self.matchLabels) <= 20",message="matchLabels may have at most 20 entries"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || size(self.matchExpressions) <= 20",message="matchExpressions may have at most 20 entries"
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`

	// PostHooks are the hooks, in order: init hooks are added to the pod as it is restored,
	// exec hooks run once it runs. At most 5.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=5
	PostHooks []RestoreResourceHook `json:"postHooks,omitempty"`
}

// RestoreResourceHook is one restore hook: exactly one of init and exec.
//
// +kubebuilder:validation:XValidation:rule="has(self.init) != has(self.exec)",message="a restore hook is exactly one of init and exec"
type RestoreResourceHook struct {
	// Init adds init containers to the restored pod.
	// +optional
	Init *InitRestoreHook `json:"init,omitempty"`

	// Exec runs a command in a container of the restored pod once it runs.
	// +optional
	Exec *RestoreExecHook `json:"exec,omitempty"`
}

// InitRestoreHook adds init containers to a restored pod: after Cairn's restore helper (which
// holds the pod until its volume data is written) and before the pod's own init containers.
type InitRestoreHook struct {
	// InitContainers are added in this order. At most 5.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=5
	// +kubebuilder:validation:XValidation:rule="self.all(c, !has(c.env) || size(c.env) <= 100) && self.all(c, !has(c.args) || size(c.args) <= 100) && self.all(c, !has(c.command) || size(c.command) <= 100) && self.all(c, !has(c.volumeMounts) || size(c.volumeMounts) <= 50)",message="an init hook's container may have at most 100 command words, 100 args, 100 env entries and 50 volume mounts"
	InitContainers []corev1.Container `json:"initContainers"`

	// Timeout is read for Velero's manifests and not enforced: Kubernetes runs init containers
	// without a time limit, and the restore does not wait for them (a failing one keeps its pod
	// from starting, where `kubectl describe pod` shows it). From 1s to 1h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self != '' && self.matches('^([0-9]{1,5}([.][0-9]+)?h)?([0-9]{1,7}([.][0-9]+)?m)?([0-9]{1,9}([.][0-9]+)?s)?([0-9]{1,12}([.][0-9]+)?ms)?([0-9]{1,15}([.][0-9]+)?(us|µs|μs))?([0-9]{1,18}([.][0-9]+)?ns)?$') && duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="timeout must be a duration from 1s to 1h, such as 30s or 5m"
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// RestoreExecHook is a command run in a restored pod's container once that container runs
// (and is Ready, with waitForReady).
type RestoreExecHook struct {
	// Container is the container to run the command in; empty means the pod's first
	// container.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Container string `json:"container,omitempty"`

	// Command is the command and its arguments, run without a shell. At most 20 words of 1024
	// characters.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=20
	// +kubebuilder:validation:items:MaxLength=1024
	Command []string `json:"command"`

	// OnError says what a failure does to the restore: Fail (the default; the restore ends
	// PartiallyFailed, naming the hook) or Continue (a warning).
	// +optional
	// +kubebuilder:default=Fail
	OnError HookErrorMode `json:"onError,omitempty"`

	// ExecTimeout bounds the command: from 1s to 1h; unset means 30s. A command still running
	// then is abandoned and the hook fails.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self != '' && self.matches('^([0-9]{1,5}([.][0-9]+)?h)?([0-9]{1,7}([.][0-9]+)?m)?([0-9]{1,9}([.][0-9]+)?s)?([0-9]{1,12}([.][0-9]+)?ms)?([0-9]{1,15}([.][0-9]+)?(us|µs|μs))?([0-9]{1,18}([.][0-9]+)?ns)?$') && duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="execTimeout must be a duration from 1s to 1h, such as 30s or 5m"
	ExecTimeout *metav1.Duration `json:"execTimeout,omitempty"`

	// WaitTimeout bounds the wait for the container to run (and be Ready), counted from the
	// pod's creation: from 1s to 87600h. Unset means the restore's itemOperationTimeout
	// bounds it. A container that does not run in time fails the hook.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self != '' && self.matches('^([0-9]{1,5}([.][0-9]+)?h)?([0-9]{1,7}([.][0-9]+)?m)?([0-9]{1,9}([.][0-9]+)?s)?([0-9]{1,12}([.][0-9]+)?ms)?([0-9]{1,15}([.][0-9]+)?(us|µs|μs))?([0-9]{1,18}([.][0-9]+)?ns)?$') && duration(self) >= duration('1s') && duration(self) <= duration('87600h')",message="waitTimeout must be a duration from 1s to 87600h, such as 30s or 5m"
	WaitTimeout *metav1.Duration `json:"waitTimeout,omitempty"`

	// WaitForReady, true, waits for the container to be Ready, not only running.
	// +optional
	WaitForReady *bool `json:"waitForReady,omitempty"`
}

// DefaultRestoreExecTimeout is how long a restore exec hook's command may run when it sets no
// execTimeout.
const DefaultRestoreExecTimeout = 30 * time.Second
