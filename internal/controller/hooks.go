package controller

import (
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/cairn-backup/cairn/internal/hooks"
)

// HooksConfig is the manager's part of backup and restore hooks (DESIGN.md section 17, docs/hooks.md).
type HooksConfig struct {
	// Disabled says the manager was not granted pods/exec (--hooks-enabled=false, the chart's
	// hooks.enabled): a backup's hooks then fail, each saying so, and none is tried.
	Disabled bool
	// DefaultTimeout bounds a hook that sets no timeout (--default-hook-timeout); 0 means
	// cairnv1.DefaultHookTimeout.
	DefaultTimeout time.Duration
	// Executor runs the hooks' commands; nil means pods/exec through the API server with the
	// manager's identity (hooks.RemoteExecutor). Tests give a fake.
	Executor hooks.Executor
}

// hooksDisabledMessage is every hook's failure when the manager may not exec into pods.
const hooksDisabledMessage = "hooks are disabled in this installation: the manager was started with --hooks-enabled=false (the chart's hooks.enabled) and holds no pods/exec permission"

// hooks makes the one hook runner the backup's pre and post hook actions and the restore's exec
// hook action share. Team backups and restores run hooks only where their requester may create
// pods/exec (requester.Resolver.ExecAccess).
func (w *wiring) hooks(mgr ctrl.Manager) (*hooks.Runner, error) {
	cfg := w.cfg.Hooks
	r := &hooks.Runner{Executor: cfg.Executor, Pods: mgr.GetAPIReader(), Access: w.requesters.ExecAccess,
		DefaultTimeout: cfg.DefaultTimeout, Clock: w.cfg.Clock}
	if cfg.Disabled {
		r.Disabled = hooksDisabledMessage
	}
	if r.Executor == nil && !cfg.Disabled {
		executor, err := hooks.NewRemoteExecutor(mgr.GetConfig())
		if err != nil {
			return nil, fmt.Errorf("creating the hook executor: %w", err)
		}
		r.Executor = executor
	}
	return r, nil
}
