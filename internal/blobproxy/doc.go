// Package blobproxy carries volume data between the node agents and the storage locations.
//
// A node agent (one pod per node) runs kopia to snapshot pod volumes, but it cannot open a
// storage location itself: the chart's default location is a volume of the manager's pod, and
// S3 credentials stay in the manager. So the manager serves a small HTTP "blob proxy" (Server),
// and the node agent's kopia uses a blob.Storage (the client, registered with kopia as
// StorageType) whose every call is one request to it. The manager forwards each request to the
// location's own kopia storage (location.KopiaStorage) under <prefix>/kopia/<namespace>/.
// Kopia encrypts on the client, so the manager sees only encrypted packs. The proxy is served
// over TLS (ServingTLS: a certificate the manager makes, or the user's), and the client
// verifies it with the CA of Options.CAFile. Every blob read and write is bounded by
// location.MaxBlobSize, in both directions: a larger blob in the bucket fails the requests
// that read it, naming it and its size, and is never held in memory.
//
// # Protocol
//
// Every path is under /repositories/{location}/{namespace}/ (a DNS subdomain and a DNS label):
//
//	GET    blobs/{id}?offset=O&length=L  the bytes (length -1: from offset to the end;
//	                                     atMost=true: up to L, fewer where the blob ends)
//	GET    metadata/{id}                 {"id","length","timestamp"}
//	PUT    blobs/{id}                    the body; Cairn-Do-Not-Recreate: true refuses an existing blob
//	DELETE blobs/{id}
//	GET    blobs?prefix=P                NDJSON, one {"id","length","timestamp"} a line, then {"end":true}
//	POST   sessions                      {"id","ttlMillis","readOnly"}
//	PUT    sessions/{id}                 refresh
//	DELETE sessions/{id}                 release
//
// Blob IDs are kopia's ([0-9a-zA-Z_.-], no "..", not starting with "."), so no request names
// a key outside its repository's directory. Every request carries the node agent's projected
// ServiceAccount token (Authorization: Bearer), checked with a TokenReview bound to Audience,
// and every blob request a live session (Cairn-Session). An error's body is a message for a
// person, and its Cairn-Error header a code the client maps back to kopia's errors
// (not found, invalid range, already exists) or to this package's.
//
// # Sessions, and why maintenance may run with kopia's SafetyNone
//
// Kopia lets maintenance run beside writers (SafetyFull) by keeping unreferenced data for
// hours before deleting it, so space comes back two or three days after a backup is deleted.
// Cairn can do better because every writer of a repository goes through one place, the
// leading manager's proxy: a client takes a session before it uses a repository (Locks.Open),
// refreshes it every TTL/3 and releases it on Close; a blob request without a live session of
// its repository is refused. Locks.Maintain waits until the repository has no live session and
// no request in flight, then holds it: new sessions are refused (503, Retry-After) until the
// maintenance ends. So while maintenance runs no other client can read or write the
// repository, which is the condition kopia puts on SafetyNone.
//
// Two rules keep that true. A session that expires (an agent killed, or cut off for a TTL) is
// gone for good: its requests are refused, and the client reports every later call as failed
// (ErrNoSession) instead of taking a new session, because maintenance may have deleted what
// its open repository still refers to. And a request stays "in flight" until its backend call
// returns, even when the client gave up first, so a write the proxy already started is never
// concurrent with maintenance. The manager's own users of a repository (deleting snapshots)
// take a session through the same Locks. Sessions live in the leader's memory: after a
// failover the new leader knows none, every old session is refused, and the clients fail and
// start again; a manager that is not the leader answers 503.
package blobproxy
