// Package restore brings a backup back into the cluster (DESIGN.md section 9). A run reads the
// backup's archive once, checking it against its commit marker before anything is created
// (Spool), selects items with the backup's own filter semantics (backup.Selection), prepares
// each item (metadata and status reset, namespace mapping, RestoreItemActions), and creates
// the items one priority group after another, each group in parallel on the restore's own
// worker pool. What it did is written to the restore's log, results and resource list in
// storage.
package restore
