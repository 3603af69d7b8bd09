package v1alpha1

// Conditions that kstatus-based tools understand (Flux, Argo CD, `kubectl wait
// --for=condition=Ready`), on Backup, Restore, Schedule and BackupStorageLocation. The
// readiness reconciler owns them and derives them from the phase alone (docs/architecture.md);
// no phase owner writes them. Each carries observedGeneration: the generation the phase was
// decided for.
const (
	// ConditionReady is True when the object is what it was asked to be: a Completed backup or
	// restore, an Enabled schedule, an Available location. Its reason is the phase.
	ConditionReady = "Ready"
	// ConditionReconciling is present, True, while Cairn is still working on the object (every
	// phase that is not terminal); its reason is the phase. It is absent otherwise.
	ConditionReconciling = "Reconciling"
	// ConditionStalled is present, True, when the object ended without reaching Ready and needs
	// a person: Failed, FailedValidation, PartiallyFailed, an Unavailable location. Its reason
	// is the phase. It is absent otherwise.
	ConditionStalled = "Stalled"
)

// ReasonProgressing is the reason of a schedule's Reconciling condition while its reconciler
// has not yet seen its latest spec (status.observedGeneration < metadata.generation).
const ReasonProgressing = "Progressing"
