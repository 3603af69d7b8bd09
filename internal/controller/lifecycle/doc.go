// Package lifecycle is the lifecycle that backups and restores share (DESIGN.md section 8):
// how a cancel or a deletion stops one (cancel.go), how its run starts, ends, waits for its
// storage and is found orphaned, and what a tenant is told (run.go), how a restart ends the
// runs it interrupted (startup.go), and the one status writer, checked against the owner tables
// (status.go). It is written once, over a RunKind: the small adapter that holds what truly
// differs between the kinds (kinds.go has one per kind). None of it knows a reconciler: it
// takes a client, a clock, a recorder and the object. What every reconciler shares besides —
// how it registers (conflicts.go), retries (retry.go, ratelimit.go) and remembers by UID
// (uidmap.go) — lives here too.
package lifecycle
