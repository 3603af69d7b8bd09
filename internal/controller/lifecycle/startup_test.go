package lifecycle

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestStartupRecoveryRunsStepsInOrderThenOpensTheGate(t *testing.T) {
	var ran []string
	gateOpenDuringStep := false
	var r *StartupRecovery
	step := func(name string) RecoveryStep {
		return RecoveryStep{Name: name, Run: func(ctx context.Context) error {
			ran = append(ran, name)
			waitCtx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
			defer cancel()
			if r.Wait(waitCtx) == nil {
				gateOpenDuringStep = true
			}
			return nil
		}}
	}
	r = NewStartupRecovery(step("fail-in-progress"), step("resume-deleting"))
	if err := r.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if len(ran) != 2 || ran[0] != "fail-in-progress" || ran[1] != "resume-deleting" {
		t.Errorf("steps ran as %v", ran)
	}
	if gateOpenDuringStep {
		t.Error("the gate was open while a step was still running")
	}
	if err := r.Wait(context.Background()); err != nil {
		t.Errorf("Wait after Start: %v", err)
	}
}

func TestStartupRecoveryKeepsTheGateClosedOnError(t *testing.T) {
	boom := errors.New("apiserver unreachable")
	r := NewStartupRecovery(RecoveryStep{Name: "broken", Run: func(context.Context) error { return boom }})
	err := r.Start(context.Background())
	if !errors.Is(err, boom) {
		t.Fatalf("Start = %v, want the step's error", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := r.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait = %v, want the context's deadline: the gate must stay closed", err)
	}
}

func TestStartupRecoveryNeedsLeaderElection(t *testing.T) {
	if !NewStartupRecovery().NeedLeaderElection() {
		t.Error("recovery must run only on the leader")
	}
}
