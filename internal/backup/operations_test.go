package backup

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

type scriptedAction struct {
	progress  OperationProgress
	err       error
	cancelled *[]string
}

func (scriptedAction) Name() string                      { return "test/scripted" }
func (scriptedAction) AppliesTo() []schema.GroupResource { return nil }
func (scriptedAction) Execute(context.Context, *unstructured.Unstructured, *cairnv1.Backup) (ExecuteResult, error) {
	return ExecuteResult{}, nil
}
func (a scriptedAction) Progress(context.Context, string, *cairnv1.Backup) (OperationProgress, error) {
	return a.progress, a.err
}
func (a scriptedAction) Cancel(_ context.Context, id string, _ *cairnv1.Backup) error {
	*a.cancelled = append(*a.cancelled, id)
	return nil
}

func TestAdvanceOperation(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	op := Operation{Action: "test/scripted", OperationID: "op-1", Started: t0}
	tests := []struct {
		name       string
		op         Operation
		action     func(*[]string) BackupItemAction
		now        time.Time
		wantPhase  string
		wantErr    string
		wantCancel bool
	}{
		{name: "still running", op: op, now: t0.Add(time.Minute),
			action: func(c *[]string) BackupItemAction {
				return scriptedAction{progress: OperationProgress{NCompleted: 3, NTotal: 10}, cancelled: c}
			},
			wantPhase: OperationInProgress},
		{name: "completed", op: op, now: t0.Add(time.Minute),
			action: func(c *[]string) BackupItemAction {
				return scriptedAction{progress: OperationProgress{Completed: true}, cancelled: c}
			},
			wantPhase: OperationCompleted},
		{name: "reported failure", op: op, now: t0.Add(time.Minute),
			action: func(c *[]string) BackupItemAction {
				return scriptedAction{progress: OperationProgress{Err: "snapshot failed"}, cancelled: c}
			},
			wantPhase: OperationFailed, wantErr: "snapshot failed"},
		{name: "progress call failed", op: op, now: t0.Add(time.Minute),
			action:    func(c *[]string) BackupItemAction { return scriptedAction{err: errors.New("boom"), cancelled: c} },
			wantPhase: OperationFailed, wantErr: "boom"},
		{name: "timed out: cancelled", op: op, now: t0.Add(2 * time.Hour),
			action:    func(c *[]string) BackupItemAction { return scriptedAction{cancelled: c} },
			wantPhase: OperationFailed, wantErr: "timed out after 1h0m0s", wantCancel: true},
		{name: "timed out, and cancelling it failed", op: op, now: t0.Add(2 * time.Hour),
			action:    func(*[]string) BackupItemAction { return failingCancelAction{} },
			wantPhase: OperationFailed, wantErr: "timed out after 1h0m0s (cancelling it failed: driver unreachable)"},
		{name: "unknown action", op: op, now: t0.Add(time.Minute),
			action:    func(*[]string) BackupItemAction { return nil },
			wantPhase: OperationFailed, wantErr: "action test/scripted is not registered"},
		{name: "finished stays finished", op: Operation{Phase: OperationCompleted, Started: t0}, now: t0.Add(5 * time.Hour),
			action:    func(c *[]string) BackupItemAction { return scriptedAction{cancelled: c} },
			wantPhase: OperationCompleted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cancelled []string
			got := AdvanceOperation(context.Background(), tt.op, tt.action(&cancelled), &cairnv1.Backup{}, tt.now, time.Hour)
			if got.Phase != tt.wantPhase || got.Error != tt.wantErr {
				t.Errorf("got %s %q, want %s %q", got.Phase, got.Error, tt.wantPhase, tt.wantErr)
			}
			if (len(cancelled) > 0) != tt.wantCancel {
				t.Errorf("cancelled = %v", cancelled)
			}
		})
	}
}

func TestNextAfterOperations(t *testing.T) {
	running := Operation{Phase: OperationInProgress}
	done := Operation{Phase: OperationCompleted}
	failed := Operation{Phase: OperationFailed}
	w, wp := cairnv1.BackupPhaseWaitingForPluginOperations, cairnv1.BackupPhaseWaitingForPluginOperationsPartiallyFailed
	tests := []struct {
		phase cairnv1.BackupPhase
		ops   []Operation
		want  cairnv1.BackupPhase
	}{
		{w, []Operation{running, done}, w},
		{w, []Operation{running, failed}, wp},
		{w, []Operation{done, done}, cairnv1.BackupPhaseFinalizing},
		{w, []Operation{done, failed}, cairnv1.BackupPhaseFinalizingPartiallyFailed},
		{wp, []Operation{done}, cairnv1.BackupPhaseFinalizingPartiallyFailed},
		{wp, []Operation{running}, wp},
	}
	for _, tt := range tests {
		if got := NextAfterOperations(tt.phase, tt.ops); got != tt.want {
			t.Errorf("NextAfterOperations(%s, %v) = %s, want %s", tt.phase, tt.ops, got, tt.want)
		}
	}
}

type failingCancelAction struct{ scriptedAction }

func (failingCancelAction) Name() string { return "test/failing-cancel" }
func (failingCancelAction) Cancel(context.Context, string, *cairnv1.Backup) error {
	return errors.New("driver unreachable")
}

func TestCancelOperations(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var cancelled []string
	registry := NewRegistry(nil, scriptedAction{cancelled: &cancelled}, failingCancelAction{})
	ops := []Operation{
		{Action: "test/scripted", OperationID: "running", Phase: OperationInProgress},
		{Action: "test/scripted", OperationID: "new"},
		{Action: "test/scripted", OperationID: "done", Phase: OperationCompleted},
		{Action: "test/scripted", OperationID: "failed", Phase: OperationFailed, Error: "boom"},
		{Action: "test/failing-cancel", OperationID: "stuck", Phase: OperationInProgress},
		{Action: "test/unregistered", OperationID: "orphan", Phase: OperationInProgress},
	}
	got := CancelOperations(context.Background(), ops, registry, &cairnv1.Backup{}, t0, "Backup cancelled by user")

	want := []struct{ phase, err string }{
		{OperationFailed, "Backup cancelled by user"},
		{OperationFailed, "Backup cancelled by user"},
		{OperationCompleted, ""},
		{OperationFailed, "boom"},
		{OperationFailed, "Backup cancelled by user (cancelling it failed: driver unreachable)"},
		{OperationFailed, "Backup cancelled by user"},
	}
	for i, w := range want {
		if got[i].Phase != w.phase || got[i].Error != w.err {
			t.Errorf("op %s: got %s %q, want %s %q", got[i].OperationID, got[i].Phase, got[i].Error, w.phase, w.err)
		}
	}
	if len(cancelled) != 2 || cancelled[0] != "running" || cancelled[1] != "new" {
		t.Errorf("Cancel called for %v, want [running new]", cancelled)
	}
	if ops[0].Phase != OperationInProgress {
		t.Error("the input was modified")
	}
	if !got[0].Updated.Equal(t0) || !got[2].Updated.IsZero() {
		t.Error("only cancelled operations are marked updated")
	}
}

// deadlineAction records whether each Cancel call had a deadline of its own.
type deadlineAction struct {
	scriptedAction
	deadlines *[]time.Time
}

func (deadlineAction) Name() string { return "test/deadline" }
func (a deadlineAction) Cancel(ctx context.Context, _ string, _ *cairnv1.Backup) error {
	d, _ := ctx.Deadline()
	*a.deadlines = append(*a.deadlines, d)
	return nil
}

// TestCancelOperationsBoundsEachCall: every Cancel gets its own deadline, so one that hangs
// cannot use up the time of the others.
func TestCancelOperationsBoundsEachCall(t *testing.T) {
	var deadlines []time.Time
	registry := NewRegistry(nil, deadlineAction{deadlines: &deadlines})
	ops := []Operation{
		{Action: "test/deadline", OperationID: "a", Phase: OperationInProgress},
		{Action: "test/deadline", OperationID: "b", Phase: OperationInProgress},
	}
	before := time.Now()
	CancelOperations(context.Background(), ops, registry, &cairnv1.Backup{}, before, "cancelled")
	if len(deadlines) != 2 {
		t.Fatalf("%d Cancel calls, want 2", len(deadlines))
	}
	for i, d := range deadlines {
		if d.IsZero() || d.Before(before.Add(OperationCallTimeout)) {
			t.Errorf("call %d: deadline %v, want its own, %s after the call started", i, d, OperationCallTimeout)
		}
	}
}

func TestOperationBytes(t *testing.T) {
	ops := []Operation{
		{Units: UnitsBytes, NCompleted: 10, NTotal: 100},
		{Units: UnitsBytes, NCompleted: 50}, // total not known yet
		{Units: "snapshots", NCompleted: 1, NTotal: 1},
		{NCompleted: 7, NTotal: 9},
	}
	if done, total := OperationBytes(ops); done != 60 || total != 150 {
		t.Fatalf("OperationBytes = %d/%d, want 60/150", done, total)
	}
	if done, total := OperationBytes(nil); done != 0 || total != 0 {
		t.Fatalf("OperationBytes(nil) = %d/%d", done, total)
	}
}

func TestAFailedOperationKeepsItsResult(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	op := Operation{Action: "test/scripted", OperationID: "ns/pod", Started: t0}
	result := []byte(`{"hooks":{"attempted":2,"failed":1}}`)
	var cancelled []string
	got := AdvanceOperation(context.Background(), op, scriptedAction{progress: OperationProgress{Err: "hook x failed", Result: result}, cancelled: &cancelled}, &cairnv1.Backup{}, t0, time.Hour)
	if got.Phase != OperationFailed || string(got.Result) != string(result) {
		t.Fatalf("got %+v", got)
	}
}

func TestHookCountsOf(t *testing.T) {
	ops := []Operation{
		{Result: []byte(`{"hooks":{"attempted":2,"failed":1}}`)},
		{Result: []byte(`{"hooks":{"attempted":1,"failed":1},"continued":1}`), Phase: OperationFailed},
		{Result: []byte(`{"snapshotID":"k1"}`)}, // a volume copy's result counts no hooks
		{},
		{Result: []byte(`not json`)},
	}
	if got, continued := HookCountsOf(ops); got != (HookCounts{Attempted: 3, Failed: 2}) || continued != 1 {
		t.Fatalf("got %+v, %d continued", got, continued)
	}
	if s := (HookCounts{}).Status(); s != nil {
		t.Fatalf("no hooks: status %+v, want none", s)
	}
	if s := (HookCounts{Attempted: 3, Failed: 1}).Status(); s == nil || s.HooksAttempted != 3 || s.HooksFailed != 1 {
		t.Fatalf("status %+v", s)
	}
	if c := HookCountsOfStatus(&cairnv1.HookStatus{HooksAttempted: 4, HooksFailed: 2}).Add(HookCounts{Attempted: 1}); c != (HookCounts{Attempted: 5, Failed: 2}) {
		t.Fatalf("sum %+v", c)
	}
}
