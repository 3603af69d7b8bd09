#!/usr/bin/env bash
# Runs Cairn's benchmarks and writes the report docs/benchmarks.md (raw output beside it in
# docs/bench/). Numbers come from this machine at this time: compare runs on the same machine.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
mkdir -p docs/bench
BENCHTIME=${BENCHTIME:-3x}
# BENCHES chooses which benchmarks run (default: all but hooks); the report is written from every raw
# output in docs/bench/, so the others keep their last numbers. "hooks" runs on the one-node
# cluster (it brings the node up, as 'make test-node' does: run 'make image' first) and is run
# only when named.
BENCHES=${BENCHES:-storage cloud queue backup cancel deletion restore encryption restorecancel expiry sync untrusted tenant volumes writer}
want() { [[ " $BENCHES " == *" $1 "* ]]; }

if want storage; then
  echo "bench: storage (256 MiB streams, $BENCHTIME)" >&2
  go test -run '^$' -bench . -skip '^BenchmarkCloud' -benchtime "$BENCHTIME" -benchmem ./internal/storage/ | tee docs/bench/storage.txt >&2
fi

if want cloud; then
  echo "bench: cloud (256 MiB through Cairn's azure and gcs stores next to each SDK's plain single upload and download, in turns, $BENCHTIME; Azurite and fake-gcs-server on 127.0.0.1)" >&2
  go test -run '^$' -bench '^BenchmarkCloud' -benchtime "$BENCHTIME" -benchmem -timeout 30m ./internal/storage/ | tee docs/bench/cloud.txt >&2
  echo "bench: cloud (10k ConfigMaps backed up and restored by the manager binary through a filesystem, an azure and a gcs location in turns; envtest control plane)" >&2
  make -s build
  go test -run '^$' -bench '^BenchmarkCloud10kConfigMaps$' -benchtime 1x -timeout 30m ./test/bench/ | tee docs/bench/cloudcms.txt >&2
fi

if want queue; then
  echo "bench: queue (500-backup drain, hand-off latency, a pass over 1,000 x 2,000; envtest control plane)" >&2
  go test -run '^$' -bench Queue -benchtime 1x -timeout 20m ./test/bench/ | tee docs/bench/queue.txt >&2
fi

if want backup; then
  echo "bench: backup (10k, 100k and 300k ConfigMaps; the manager binary on an envtest control plane; about 10 minutes)" >&2
  make -s build
  go test -run '^$' -bench Backup -benchtime 1x -timeout 40m ./test/bench/ | tee docs/bench/backup.txt >&2
fi

if want cancel; then
  echo "bench: cancel (20k ConfigMaps, cancelled 1 s into InProgress, 5 runs; envtest control plane)" >&2
  go test -run '^$' -bench '^BenchmarkCancel' -benchtime 1x -timeout 20m ./test/bench/ | tee docs/bench/cancel.txt >&2
fi

if want deletion; then
  echo "bench: deletion (a 10k-item backup deleted while 5 backups start in another location)" >&2
  go test -run '^$' -bench Deletion -benchtime 1x -timeout 20m ./test/bench/ | tee docs/bench/deletion.txt >&2
fi

if want restore; then
  echo "bench: restore (10k ConfigMaps restored by the manager binary with 8, 16 and 1 workers, in turns with 16 goroutines creating them, 3 rounds each; envtest control plane)" >&2
  make -s build
  go test -run '^$' -bench '^BenchmarkRestore10k' -benchtime 1x -timeout 20m ./test/bench/ | tee docs/bench/restore.txt >&2
fi

if want encryption; then
  echo "bench: encryption (10k ConfigMaps backed up twice into a plain and an encrypted location in turns, then restored from each, by the manager binary; envtest control plane)" >&2
  make -s build
  go test -run '^$' -bench '^BenchmarkEncryption10kConfigMaps$' -benchtime 1x -timeout 30m ./test/bench/ | tee docs/bench/encryption.txt >&2
fi

if want restorecancel; then
  echo "bench: restorecancel (a restore of 20k ConfigMaps cancelled 1 s after its first create, 5 runs; envtest control plane)" >&2
  go test -run '^$' -bench '^BenchmarkRestoreCancel' -benchtime 1x -timeout 20m ./test/bench/ | tee docs/bench/restorecancel.txt >&2
fi

if want expiry; then
  echo "bench: expiry (200 backups in a filesystem location expiring at once; envtest control plane)" >&2
  go test -run '^$' -bench '^BenchmarkExpiry' -benchtime 1x -timeout 20m ./test/bench/ | tee docs/bench/expiry.txt >&2
fi

if want sync; then
  echo "bench: sync (2,000 committed backups synced into an empty cluster, then an idle pass; envtest control plane)" >&2
  go test -run '^$' -bench '^BenchmarkSync' -benchtime 1x -timeout 20m ./test/bench/ | tee docs/bench/sync.txt >&2
fi

if want untrusted; then
  echo "bench: untrusted (a restore of an archive with one 512 MiB JSON entry and a wrong checksum; in process, no control plane)" >&2
  go test -run '^$' -bench '^BenchmarkRestoreReadBomb$' -benchtime 3x ./internal/restore/ | tee docs/bench/untrusted.txt >&2
fi

if want tenant; then
  echo "bench: tenant (10k ConfigMaps of one team namespace backed up and restored by the manager binary as the operator and as a tenant, 5 times each, in turn; envtest control plane; about 6 minutes)" >&2
  make -s build
  go test -run '^$' -bench '^BenchmarkTenant10kConfigMaps$' -benchtime 1x -timeout 30m ./test/bench/ | tee docs/bench/tenant.txt >&2
fi

if want volumes; then
  echo "bench: volumes (200 MiB random + 10,000 files of 4 KiB copied twice through the blob proxy by a child process, next to tar | sha256sum, then restored, next to tar -xf; no control plane)" >&2
  go test -run '^$' -bench '^BenchmarkVolumes200MiBAnd10kFiles$' -benchtime 1x -timeout 20m ./test/bench/ | tee docs/bench/volumes.txt >&2
fi

if want writer; then
  echo "bench: writer (the volume benchmark's tree restored from a filesystem repository by kopia's FilesystemOutput and by Cairn's confined writer, in turns, 5 rounds; no control plane)" >&2
  go test -run '^$' -bench '^BenchmarkRestoreWriters$' -benchtime 1x -timeout 30m ./internal/repository/ | tee docs/bench/writer.txt >&2
fi

if want hooks; then
  echo "bench: hooks (an empty pre+post hook pair on each of 50 pods in one backup, against none; the one-node cluster)" >&2
  CAIRN_NODE_MEASURE=$ROOT/docs/bench/hooks.txt go test -tags e2enode -timeout 30m ./test/e2e/node/... \
    -args -ginkgo.focus='measures the time an empty pre and post hook pair' >&2
  cat docs/bench/hooks.txt >&2
fi

# metric FILE BENCH UNIT: the value a benchmark reported for a unit.
metric() {
  awk -v b="$2" -v u="$3" '$1 ~ "^Benchmark"b"(-[0-9]+)?$" { for (i=2; i<=NF; i++) if ($(i)==u) print $(i-1) }' "$1"
}

# verdict VALUE OP GOAL: "pass" when VALUE OP GOAL holds (OP is >= or <), else "**miss**"
# and by how much.
verdict() {
  awk -v v="$1" -v op="$2" -v g="$3" 'BEGIN {
    if (v == "") { print "**no result**"; exit }
    if (op == ">=") { if (v+0 >= g+0) print "pass"; else printf "**miss** (%.0f%% short)\n", (g-v)*100/g }
    else { if (v+0 < g+0) print "pass"; else printf "**miss** (%.0f%% over)\n", (v-g)*100/g }
  }'
}

# table FILE: one markdown row per benchmark line: name, MB/s, ms/op, B/op.
table() {
  awk '/^Benchmark/ && $1 !~ /^Benchmark(EncryptionCost|EncryptedAhead)256MiB/ {
    name=$1; sub(/-[0-9]+$/, "", name); sub(/^Benchmark/, "", name)
    ms=$3/1e6; mbs=""; bop=""
    for (i=4; i<=NF; i++) { if ($(i)=="MB/s") mbs=$(i-1); if ($(i)=="B/op") bop=$(i-1) }
    printf "| %s | %s | %.0f | %.1f |\n", name, mbs, ms, bop/1048576
  }' "$1"
}

cat >docs/benchmarks.md <<MD
# Benchmarks

Written by \`make bench\` (hack/bench.sh) on $(date -u +%Y-%m-%d): $(nproc) cores,
$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo), Go $(go env GOVERSION | sed 's/^go//').
These machines are shared and noisy: compare runs made on the same machine, and read the
ratios more than the absolute numbers. Raw output is in \`docs/bench/\`.

## Storage: 256 MiB upload and download

A 256 MiB incompressible stream of unknown length (as an archive being written is), through
Cairn's providers and, next to them, the floor: a plain file copy (with fsync) and a plain
single-request AWS SDK PutObject/GetObject of the same bytes. The S3 server is versitygw
(posix backend) on 127.0.0.1, so the network is loopback and the disk is the same.

| benchmark | MB/s | ms/op | MiB allocated/op |
|---|---|---|---|
$(table docs/bench/storage.txt)

Encryption's cost in the same run (issue 31; goal: no more than 10% slower, memory unchanged):
\`BenchmarkEncryptionCost256MiB\` moves the same archive through a plain and an encrypted location
of each provider in turns (plain first, then encrypted first, round after round), so that the
load of the moment falls on both alike; the medians of the rounds and their ratio.

| measurement | plain | encrypted | ratio | goal |
|---|---|---|---|---|
| filesystem: upload | $(metric docs/bench/storage.txt EncryptionCost256MiB filesystem-upload-plain-ms) ms | $(metric docs/bench/storage.txt EncryptionCost256MiB filesystem-upload-encrypted-ms) ms | $(metric docs/bench/storage.txt EncryptionCost256MiB filesystem-upload-ratio) | ≤ 1.1 ($(verdict "$(metric docs/bench/storage.txt EncryptionCost256MiB filesystem-upload-ratio)" "<" 1.1)) |
| filesystem: verified read | $(metric docs/bench/storage.txt EncryptionCost256MiB filesystem-verified-read-plain-ms) ms | $(metric docs/bench/storage.txt EncryptionCost256MiB filesystem-verified-read-encrypted-ms) ms | $(metric docs/bench/storage.txt EncryptionCost256MiB filesystem-verified-read-ratio) | ≤ 1.1 ($(verdict "$(metric docs/bench/storage.txt EncryptionCost256MiB filesystem-verified-read-ratio)" "<" 1.1)) |
| s3: upload | $(metric docs/bench/storage.txt EncryptionCost256MiB s3-upload-plain-ms) ms | $(metric docs/bench/storage.txt EncryptionCost256MiB s3-upload-encrypted-ms) ms | $(metric docs/bench/storage.txt EncryptionCost256MiB s3-upload-ratio) | ≤ 1.1 ($(verdict "$(metric docs/bench/storage.txt EncryptionCost256MiB s3-upload-ratio)" "<" 1.1)) |
| s3: verified read | $(metric docs/bench/storage.txt EncryptionCost256MiB s3-verified-read-plain-ms) ms | $(metric docs/bench/storage.txt EncryptionCost256MiB s3-verified-read-encrypted-ms) ms | $(metric docs/bench/storage.txt EncryptionCost256MiB s3-verified-read-ratio) | ≤ 1.1 ($(verdict "$(metric docs/bench/storage.txt EncryptionCost256MiB s3-verified-read-ratio)" "<" 1.1)) |

And the A/B of decrypting ahead of the reader (\`BenchmarkEncryptedAhead256MiB\`, filesystem, in
turns, medians; ratios to plain in parentheses):

| measurement | plain | decrypted in the reader's goroutine | decrypted ahead (what Cairn does) |
|---|---|---|---|
| verified read | $(metric docs/bench/storage.txt EncryptedAhead256MiB verified-read-plain-ms) ms | $(metric docs/bench/storage.txt EncryptedAhead256MiB verified-read-direct-ms) ms ($(metric docs/bench/storage.txt EncryptedAhead256MiB verified-read-direct-ratio)) | $(metric docs/bench/storage.txt EncryptedAhead256MiB verified-read-ahead-ms) ms ($(metric docs/bench/storage.txt EncryptedAhead256MiB verified-read-ahead-ratio)) |

How to read it:
- Cairn's uploads go through \`storage.PutArchive\`, which computes the archive's SHA-256 on the
  way (the metadata object records it); the floor rows hash nothing. On the filesystem the
  hash is most of the gap to the plain copy; the temp file + fsync + rename costs little.
- The s3 provider streams a multipart upload (8 MiB parts, 4 in flight), so it needs no temp
  file and no known length; it keeps up with, or beats, one plain PutObject of a seekable
  buffer. Its allocations are the part buffers, bounded by part size × concurrency, not by
  the archive's size.
- The verified rows read the archive as a restore does: the commit marker, then
  \`storage.ReadArchive\`, which verifies the SHA-256 while it unpacks the tar.gz; the plain rows
  read the same object without verifying or unpacking. The plain file read comes from the
  page cache. Their allocations are the entries, each read whole and then dropped (the
  benchmark's archive holds 1 MiB entries; a restore caps an entry at
  --max-archive-entry-size), never the archive at once.
- The encrypted rows (issue 31; goal: no more than 10% slower, memory unchanged) are the same
  calls through an encrypted location's store (docs/storage.md: AES-256-GCM, Tink's streaming
  AEAD in 64 KiB segments; a read decrypts ahead of its reader in a goroutine of its own). They
  run minutes after the plain rows, and on this shared machine (2 cores, other sessions' test
  suites and a kubelet beside it) the load moves more between two rows than encryption costs:
  the ratio of the separate rows swung from 0.7 to 2.5 in the runs made for the switch to
  AES-GCM. The goal is read from the table in turns above (\`BenchmarkEncryptionCost256MiB\`).
- In turns, the runs made for the switch (2026-11-27; encrypted / plain, medians of 3 to 6
  rounds). With Put sealing in the caller's goroutine, four runs: filesystem upload 0.83, 0.91,
  1.36 and 1.37; filesystem verified read 1.26, 0.95, 1.08 and 1.15; s3 upload 1.47, 1.18, 1.01
  and 1.10; s3 verified read 1.11, 1.63, 1.04 and 0.83 (the first two at a load of 7 to 14, the
  others at 1 to 5). The filesystem upload missed the goal by about a quarter: its plain path is
  the SHA-256 and the writes, one after the other in one goroutine, and encrypting added AES-GCM
  and two copies to that same goroutine. Now a Put reads the caller's stream (PutArchive's
  SHA-256) ahead, in a goroutine of its own, while the other seals and writes
  (\`encrypted_ahead.go\`): in three runs at a load of about 1, filesystem upload 0.92, 1.17 (an
  intermediate version that sealed ahead instead) and 1.05; the run in the table above has every
  row within the goal. On a machine with no idle core the hand-over cannot overlap anything and
  costs a copy: the earlier runs at a load of 7 to 14 are what to expect there. Memory: the
  encrypted rows allocate what the plain ones do plus under 1 MiB (the segments and the
  read-ahead's four 64 KiB buffers each way), and the 10k benchmark's peak RSS is within 5 MiB of
  the plain location's.
- The formats alone, in memory (\`EncryptedFormats64MiB\` rows, no disk, no checksum): reading
  the age files earlier builds wrote runs at 0.6 to 1.0 GB/s and allocates the whole object
  again, a fresh 64 KiB buffer per chunk; reading AES-GCM at 1.2 to 2.9 GB/s allocating under
  0.5 MiB, writing it at 1.1 to 2.4 GB/s. That is what the switch from age bought: before it,
  the verified reads were 30% to 64% slower encrypted.
- Where the rest goes (\`-cpuprofile\` of the filesystem rows): the plain verified read is
  itself CPU-bound, and its largest part is the SHA-256 of the archive (with the CPU's SHA
  instructions), then gunzip and tar; decrypting adds AES-GCM, about 50 to 60 ms of CPU per
  256 MiB, and one copy of every byte. Read ahead, that work runs on the other core while the
  reader hashes and unpacks: in turns it was faster than decrypting in the reader's goroutine
  in every run (the A/B table above; 1.14 against 1.30 and 1.30 against 1.33 at a load of 1 to
  5, 0.88 against 1.09 and 1.33 against 1.63 at 7 to 14), by little when the machine is quiet:
  handing 64 KiB chunks from one goroutine to the other costs part of what it saves. An
  upload adds AES-GCM and two copies (into Tink's segment buffer and out of Cairn's buffer of
  sealed segments) to a path that is already the SHA-256 and the writes into the page cache.
  Where the hand-over sits decides whether it pays: sealing ahead of the writes (after
  encrypting) left the SHA-256 and AES-GCM on one core, and was slower in two of three runs
  (1.54 against 1.41, 1.88 against 1.49 at a load of 7 to 14; 647 against 705 ms at 3) and 1.17
  at a load of 1; reading the plaintext ahead of the sealing (what Cairn does) puts the
  SHA-256 on one core and AES-GCM with the writes on the other. A backup's archive is written
  once, while items are still
  being listed from the API server: see "Encryption" below for what a whole backup costs.
MD
cat >>docs/benchmarks.md <<MD

## Azure and GCS: 256 MiB through the emulators

The same 256 MiB archive (incompressible 1 MiB entries, mapped from a file so that the memory
measured is the transfer's) through Cairn's azure store on Azurite 3.37.0 and its gcs store on
fake-gcs-server v1.56.1, both on 127.0.0.1, next to the provider SDK's own transfers of the same
bytes in the same run (\`BenchmarkCloudAzure256MiB\`, \`BenchmarkCloudGCS256MiB\`; issue 44's goal:
within 1.2× of the SDK's plain single upload and download, memory bounded by part size ×
concurrency). In each round every transfer goes first in turn; medians of the rounds. Peak
memory is sampled every 2 ms: the anonymous resident memory (which counts the buffers the
Azure SDK maps outside the Go heap) and the Go heap, above where each transfer started.

| measurement | azure (Azurite) | gcs (fake-gcs-server) |
|---|---|---|
| SDK: one single upload of the buffer (the floor) | $(metric docs/bench/cloud.txt CloudAzure256MiB upload-sdk-ms) ms | $(metric docs/bench/cloud.txt CloudGCS256MiB upload-sdk-ms) ms |
| SDK: its streaming upload, same part size and concurrency as Cairn's | $(metric docs/bench/cloud.txt CloudAzure256MiB upload-sdk-stream-ms) ms ($(metric docs/bench/cloud.txt CloudAzure256MiB sdk-stream-ratio)× the single) | $(metric docs/bench/cloud.txt CloudGCS256MiB upload-sdk-stream-ms) ms ($(metric docs/bench/cloud.txt CloudGCS256MiB sdk-stream-ratio)× the single) |
| Cairn: upload (\`PutArchive\`: streaming, SHA-256 on the way) | $(metric docs/bench/cloud.txt CloudAzure256MiB upload-cairn-ms) ms | $(metric docs/bench/cloud.txt CloudGCS256MiB upload-cairn-ms) ms |
| Cairn ÷ SDK single upload (goal ≤ 1.2) | $(metric docs/bench/cloud.txt CloudAzure256MiB upload-ratio) ($(verdict "$(metric docs/bench/cloud.txt CloudAzure256MiB upload-ratio)" "<" 1.2)) | $(metric docs/bench/cloud.txt CloudGCS256MiB upload-ratio) ($(verdict "$(metric docs/bench/cloud.txt CloudGCS256MiB upload-ratio)" "<" 1.2)) |
| Cairn ÷ SDK streaming upload | $(metric docs/bench/cloud.txt CloudAzure256MiB upload-stream-ratio) | $(metric docs/bench/cloud.txt CloudGCS256MiB upload-stream-ratio) |
| the emulator's CPU ÷ wall time, during Cairn's upload | $(metric docs/bench/cloud.txt CloudAzure256MiB upload-emulator-cpu-share) | $(metric docs/bench/cloud.txt CloudGCS256MiB upload-emulator-cpu-share) |
| SDK: download (the floor) | $(metric docs/bench/cloud.txt CloudAzure256MiB download-sdk-ms) ms | $(metric docs/bench/cloud.txt CloudGCS256MiB download-sdk-ms) ms |
| Cairn: plain \`Get\` ÷ SDK download | $(metric docs/bench/cloud.txt CloudAzure256MiB download-get-ratio) | $(metric docs/bench/cloud.txt CloudGCS256MiB download-get-ratio) |
| Cairn: verified read (\`ReadArchive\`: gunzip, tar, SHA-256) | $(metric docs/bench/cloud.txt CloudAzure256MiB download-cairn-ms) ms | $(metric docs/bench/cloud.txt CloudGCS256MiB download-cairn-ms) ms |
| Cairn verified read ÷ SDK download (goal ≤ 1.2) | $(metric docs/bench/cloud.txt CloudAzure256MiB download-ratio) ($(verdict "$(metric docs/bench/cloud.txt CloudAzure256MiB download-ratio)" "<" 1.2)) | $(metric docs/bench/cloud.txt CloudGCS256MiB download-ratio) ($(verdict "$(metric docs/bench/cloud.txt CloudGCS256MiB download-ratio)" "<" 1.2)) |
| part size × concurrency | $(metric docs/bench/cloud.txt CloudAzure256MiB bound-MiB) MiB (8 MiB × 4) | $(metric docs/bench/cloud.txt CloudGCS256MiB bound-MiB) MiB (8 MiB × 1) |
| Cairn's upload, peak memory: anonymous RSS / heap | $(metric docs/bench/cloud.txt CloudAzure256MiB upload-cairn-peak-anon-MiB) / $(metric docs/bench/cloud.txt CloudAzure256MiB upload-cairn-peak-heap-MiB) MiB | $(metric docs/bench/cloud.txt CloudGCS256MiB upload-cairn-peak-anon-MiB) / $(metric docs/bench/cloud.txt CloudGCS256MiB upload-cairn-peak-heap-MiB) MiB |
| the SDK's streaming upload, peak memory: anonymous RSS / heap | $(metric docs/bench/cloud.txt CloudAzure256MiB upload-sdk-stream-peak-anon-MiB) / $(metric docs/bench/cloud.txt CloudAzure256MiB upload-sdk-stream-peak-heap-MiB) MiB | $(metric docs/bench/cloud.txt CloudGCS256MiB upload-sdk-stream-peak-anon-MiB) / $(metric docs/bench/cloud.txt CloudGCS256MiB upload-sdk-stream-peak-heap-MiB) MiB |
| Cairn's verified read, peak memory: anonymous RSS / heap | $(metric docs/bench/cloud.txt CloudAzure256MiB download-cairn-peak-anon-MiB) / $(metric docs/bench/cloud.txt CloudAzure256MiB download-cairn-peak-heap-MiB) MiB | $(metric docs/bench/cloud.txt CloudGCS256MiB download-cairn-peak-anon-MiB) / $(metric docs/bench/cloud.txt CloudGCS256MiB download-cairn-peak-heap-MiB) MiB |

How to read it:
- **The emulators dominate the uploads.** Cairn streams an archive of unknown length, so it
  uploads in parts (Azure blocks committed last, GCS resumable chunks); the floor the issue
  names is one single request of a buffer whose length is known. On these emulators parts cost
  far more than one request — the SDK's *own* streaming upload of the same bytes is the
  "SDK streaming" row, several times its single upload — while Cairn is close to the SDK's
  streaming upload (the "Cairn ÷ SDK streaming" row; Cairn also hashes the archive). In their
  sources: Azurite writes each staged block to its extent files and reads it back to compute
  the block's CRC64 (a single Put Blob gets only an MD5);
  fake-gcs-server appends each resumable chunk to the object it holds in memory and computes
  its CRC32C and MD5 again over everything received so far (32 chunks of 8 MiB: about 4 GiB
  hashed), and its CPU is most of the wall time of Cairn's upload (the emulator's CPU row).
  Against the real services parts go in parallel over separate connections (Azure: 4 in
  flight) and a single request is not faster
  (and is capped: 5000 MiB for Azure's Put Blob). So the ratio to the single upload misses the
  1.2 goal here because of the emulators, and says nothing of Azure's or Google's services;
  the ratio to the SDK's streaming upload is Cairn's own cost.
- **Downloads.** Cairn's plain \`Get\` is the SDK's download (the SDK's own reader, nothing
  in between): its ratio is at or under 1 (the load of the moment moves it). The verified read
  adds what every restore's read does on any provider — gunzip, tar and SHA-256 of 256 MiB,
  about 0.6 s of CPU on this machine (as the filesystem and s3 verified rows of the storage
  section show) — which the slow Azurite download hides (it overlaps with the transfer) and
  the fast fake-gcs-server one does not.
- **Memory.** The azure upload holds the SDK's 4 block buffers of 8 MiB, mapped outside the Go
  heap (anonymous RSS about the 32 MiB bound plus a few MiB); the gcs upload holds the Go
  SDK's chunk buffer and its copy for a retry (about 2.5× the 8 MiB chunk), exactly as the
  SDK's own streaming upload does: bounded by the part size, never by the archive's size. The
  verified read holds one 1 MiB entry at a time and gunzip's window.
- The machine is shared (2 cores; another session's test suite ran during these runs, at a
  load of 1 to 12): read the ratios of the same round, not the absolute times.
MD
y=docs/bench/cloudcms.txt
cat >>docs/benchmarks.md <<MD

## Azure and GCS: 10,000 ConfigMaps backed up and restored

\`BenchmarkCloud10kConfigMaps\`: the manager binary on an envtest control plane backs up
10,000 ConfigMaps of 1 KiB into a filesystem location (the floor), an azure location on
Azurite and a gcs location on fake-gcs-server, in turns (two rounds, each backup's best), then
restores from each. Peak RSS of the manager in each.

| location | backup | ÷ filesystem | restore | ÷ filesystem | backup / restore peak RSS |
|---|---|---|---|---|---|
| filesystem | $(metric $y Cloud10kConfigMaps backup-filesystem-s) s | | $(metric $y Cloud10kConfigMaps restore-filesystem-s) s | | $(metric $y Cloud10kConfigMaps backup-filesystem-rss-MiB) / $(metric $y Cloud10kConfigMaps restore-filesystem-rss-MiB) MiB |
| azure (Azurite) | $(metric $y Cloud10kConfigMaps backup-azure-s) s | $(metric $y Cloud10kConfigMaps backup-azure-ratio) | $(metric $y Cloud10kConfigMaps restore-azure-s) s | $(metric $y Cloud10kConfigMaps restore-azure-ratio) | $(metric $y Cloud10kConfigMaps backup-azure-rss-MiB) / $(metric $y Cloud10kConfigMaps restore-azure-rss-MiB) MiB |
| gcs (fake-gcs-server) | $(metric $y Cloud10kConfigMaps backup-gcs-s) s | $(metric $y Cloud10kConfigMaps backup-gcs-ratio) | $(metric $y Cloud10kConfigMaps restore-gcs-s) s | $(metric $y Cloud10kConfigMaps restore-gcs-ratio) | $(metric $y Cloud10kConfigMaps backup-gcs-rss-MiB) / $(metric $y Cloud10kConfigMaps restore-gcs-rss-MiB) MiB |

A backup of 10,000 small objects writes a few MiB of archive and a handful of small files: its time is
the API server's listing and the archive's writing, and the provider adds a handful of
requests (the archive in one or two parts, the commit marker, the listing of a validation);
a ratio under 1 is the noise of the moment, not a provider faster than a local disk.
The restore's time is the API server creating 10,000 objects; each location's restore ran
once, one after the other, on a machine shared with another session's test suite (load 5 to
15 in this run), so its ratios are that load's more than the providers'.
MD
cat >>docs/benchmarks.md <<MD

## Queue: draining 500 backups, and hand-off latency

Run against a real kube-apiserver + etcd (the envtest binaries) with the manager's
reconcilers in the same process and a fake runner that moves backups on as soon as the queue
hands them over. Status writes are counted by the API server itself (its
\`apiserver_request_total\` for PATCH on \`backups/status\`), minus the runner's own.

| measurement | result | goal |
|---|---|---|
| 500 backups created at once (one namespace each), \`--concurrent-backups=4\`: drain time (first create → last Completed) | $(metric docs/bench/queue.txt QueueDrain500 drain-s) s (creating them took $(metric docs/bench/queue.txt QueueDrain500 create-s) s) | — |
| status writes by the queue | $(metric docs/bench/queue.txt QueueDrain500 queue-writes) ($(metric docs/bench/queue.txt QueueDrain500 queue-writes/backup) per backup) | ≤ 10 per backup |
| hand-off, \`--concurrent-backups=1\`, 50 hand-offs: a backup leaves InProgress → the next is ReadyToStart, median | $(metric docs/bench/queue.txt QueueHandoff handoff-median-ms) ms | — |
| the same, max | $(metric docs/bench/queue.txt QueueHandoff handoff-max-ms) ms | < 100 ms |
| one queue pass at rest, 1,000 queued backups and 2,000 namespaces: median of 20 | $(metric docs/bench/queue.txt QueuePass1000x2000 pass-median-ms) ms (worst $(metric docs/bench/queue.txt QueuePass1000x2000 pass-max-ms) ms) | < 50 ms |
| the same, first pass (every backup's namespaces resolved) | $(metric docs/bench/queue.txt QueuePass1000x2000 first-pass-ms) ms | < 50 ms |
| the decisions alone (order, resolve, decide; no API server): first pass / median | $(metric docs/bench/queue.txt QueueDecide1000x2000 first-pass-ms) / $(metric docs/bench/queue.txt QueueDecide1000x2000 pass-median-ms) ms | — |

How to read it:
- Two writes per backup is the floor: New → Queued and Queued → ReadyToStart. Renumbering the
  backups that stay queued is coalesced: it is written once the queue has been still for
  0.5 s (or, under constant churn, every 30 s), at most 10 writes per pass, so a burst of
  dequeues costs one renumbering and a renumbering never holds up a hand-off by more than
  one small batch. A 500-backup drain on this machine usually finishes without needing one.
- Hand-offs are event-driven: the backup leaving InProgress wakes the queue, which decides
  from its informer cache and writes at once; the 30 s resync is only a safety net.
- Namespace sets are resolved once per backup generation and cluster namespace list and then
  reused, and overlaps are found with one lookup per namespace; before that cache a pass over
  1,000 queued backups and 2,000 namespaces took 350–490 ms.
- The drain is bound by the API server on two shared cores (each hand-off is a runner write,
  an informer event, a queue pass and a queue write), not by the queue's own work: a pass
  over 500 backups takes about 2 ms.
MD
cat >>docs/benchmarks.md <<MD

## Backup: 10,000, 100,000 and 300,000 ConfigMaps

The real \`bin/manager\` (as users run it, so its memory is its own) against a kube-apiserver +
etcd from the envtest binaries on this machine, backing up ConfigMaps of 1 KiB spread over 10 (the scale run: 30)
namespaces into a filesystem location. The floor is a Go program that discovers every listable
type and LISTs each of them in those namespaces, 500 per page, all in parallel — what any
backup must at least do. Time is from creating the Backup to seeing it Completed.

| measurement | result | goal |
|---|---|---|
| 10k: backup wall time | $(metric docs/bench/backup.txt Backup10kConfigMaps backup-s) s | ≤ 2× the floor |
| 10k: the floor | $(metric docs/bench/backup.txt Backup10kConfigMaps floor-s) s | — |
| 10k: ratio to the floor | $(metric docs/bench/backup.txt Backup10kConfigMaps x-floor) | ≤ 2 |
| 10k: items/s | $(metric docs/bench/backup.txt Backup10kConfigMaps items/s) | — |
| 10k: manager peak RSS | $(metric docs/bench/backup.txt Backup10kConfigMaps peak-rss-MiB) MiB | < 100 MiB |
| a one-namespace backup created while the 10k one runs (\`--concurrent-backups=4\`): to InProgress | $(metric docs/bench/backup.txt Backup10kConfigMaps small-to-inprogress-ms) ms | (Velero 1.18: 23 ms) |
| the same: to Completed | $(metric docs/bench/backup.txt Backup10kConfigMaps small-to-completed-ms) ms | (Velero 1.18: 720 ms) |
| 100k: backup wall time | $(metric docs/bench/backup.txt Backup100kConfigMaps backup-s) s | — |
| 100k: items/s | $(metric docs/bench/backup.txt Backup100kConfigMaps items/s) | — |
| 100k: manager peak RSS | $(metric docs/bench/backup.txt Backup100kConfigMaps peak-rss-MiB) MiB | < 300 MiB |
| scale, $(metric docs/bench/backup.txt BackupScale items) ConfigMaps in 30 namespaces (\`CAIRN_BENCH_SCALE\`, default 300,000): backup wall time | $(metric docs/bench/backup.txt BackupScale backup-s) s | — |
| scale: the floor | $(metric docs/bench/backup.txt BackupScale floor-s) s | — |
| scale: ratio to the floor | $(metric docs/bench/backup.txt BackupScale x-floor) | ≤ 2 |
| scale: items/s | $(metric docs/bench/backup.txt BackupScale items/s) | — |
| scale: manager peak RSS | $(metric docs/bench/backup.txt BackupScale peak-rss-MiB) MiB | < 150 MiB |

How to read it: the API server, etcd, the manager and the benchmark share two cores, so the
floor and the backup compete for the same CPU; the floor itself varies by ±50% between runs.
What a run keeps per item is one string: its key in the set of items already written (so
that an item reached by two ItemBlocks is written once), whose tail is also its entry in the
resource list. With a key and a separate resource-list name per item the 300,000-item backup
peaked at 196 MiB; with one string, 127 MiB. The floor's time varies most at this size (its 30
namespaces' LISTs all run at once against one etcd).
The archive is compressed with github.com/klauspost/compress (the same gzip format, read by
the standard library; measured here: the 100k backup 5.9 s → 5.2 s, the 10k one within noise).
The finalizer reads the archive back once more before committing it (checksum and tar.gz
check), which is part of the time to Completed. The manager's memory stays flat with cluster size: items stream page by page through the
worker pool into the upload, and only their names are kept (for the resource list and to back
each item up once).
MD
cat >>docs/benchmarks.md <<MD

## Cancel: a running backup of 20,000 ConfigMaps

The manager's reconcilers in the benchmark's process (so the moment the worker pool stops is
seen exactly) against an envtest control plane; a backup of 20,000 ConfigMaps of 4 KiB (with
1 KiB the whole backup takes about 1 s here, leaving nothing to cancel 1 s in) in 10
namespaces into a filesystem location, cancelled with a merge patch of \`spec.cancel\` 1 s
after it entered InProgress; 5 runs, one after another.

| measurement | median | worst | goal |
|---|---|---|---|
| patch → the backup's worker pool has stopped | $(metric docs/bench/cancel.txt Cancel20kConfigMaps to-pool-stopped-median-ms) ms | $(metric docs/bench/cancel.txt Cancel20kConfigMaps to-pool-stopped-max-ms) ms | < 2 s |
| patch → \`Failed\` (data removed, log kept) | $(metric docs/bench/cancel.txt Cancel20kConfigMaps to-failed-median-ms) ms | $(metric docs/bench/cancel.txt Cancel20kConfigMaps to-failed-max-ms) ms | — |

How to read it: the patch reaches a running backup through the backup reconciler's watch (an
update event cancels the run's context at once; before this the run polled the cache every
200 ms, and the median was about 223 ms); the workers stop at their
next item and the archive pipe is closed at once. The rest of the way to \`Failed\` is two
status writes (FinalizingCancelled, then Failed) and the cleanup, which first waits for the
run to upload its log (the cancel itself never waits for storage; the finalizer looks again
every 100 ms), then appends to the log, deletes the other objects (here there are none: the
aborted upload left no archive) and aborts incomplete uploads. The worst time to
Failed has been the first run's, about 1.3 s, in every run of this benchmark so far, while its
pool stopped as fast as the others'. The cause is the first request for VolumeSnapshots in a
fresh API server (the cleanup lists them): measured apart, the first LIST took 1.0 s and the
next ones about 1 ms, as a custom resource's storage is set up on its first request.
MD
d=docs/bench/deletion.txt
cat >>docs/benchmarks.md <<MD

## Deletion: new backups while a backup is being deleted

In-process reconcilers (\`--concurrent-backups=5\`) on an envtest control plane, two
filesystem locations. A backup of 10,000 ConfigMaps is made in the default location, whose
deletes are slowed to 1 s each (a slow or distant object store: the deletion then runs for
about 5 s). Five backups of one small namespace each are created at once in the other
location, first with no deletion running, then right after the big backup shows
\`Deleting\` (its deletion has then run for a second). Time from each one's creation to
InProgress:

| new backup | no deletion running | while the deletion runs |
|---|---|---|
| 1 | $(metric $d DeletionDoesNotBlock without-1-ms) ms | $(metric $d DeletionDoesNotBlock with-1-ms) ms |
| 2 | $(metric $d DeletionDoesNotBlock without-2-ms) ms | $(metric $d DeletionDoesNotBlock with-2-ms) ms |
| 3 | $(metric $d DeletionDoesNotBlock without-3-ms) ms | $(metric $d DeletionDoesNotBlock with-3-ms) ms |
| 4 | $(metric $d DeletionDoesNotBlock without-4-ms) ms | $(metric $d DeletionDoesNotBlock with-4-ms) ms |
| 5 | $(metric $d DeletionDoesNotBlock without-5-ms) ms | $(metric $d DeletionDoesNotBlock with-5-ms) ms |
| median | $(metric $d DeletionDoesNotBlock without-median-ms) ms | $(metric $d DeletionDoesNotBlock with-median-ms) ms |

The deletion took $(metric $d DeletionDoesNotBlock deletion-s) s (from the Delete) and was still running when all five new backups had
completed ($(metric $d DeletionDoesNotBlock deleting-when-all-completed) = yes). The deletion runs in its own goroutine and holds
no concurrency slot; only a queued backup in the *same* location waits for it (the deletion
lock, tested in the controller suite). Differences between the two columns are noise on two
shared cores (the second batch also finds warm caches).
MD
r=docs/bench/restore.txt
w8=Restore10kConfigMaps w16=Restore10kConfigMapsWorkers16 w1=Restore10kConfigMapsWorkers1
cat >>docs/benchmarks.md <<MD

## Restore: 10,000 ConfigMaps

The real \`bin/manager\` against a kube-apiserver + etcd from the envtest binaries. 10,000
ConfigMaps of 1 KiB in 10 namespaces are backed up (one Backup, a filesystem location), then
deleted (\`DeleteAllOf\` in each namespace; the namespaces stay, as the test control plane has
no namespace controller to finish deleting them), and restored by a Restore of that backup
(\`includedResources: [configmaps]\`). Time is from creating the Restore to seeing it
Completed through a watch. The floor, measured on the same control plane in turns with the
restore: the ConfigMaps are deleted, the same 10,000 objects (names, data and the labels the
restore sets) are created by 16 goroutines sharing one client with no client-side rate limit,
as the manager's client has none; then they are deleted again and restored. Three rounds of
floor then restore (\`CAIRN_BENCH_RESTORE_ROUNDS\`), so that a busy moment of this shared
machine falls on both alike; the times are the rounds' medians, the ratio the median of the
rounds' ratios (each round's figures and the load average are in the raw output). Each round
checks that the restore's progress reads 10000/10000, with no warning or error, and that
10,000 ConfigMaps carry its label. Each column is its own control plane with its own floor; a
blank column was not measured in the run that wrote this report (run its benchmark alone:
\`go test -run '^\$' -bench '^BenchmarkRestore10kConfigMapsWorkers16\$' -benchtime 1x ./test/bench/\`).

| measurement | \`--restore-worker-count\` 8 (default) | 16 | 1 | goal |
|---|---|---|---|---|
| restore: create → Completed (median) | $(metric $r $w8 restore-s) s | $(metric $r $w16 restore-s) s | $(metric $r $w1 restore-s) s | — |
| the floor: 16 goroutines creating the same objects (median) | $(metric $r $w8 floor-s) s | $(metric $r $w16 floor-s) s | $(metric $r $w1 floor-s) s | — |
| ratio to the floor, median of the rounds (worst) | $(metric $r $w8 x-floor) ($(metric $r $w8 x-floor-max)) | $(metric $r $w16 x-floor) ($(metric $r $w16 x-floor-max)) | $(metric $r $w1 x-floor) ($(metric $r $w1 x-floor-max)) | ≤ 1.3 (default: $(verdict "$(metric $r $w8 x-floor)" "<" 1.3001)) |
| API requests during the first restore: ConfigMap creates / all others | $(metric $r $w8 api-configmap-creates) / $(metric $r $w8 api-other-requests) | $(metric $r $w16 api-configmap-creates) / $(metric $r $w16 api-other-requests) | $(metric $r $w1 api-configmap-creates) / $(metric $r $w1 api-other-requests) | 10000 / — |
| load average (1 min) at the end | $(metric $r $w8 load-avg) | $(metric $r $w16 load-avg) | $(metric $r $w1 load-avg) | — |
| items/s | $(metric $r $w8 items/s) | $(metric $r $w16 items/s) | $(metric $r $w1 items/s) | — |
| create → InProgress (queue, validation, start) | $(metric $r $w8 to-inprogress-ms) ms | $(metric $r $w16 to-inprogress-ms) ms | $(metric $r $w1 to-inprogress-ms) ms | — |
| InProgress → Finalizing (archive read and checked, items created, files stored) | $(metric $r $w8 inprogress-s) s | $(metric $r $w16 inprogress-s) s | $(metric $r $w1 inprogress-s) s | — |
| Finalizing → Completed | $(metric $r $w8 finalizing-ms) ms | $(metric $r $w16 finalizing-ms) ms | $(metric $r $w1 finalizing-ms) ms | — |
| manager peak RSS during a restore (the highest of the rounds) | $(metric $r $w8 peak-rss-MiB) MiB | $(metric $r $w16 peak-rss-MiB) MiB | $(metric $r $w1 peak-rss-MiB) MiB | < 70 MiB (default: $(verdict "$(metric $r $w8 peak-rss-MiB)" "<" 70)) |
| of which the binary's pages (RssFile, at the end) | $(metric $r $w8 rss-file-MiB) MiB | $(metric $r $w16 rss-file-MiB) MiB | $(metric $r $w1 rss-file-MiB) MiB | — |
| anonymous memory (heap, stacks: RssAnon) when the restore started | $(metric $r $w8 rss-anon-before-MiB) MiB | $(metric $r $w16 rss-anon-before-MiB) MiB | $(metric $r $w1 rss-anon-before-MiB) MiB | — |

How to read it:
- The restore and the floor are both bound by the API server and etcd, which share two cores
  with the manager, the benchmark and other work on the machine: the floor alone has taken
  from 7 s to 55 s here. Compare the ratios, not the columns' times, and the rounds of one run
  rather than runs: a busier moment slows the floor and the restore alike, but not always the
  two halves of a round alike (in one run at a load of 17, one round's ratio was 0.90 and the
  next 2.16).
- Where the time goes (issue 41, which reported 1.71 and 1.98 against 1.20 a week before):
  a CPU profile of the manager during the restore (\`CAIRN_BENCH_PROFILE_DIR=DIR\` writes
  restore-cpu.pprof, the first \`CAIRN_BENCH_PROFILE_SECONDS\` of the first round, and
  restore-heap.pprof; the manager is then started with \`--pprof-bind-address\`) found it mostly
  idle: 2.2 CPU-seconds in the first 12 s of a 26 s restore, 19% of one core. Of that, client-go's
  creates took a quarter (encoding, HTTP/2, decoding the answer), and reading the spool another
  quarter: the plan's pass and the restore's each decoded every spooled line in full (a JSON scan
  of every item twice more), the plan's pass alone a fifth. The spool's lines are now read back
  without a second scan of the item (it was checked and compacted when spooled): in the profile
  after the change the spool's reads are 5.5% and the plan's pass 4.3%, the creates 28%.
  The API server's own counts (its \`apiserver_request_total\`, read before and after the first
  round, the row above) show exactly 10,000 ConfigMap creates and 71 to 89 other requests per
  restore: about one progress write a second, the 10 target namespaces read once each, 8 events,
  and the API server's and the benchmark's own (leases, endpoints, openapi, the watch). No extra
  GET, SubjectAccessReview or impersonated request per item, and no client-side rate limit (the
  manager's client has none, and this restore in the operator's namespace writes with it; a
  team's restore writes every item through one impersonating client built per restore, not per
  item).
- Measured in turns on this machine on 2026-12-07 (loads 9 to 18, other sessions' builds and
  tests beside): before the change, rounds of 0.91, 1.28 and 0.99 (median 0.99, load 16 to 18),
  and one single run of 1.52 (load 16.5); after it, 1.83 (the first round, with the CPU
  profile being taken), 1.04 and 1.06 (median 1.06, load 10 to 12.5), then 1.29, 1.05 and 1.04
  (median 1.05, load 13 to 17: the table's run). The 1.7 to 2.0 the issue reported were not
  reproduced as a steady figure here; single rounds reach them when the load shifts within a
  round, which is why the ratio is now the median of rounds in turns.
- One worker is a restore that creates one item at a time, as Velero does: every create's
  round trip is paid 10,000 times in a row. On two cores the API server itself cannot create
  many objects at once, which bounds what parallel creation gains here; a control plane with
  more cores should widen the gap (not measured here).
- Almost all of the time is InProgress. What the restore does beyond the floor (reading the
  archive and checking it against the commit marker into a spool on disk, discovery, one pass
  to select the items, decoding and preparing each item, storing the log, results and
  resource list) is what can make up the gap to the floor; on two shared cores the manager's CPU is taken from
  the API server's.
- The peak RSS is the manager's VmHWM, reset (\`/proc/PID/clear_refs\`) before each restore
  and read when it is Completed. The table's run: $(metric $r $w8 rss-before-MiB) MiB resident when the
  restore started (the highest of the rounds), $(metric $r $w8 peak-rss-MiB) MiB at the peak, of which
  $(metric $r $w8 rss-file-MiB) MiB are pages of the manager's binary (RssFile: its code and read-only data, mapped
  from the file, clean and reclaimable) and the rest anonymous memory ($(metric $r $w8 rss-anon-before-MiB) MiB when the
  restore started). The goal of 70 MiB is missed by the binary's pages, not by the restore: the
  binary grew to 124 MiB when the azure and gcs providers linked their SDKs (Google's storage
  SDK links gRPC's xDS client and Envoy's API, whose descriptors every start registers), and
  the same restore measured 71.6 MiB resident at its start before them. Sampled during a run
  (2026-12-07): RssFile 62 to 65 MiB, RssAnon 14 MiB idle, 27 to 31 MiB during a restore, back
  to 17 MiB when it ends: the last run of a kind to end returns its memory to the system at once
  (\`debug.FreeOSMemory\` in lifecycle's Track; it used to stay resident for minutes). The heap
  profile of a restore's end holds 9 MiB live. The archive is spooled to disk and read back one resource at a
  time, so memory does not grow with the backup's size.
MD
e=docs/bench/encryption.txt
cat >>docs/benchmarks.md <<MD

## Encryption: 10,000 ConfigMaps backed up and restored, plain and encrypted

The real \`bin/manager\` against an envtest control plane with two filesystem locations, one
plain and one encrypted (\`spec.encryption\`, docs/storage.md). 10,000 ConfigMaps of 1 KiB in 10
namespaces are backed up four times, in turns — plain, encrypted, plain, encrypted — and each
location's best time is kept; then the ConfigMaps are deleted and restored from the first plain
backup, deleted again and restored from the first encrypted one. The same run, the same control
plane, the same load: the ratio is what to read (issue 31's goal: no more than 10% slower,
memory unchanged).

| measurement | plain | encrypted | ratio | goal |
|---|---|---|---|---|
| backup: create → Completed (best of two) | $(metric $e Encryption10kConfigMaps backup-plain-s) s | $(metric $e Encryption10kConfigMaps backup-encrypted-s) s | $(metric $e Encryption10kConfigMaps backup-ratio) | ≤ 1.1 ($(verdict "$(metric $e Encryption10kConfigMaps backup-ratio)" "<" 1.1)) |
| manager peak RSS during the backups | $(metric $e Encryption10kConfigMaps backup-plain-rss-MiB) MiB | $(metric $e Encryption10kConfigMaps backup-encrypted-rss-MiB) MiB | — | unchanged |
| restore: create → Completed | $(metric $e Encryption10kConfigMaps restore-plain-s) s | $(metric $e Encryption10kConfigMaps restore-encrypted-s) s | $(metric $e Encryption10kConfigMaps restore-ratio) | ≤ 1.1 ($(verdict "$(metric $e Encryption10kConfigMaps restore-ratio)" "<" 1.1)) |
| manager peak RSS during the restore | $(metric $e Encryption10kConfigMaps restore-plain-rss-MiB) MiB | $(metric $e Encryption10kConfigMaps restore-encrypted-rss-MiB) MiB | — | unchanged |

How to read it:
- A 10,000-item backup is a few MB of archive: the time goes to listing the API server and
  writing items, the restore's to the API server's creates, and encrypting or decrypting a few
  MB is milliseconds beside them. What the ratio shows is mostly the noise of a shared machine;
  the 256 MiB rows of the storage section are where encryption's own cost is measured.
- The two restores run one after the other, not in turns: the second has the API server's
  caches of the first behind it (and the load of its moment), so read a restore ratio near 1 as
  "no difference measured".
- The runs made for the switch to AES-GCM (2026-11-27, at loads of 1 to 14 on the 2 cores):
  backup ratios 1.30, 0.88, 1.09 and 0.94 (the one in the table, at a load of 1 to 3),
  restore ratios 0.90, 1.22, 1.57 (10.3 s plain, then 16.1 s encrypted, at a load of about 9)
  and 1.05, peak RSS within 5 MiB each time. A backup of 1 to 2 s and a restore measured once each way move by more than that
  with the load; the few MB these archives hold cost milliseconds to encrypt (the storage
  section), so a ratio over 1.1 here is the machine's, not encryption's, and the benchmark would
  need restores in turns, several of each, to show the difference it cannot see now.
MD
rc=docs/bench/restorecancel.txt
cat >>docs/benchmarks.md <<MD

## Restore cancel: a running restore of 20,000 ConfigMaps

The manager's reconcilers in the benchmark's process, with their defaults
(\`--restore-worker-count\` 8), against an envtest control plane. 20,000 ConfigMaps of 1 KiB in
10 namespaces are backed up into a filesystem location; a Restore of them
(\`includedResources: [configmaps]\`, each namespace mapped to a new one, so that every item is
created) is cancelled with a merge patch of \`spec.cancel\` 1 s after its first ConfigMap was
created; 5 runs, one after another, each into new namespaces.

| measurement | median | worst | goal |
|---|---|---|---|
| patch → the restore's last ConfigMap created (seen by a watch): the pool stops after it | $(metric $rc RestoreCancel20kConfigMaps to-last-create-median-ms) ms | $(metric $rc RestoreCancel20kConfigMaps to-last-create-max-ms) ms | — |
| patch → \`FinalizingCancelled\` (the run has returned: pool stopped; its files are stored after) | $(metric $rc RestoreCancel20kConfigMaps to-finalizing-cancelled-median-ms) ms | $(metric $rc RestoreCancel20kConfigMaps to-finalizing-cancelled-max-ms) ms | < 0.5 s (median: $(verdict "$(metric $rc RestoreCancel20kConfigMaps to-finalizing-cancelled-median-ms)" "<" 500)) |
| patch → \`Failed\` ("Restore cancelled by user", Cancelled=True; files stored, FilesStored=True) | $(metric $rc RestoreCancel20kConfigMaps to-failed-median-ms) ms | $(metric $rc RestoreCancel20kConfigMaps to-failed-max-ms) ms | — |

How to read it:
- A restore has no hook that reports when its worker pool stops (a backup's has:
  \`Config.OnWorkerPool\`), so the moment is bounded from both sides. The last ConfigMap created
  is a lower bound: a worker stops after its last create. \`FinalizingCancelled\` is an upper
  bound: the restore reconciler writes it once the run has returned, which it does only after
  every worker has stopped (and the operations it started are cancelled), with no storage call
  before it.
- The resource list, results and log are stored after \`FinalizingCancelled\`, as a cancelled
  backup's log is (issue 41): the run used to store them first, so every cancel waited on
  three storage writes (each an fsync of the file and of its directory in a filesystem
  location, a PUT in S3), which on a busy disk or a slow object store take seconds. On this
  machine the last code with that order reached \`FinalizingCancelled\` in 143 ms (median of
  five, load average 11), of which the writes were about 40 to 100 ms: the 2.5 to 3 s the
  issue reported were not reproduced here, and nothing else runs between the patch and the
  phase change (the pool stops at once, see the last create). The restore
  finalizer ends the restore \`Failed\` only once they are stored (it looks again every
  100 ms), and its FilesStored condition says whether they were; so the way to \`Failed\`
  still includes them.
- The patch reaches the running restore through the restore reconciler's watch, which cancels
  the run's context: each worker finishes the item it holds (a create on its way may still be
  made: the resource list names it as skipped, "it may exist") and takes no other; every
  benchmark run checks that nothing more is created in the second after \`Failed\`.
- The rest of the way to \`Failed\` is the files and the restore finalizer's one status write.
- How many items each run had handled when it was cancelled is in its raw output
  (docs/bench/restorecancel.txt): a few hundred to about a thousand, as the API server on two
  shared cores creates them.
MD
x=docs/bench/expiry.txt
cat >>docs/benchmarks.md <<MD

## Expiry: 200 backups expiring at once

The manager's reconcilers in the benchmark's process against an envtest control plane. 200
backups (one namespace with one ConfigMap each) are made in a filesystem location; then all of
them are given the same \`status.expiration\`, 5 s ahead, as backups of one schedule and one
ttl would have. Times are from that expiration to what a watch sees.

| measurement | p50 | p99 | goal |
|---|---|---|---|
| expiration → deleted (the GC's Delete: deletion timestamp set) | $(metric $x Expiry200 to-delete-p50-ms) ms | $(metric $x Expiry200 to-delete-p99-ms) ms | — |
| expiration → object gone (data deleted first) | $(metric $x Expiry200 to-gone-p50-ms) ms | $(metric $x Expiry200 to-gone-p99-ms) ms (worst $(metric $x Expiry200 to-gone-max-ms) ms) | ≤ 2 s (Velero: GC every hour) |

How to read it:
- The GC reconciler is woken at each backup's expiration (\`RequeueAfter\`), not by polling,
  and deletes 32 backups at a time (one Delete call each; with 8 at a time the p99 to the
  Delete was 1.5 to 1.7 s, with one at a time 2.7 s).
- The rest of the way is the deletion reconciler's (docs/architecture.md): for each backup
  the data's listing and deletion (at most 32 at once), a check that nothing is left and the
  finalizer's removal, 8 backups side by side.
- Every step is a write to the one API server, which shares two cores with etcd, the manager
  and the benchmark, and the API server's CPU is what the expiry waits on (profiled: about
  3.5 ms of its CPU per status patch). The manager makes
  $(metric $x Expiry200 api-writes-per-backup) API writes per expired backup (counted on its
  transport): the Delete and the finalizer's removal. A deletion shows \`Deleting\` (a status
  write and its event) only when it runs for over a second, which
  $(metric $x Expiry200 showed-deleting) of the 200 did here (docs/architecture.md,
  "\`Deleting\` is shown after a second"). With the \`Deleting\` status and event written for
  every backup (4 writes each) the p99 to gone was 2.5 to 2.8 s on this machine, quiet; with
  6.8 writes each (three events per backup, a DeletionWaiting event for each one waiting for a
  slot, a readiness write racing the Deleting one) 3.1 to 4.8 s.
MD
y=docs/bench/sync.txt
cat >>docs/benchmarks.md <<MD

## Sync from storage: 2,000 committed backups into an empty cluster

The manager's queue, storage location and sync reconcilers in the benchmark's process against
an envtest control plane. A filesystem directory holds 2,000 committed backups in 20
namespaces (each with the six objects a backup stores: archive, log, resource list, results,
operations and the commit marker); the namespaces exist, the cluster has no Backup. A ReadOnly
location on that directory is created, and timed until all 2,000 Backup objects are Completed.
Writes are counted by the API server itself (\`apiserver_request_total\`); storage calls by a
wrapper around the location's store. Then the location is synced every 3 s, and one periodic
pass with nothing changed is measured.

| measurement | result | goal |
|---|---|---|
| location created → all 2,000 Backups Completed | $(metric $y Sync2000 sync-s) s | < 30 s |
| writes to Backups (create + status) per backup | $(metric $y Sync2000 backup-writes/backup) | ≤ 2 |
| all API writes per backup (with the location's status and events) | $(metric $y Sync2000 api-writes/backup) | — |
| storage calls of that pass: List / Get | $(metric $y Sync2000 first-pass-lists) / $(metric $y Sync2000 first-pass-gets) | one List |
| a pass with nothing changed: storage List / Get | $(metric $y Sync2000 idle-pass-lists) / $(metric $y Sync2000 idle-pass-gets) | one List |
| the same: API writes | $(metric $y Sync2000 idle-pass-api-writes) | 0 |
| the same: the List's time (12,000 keys) | $(metric $y Sync2000 idle-pass-list-ms) ms | — |

How to read it:
- A pass lists the location once (one \`List\` of \`backups/\`: on S3 that is one request per
  1,000 keys, six keys a backup) and compares it with the informer cache; it reads the commit
  marker only of a backup it makes (one Get each), and writes nothing when storage and the
  cluster agree. \`status.lastSyncedTime\` is written by a pass that changed something, or
  when it is more than 5 minutes old, so an idle location costs one status write in five
  minutes, not one a pass.
- Two writes per backup is the floor: the create (the API server ignores a status sent with
  it) and the status write. A pass makes 16 backups at a time; the API server and etcd share
  two cores with the manager and the benchmark, so that is where the time goes. The queue is
  not woken by synced backups (they are not its own), so it takes no CPU from them: when each
  synced backup's status write still woke it, the same 2,000 took 25 s.
MD
cat >>docs/benchmarks.md <<MD

## Untrusted archive: one 512 MiB entry, a wrong checksum

Issue 25's finding 4: a backup whose archive holds one 512 MiB JSON entry
($(metric docs/bench/untrusted.txt RestoreReadBomb compressed-KiB) KiB compressed) and whose
commit marker has a wrong checksum, restored by a team. Measured in process, not on the
manager binary: \`restore.Runner.Run\` (the manager's restore code, reading the archive from a
filesystem location, with a fake API server) in the benchmark's own process, whose peak RSS
(VmHWM, reset with \`/proc/self/clear_refs\` before each run) is what the run added to a
process that had nothing else to do. The manager's own baseline (45 MB in the issue) comes on
top.

| measurement | result | goal |
|---|---|---|
| peak RSS of the process during the restore | $(metric docs/bench/untrusted.txt RestoreReadBomb peak-rss-MiB) MiB | < 150 MiB (was 2.3 GB in the manager) |
| bytes allocated by the restore | $(metric docs/bench/untrusted.txt RestoreReadBomb alloc-MiB) MiB | — |
| time to Failed ("archive checksum mismatch") | $(awk '/^BenchmarkRestoreReadBomb/ {printf "%.1f", $3/1e6}' docs/bench/untrusted.txt) ms | — |

How to read it: the entry's tar header says 512 MiB, over the 16 MiB entry cap
(\`archive.DefaultMaxEntrySize\`, the manager's \`--max-archive-entry-size\`), so it is refused
before a byte of it is read; the rest of the compressed stream is hashed without being
decompressed, and the checksum mismatch wins over the refused entry, so the restore fails
with the same reason as before, having created nothing. With the cap lifted (the reader as it
was) the same run allocated 1,537 MiB and peaked at 1,564 MiB RSS in 17 s on this machine.
docs/format.md says what else is capped.
MD
t=docs/bench/tenant.txt
cat >>docs/benchmarks.md <<MD

## Tenant: 10,000 ConfigMaps backed up and restored as a tenant and as the operator

Issue 25's last measure. The real \`bin/manager\` against an envtest control plane with Cairn's
admission policies installed (they record who created each Backup and Restore; the manager's
own user is the operator). One team namespace, \`bench-team\`, holds 10,000 ConfigMaps of 1 KiB.
The tenant is a ServiceAccount there, bound to a Role that may read and write ConfigMaps and
create and read Backups and Restores, and authenticated by nothing but a bound token
(TokenRequest, as \`kubectl create token\`). The operator's Backups are in the operator's
namespace (\`includedNamespaces: [bench-team]\`), the tenant's in \`bench-team\`; all
\`includedResources: [configmaps]\`. Then the ConfigMaps are deleted before each Restore of
those backups (\`includedResources: [configmaps]\`), the operator's in its namespace, the
tenant's in \`bench-team\`. Times are from creating the Backup or Restore to seeing it
Completed. Each backup and each restore is made 5 times, in rounds: the operator's first in one
round, the tenant's first in the next. Times are the median of the 5; a ratio is the median of
the 5 rounds' tenant / operator, the two made one right after the other, so that a change in
the machine's load between rounds moves both sides of it. Every run, with where its time went,
is in the raw output (docs/bench/tenant.txt). Each run checks Completed, 10,000 of 10,000
items, no warnings or errors, and for a restore that 10,000 ConfigMaps carry its label.

| measurement | operator | tenant | tenant / operator | goal |
|---|---|---|---|---|
| backup: create → Completed | $(metric $t Tenant10kConfigMaps operator-backup-s) s | $(metric $t Tenant10kConfigMaps tenant-backup-s) s | $(metric $t Tenant10kConfigMaps backup-ratio) | within 10% (≤ 1.10) |
| restore: create → Completed | $(metric $t Tenant10kConfigMaps operator-restore-s) s | $(metric $t Tenant10kConfigMaps tenant-restore-s) s | $(metric $t Tenant10kConfigMaps restore-ratio) | within 10% (≤ 1.10) |

How to read it:
- What differs for the backup: before it lists, the tenant's backup asks the API server what
  its requester may list there, one SubjectAccessReview per resource and namespace, cached for
  the backup (here one: \`list configmaps\` in \`bench-team\`), and before it starts, the
  manager reads the four admission objects that make the recorded requester trustworthy. The
  LISTs themselves are the operator's, as for the operator's backup. Create → InProgress is
  10 to 40 ms longer for the tenant's backup (the raw output has each run's), on a backup of
  under a second; the run itself (InProgress → Finalizing) takes the same.
- What differs for the restore: every create carries impersonation headers (the requester's
  user, UID, three groups and the token's credential ID), so the API server first authorizes
  the manager to impersonate each of them, then authorizes the create as the ServiceAccount
  through RBAC (its RoleBinding), where the operator's own create is allowed at once by its
  \`system:masters\` group; admission is the same for both. That is paid per item, 10,000
  times. Measured apart from Cairn on the same machine (8 goroutines creating 10,000
  ConfigMaps in alternating batches of 500, plainly and impersonating the same ServiceAccount,
  six runs), an impersonated create cost the API server 1 to 15% more, about 9% in the
  median. The restore spends part of its time on its own work (reading the archive, preparing
  the items), so the gap should come out smaller than that: a few percent.
- Both are bound by the one API server and etcd, which share two cores with the manager and
  the benchmark, and other test runs were using the machine: the same restore took from 11 to
  18 s from one round to the next, and one round's ratio from 0.85 to 1.35. The ratio can
  tell 10% from 50%, not 3% from 6%: compare runs on a quiet machine for that.
MD
v=docs/bench/volumes.txt
cat >>docs/benchmarks.md <<MD

## Volume data: 200 MiB and 10,000 small files through the blob proxy

Issue 28's measure. One directory holds one file of 200 MiB of random bytes and 10,000 random
files of 4 KiB in 100 directories: $(metric $v Volumes200MiBAnd10kFiles data-MB) MB of
incompressible data. The floor is \`tar -cf - DIR | sha256sum\` (every file read and hashed,
nothing written), run before and after the copies; the faster of the two is the floor, which
makes the bar stricter. Each copy is what the node agent does for one PodVolumeBackup: open
the repository through the blob proxy (\`nodeagent.ProxyRepositories\`: a proxy session, then
kopia's open with its key derivation), snapshot the directory, close. It runs in a child
process (the benchmark's test binary, run again) with the chart's \`GOMEMLIMIT=200MiB\`
(\`nodeAgent.gomemlimit\`), so that its peak RSS is its own: the child reads its high-water
mark (\`VmHWM\` in /proc/self/status) as it ends. Not its \`ru_maxrss\`, which the parent gets
from wait4: Go starts a child with vfork, and Linux carries the shared parent's high-water
mark into the child's at exec, so that was never below the benchmark process's own RSS at
that moment (up to 470 MiB once the benchmark had compared two restored trees; runs before
this was found reported it). The manager's side
runs in the benchmark's process: \`blobproxy.NewServer\` on an httptest server on 127.0.0.1 (a
static authenticator, a token file), opening a new filesystem location through
\`blobproxy.LocationBackends\` (its BackupStorageLocation in a fake API client), so every pack
crosses the same HTTP hop and is written by the same kopia filesystem storage as in a cluster.
The first copy initialises the repository; the second, of the unchanged directory, has the
first as its parent. The data was just written, so the floor and the copies all read it from
the page cache.

| measurement | result | goal | verdict |
|---|---|---|---|
| floor: \`tar -cf - DIR \\| sha256sum\` | $(metric $v Volumes200MiBAnd10kFiles floor-s) s, $(metric $v Volumes200MiBAnd10kFiles floor-MB/s) MB/s | — | — |
| first backup, fresh repository: open + snapshot + close | $(metric $v Volumes200MiBAnd10kFiles first-s) s (open $(metric $v Volumes200MiBAnd10kFiles first-open-s) s), $(metric $v Volumes200MiBAnd10kFiles first-MB/s) MB/s | — | — |
| first backup's throughput / the floor's | $(metric $v Volumes200MiBAnd10kFiles first-of-floor) | ≥ 0.5 | $(verdict "$(metric $v Volumes200MiBAnd10kFiles first-of-floor)" ">=" 0.5) |
| the same, the snapshot call alone | $(metric $v Volumes200MiBAnd10kFiles first-snapshot-s) s, $(metric $v Volumes200MiBAnd10kFiles first-snapshot-MB/s) MB/s | — | — |
| first backup: uploaded / repository size on disk | $(metric $v Volumes200MiBAnd10kFiles first-uploaded-MiB) / $(metric $v Volumes200MiBAnd10kFiles repository-MiB) MiB | — | — |
| first backup: CPU of the copy / of the proxy (the benchmark's process) | $(metric $v Volumes200MiBAnd10kFiles first-copy-cpu-s) / $(metric $v Volumes200MiBAnd10kFiles first-proxy-cpu-s) s | — | — |
| second backup, unchanged: open + snapshot + close | $(metric $v Volumes200MiBAnd10kFiles second-s) s (open $(metric $v Volumes200MiBAnd10kFiles second-open-s) s, snapshot $(metric $v Volumes200MiBAnd10kFiles second-snapshot-s) s) | — | — |
| first / second | $(metric $v Volumes200MiBAnd10kFiles second-speedup-x)× | ≥ 10× | $(verdict "$(metric $v Volumes200MiBAnd10kFiles second-speedup-x)" ">=" 10) |
| the same, the snapshot calls alone | $(metric $v Volumes200MiBAnd10kFiles second-snapshot-speedup-x)× | — | — |
| second backup: uploaded | $(metric $v Volumes200MiBAnd10kFiles second-uploaded-bytes) bytes | — | — |
| node agent (the copy's process) peak RSS, first backup | $(metric $v Volumes200MiBAnd10kFiles first-peak-rss-MiB) MiB | < 256 MiB | $(verdict "$(metric $v Volumes200MiBAnd10kFiles first-peak-rss-MiB)" "<" 256) |
| the same, second backup | $(metric $v Volumes200MiBAnd10kFiles second-peak-rss-MiB) MiB | < 256 MiB | $(verdict "$(metric $v Volumes200MiBAnd10kFiles second-peak-rss-MiB)" "<" 256) |
| the same process doing nothing (the test binary's own) | $(metric $v Volumes200MiBAnd10kFiles idle-child-rss-MiB) MiB | — | — |

How to read it:
- The goals are on the copy as the node agent makes it, open and close included; the snapshot
  call alone is shown beside it. The node agent's own walk that sizes the volume for progress
  (\`du\`) and its status writes are not in it.
- The first copy is CPU-bound in the copy's process: profiled
  (\`CAIRN_BENCH_VOLUMES_PROFILE_DIR=DIR\` writes first.pprof, second.pprof and proxy.pprof), its
  roughly 1.8 CPU-seconds go to content-defined chunking (buzhash, about a quarter), BLAKE2B
  hashing (15%), copying buffers (memmove, 15%), encryption (AES-GCM and its per-content
  HMAC-SHA256, about 10%), zstd-fastest trying to compress incompressible data (8%) and the
  key derivation (PBKDF2-SHA256, 600,000 rounds, 11%: done twice, once to initialise and once
  to open). The proxy hop costs the manager's side about 0.7 CPU-seconds, mostly the writes of
  the 10 MiB packs into the page cache: it is not what the copy waits for. The 200 MiB file is
  read by one goroutine (\`ParallelUploadAboveSize\` is off, a memory knob); allowing parallel
  upload of files over 32 MiB was tried on this machine and did not help (87 and 107 MB/s,
  the same CPU): with two cores shared by the copy, the proxy and other runs there is no idle
  core to give it.
- The second copy reads no file content (kopia reuses the parent's entries of files whose
  size and modification time are unchanged) and uploads only the snapshot's manifest and
  index. About 0.11 s of it, roughly 40%, is kopia's key derivation on open (PBKDF2-SHA256,
  600,000 rounds), paid by every copy because the node agent opens the repository for each
  PodVolumeBackup; the snapshot calls alone are further apart (the row below the goal's: 10.8
  to 14.8× in the runs made while writing this benchmark). The ratio is also small
  because this volume is small: a fixed quarter of a second against under 2 s; on a
  larger volume with the same number of files the second copy takes the same time, so the
  ratio grows with the data. The knob, if the goal must hold at this size: keep an opened
  repository in the node agent for the next copy of the same repository (a backup of several
  volumes of one namespace, or the next backup within minutes), so the derivation is paid once;
  kopia offers no cheaper key derivation than PBKDF2-600,000 (its other is scrypt, 64 MiB per
  open), though Cairn's password is 32 random bytes and would need none.
- The peak RSS includes the test binary's own, shown idle in the last row (it links the
  envtest, Kubernetes client and controller packages of every benchmark, which the node
  agent's binary does not all need); the first copy adds about 120 MiB to it, the second
  about 15. Not profiled: kopia's
  10 MiB pack buffers for two upload workers and the heap the Go runtime lets grow (GOGC 100)
  before GOMEMLIMIT makes it collect harder are the likely part of it.
- These machines are shared and noisy (two cores, other runs): the floor (tar and sha256sum,
  two processes) and a copy (the copy's process and the proxy) each need both cores, so a
  busy neighbour moves them differently. Runs on the day this benchmark was written put the
  first copy at 0.41 to 0.59 of the floor and the second at 6.4 to 10× faster than the first:
  compare runs on the same machine, and read the ratios as ± 20%.

### Restoring it: 200 MiB and 10,000 small files written back through the blob proxy

Issue 29's measure. The first snapshot above is restored into an empty directory by a child
process doing what the node agent does for one PodVolumeRestore: open the repository
read-only through the blob proxy with the agent's read-ahead (\`blobproxy.Options\`
ReadAheadWindows and ReadAheadBytes: four windows of 1 MiB), \`Restore\` with \`Overwrite\` (as
the agent always does) and
the agent's parallelism (\`Agent.RestoreParallelism\` 0: the repository's default, 2 files at
once), close; with the chart's \`GOMEMLIMIT=200MiB\`. A second restore does the same with 8
files at once, to show what the knob gives. Each restored tree is compared with the original,
byte for byte (sizes, modes, contents). The floor is \`tar -xf\` of a tar of the same
directory (made beforehand, in the page cache) into an empty directory, run before and after
the restores; the faster is the floor. Nothing is flushed to disk by either: both write into
the page cache.

| measurement | result | goal | verdict |
|---|---|---|---|
| floor: \`tar -xf\` into an empty directory | $(metric $v Volumes200MiBAnd10kFiles extract-floor-s) s, $(metric $v Volumes200MiBAnd10kFiles extract-floor-MB/s) MB/s | — | — |
| restore, 2 files at once (the node agent's default): open + restore + close | $(metric $v Volumes200MiBAnd10kFiles restore-s) s (open $(metric $v Volumes200MiBAnd10kFiles restore-open-s) s, restore $(metric $v Volumes200MiBAnd10kFiles restore-call-s) s), $(metric $v Volumes200MiBAnd10kFiles restore-MB/s) MB/s | — | — |
| restore's throughput / the floor's | $(metric $v Volumes200MiBAnd10kFiles restore-of-floor) | ≥ 0.5 | $(verdict "$(metric $v Volumes200MiBAnd10kFiles restore-of-floor)" ">=" 0.5) |
| restore: CPU of the restore's process / of the proxy (the benchmark's process) | $(metric $v Volumes200MiBAnd10kFiles restore-cpu-s) / $(metric $v Volumes200MiBAnd10kFiles restore-proxy-cpu-s) s | — | — |
| node agent (the restore's process) peak RSS | $(metric $v Volumes200MiBAnd10kFiles restore-peak-rss-MiB) MiB | < 256 MiB | $(verdict "$(metric $v Volumes200MiBAnd10kFiles restore-peak-rss-MiB)" "<" 256) |
| restore, 8 files at once | $(metric $v Volumes200MiBAnd10kFiles restore-p8-s) s, $(metric $v Volumes200MiBAnd10kFiles restore-p8-MB/s) MB/s, $(metric $v Volumes200MiBAnd10kFiles restore-p8-of-floor) of the floor | — | — |
| the same, peak RSS | $(metric $v Volumes200MiBAnd10kFiles restore-p8-peak-rss-MiB) MiB | (< 256 MiB) | $(verdict "$(metric $v Volumes200MiBAnd10kFiles restore-p8-peak-rss-MiB)" "<" 256) |

How to read it:
- The floor is hard to approach: \`tar -xf\` of a tar in the page cache only creates files and
  copies bytes into the page cache (10,000 creates and 250 MB of memcpy), while the restore
  fetches every content through the proxy's HTTP hop, decrypts and verifies it (AES-GCM, HMAC,
  the content's hash), then creates the file and sets its mode, owner and times. Profiled on
  this machine (\`CAIRN_BENCH_VOLUMES_PROFILE_DIR\` writes restore.pprof and restore-8.pprof).
- Read-ahead (issue 29's follow-up): the restore used to make one ranged GET per small file's
  content, 10,000 requests each answered from a 10 MiB pack on disk, and the two sides spent
  3.3 to 5.6 CPU-seconds together. The backup writes a directory's small files one after
  another into a pack, and the restore reads them in about that order, so the agent's client
  now reads 1 MiB aligned windows of a pack (\`atMost\`: fewer bytes where the pack ends),
  keeps four, and answers the next reads from them: about 50 requests for the small files
  instead of 10,000. Reads of half a window or more (the large file's contents) and blobs that
  are not packs go by range as before. Measured the same day on the same machine: the proxy's
  CPU went from 1.4 to 2.1 s down to 0.8 to 0.9 s, the restore's own from 2.6 to 3.1 s down to
  1.4 to 2.8 s (the lower with the machine quieter), the two together 28 to 55% less; memory
  unchanged (4 MiB of windows). Whole 10 MiB packs were
  tried first: as little CPU, but slower, since every first read of a pack waited for all of
  it, with nothing to overlap the wait.
- What is left is the restore process's own CPU, and half of it is in \`openat\`: kopia creates
  each file (\`O_CREAT|O_TRUNC\`), sizes it, writes it, then sets its mode, owner and times, as
  \`tar\` does, but on this virtual machine its creates cost about 130 µs each in the kernel
  against tar's few tens when the machine is busy (other processes creating files contend for
  the same kernel locks; \`tar\`'s own time swung from 0.3 to 6 s in those runs); the rest is
  reading and decrypting the contents. The restore and the proxy together still need 2.2 to
  3.7 CPU-seconds for what \`tar\` does in well under one: on two cores the restore stays
  CPU-bound, and misses the goal by that much.
- The ratio swings with the machine's load more than anything Cairn does: in the three runs
  made while writing this section the floor took 0.35, 1.3 and 1.9 s (another session was
  compiling beside the last, the one in the table) and the restore 3.1 to 5.1 s, so the
  restore came out at 0.12 to 0.37 of the floor. On a quiet run, 0.35 s against 3.1 s: the
  restore is about a tenth of the floor, far from a half.
- More files at once is no cure on two cores (the 8-at-once row): from 10% slower to 30%
  faster than 2 at once across the runs. It costs memory, but less than was first reported:
  about 190 MiB against 165 at 2 at once, measured by the child itself (the 470 MiB reported
  before were the benchmark process's own, see the copies' section). The default stays 2:
  raise \`RestoreParallelism\` with more CPU for the agent and the manager. Where each content costs a round trip to a remote store (S3
  across a network, which this benchmark's filesystem location does not have) the restore
  waits on latency rather than on CPU, and more files at once should help more (not measured
  here): on the one-node suite, whose S3 reads cross four hops, the emptyDir of 10,000 small
  files takes about 20 s to restore with 2 at once.
- As for the copies, the peak RSS includes the test binary's own (idle row above).
- Issue 29's goal (≥ 0.5 of the floor) is not met on this machine and is not within reach of
  anything in Cairn's part of the path: with the proxy's requests gone, the restore's own file
  creates alone cost more CPU than the whole floor.
MD

if [[ -f docs/bench/writer.txt ]]; then
  w=docs/bench/writer.txt
  cat >>docs/benchmarks.md <<MD

## Volume restore: Cairn's confined writer against kopia's FilesystemOutput

Issue 39's measure (\`BenchmarkRestoreWriters\`, internal/repository): the volume benchmark's
tree (200 MiB of random bytes, 10,000 files of 4 KiB in directories of 100, a link in each)
restored from a filesystem repository into an empty directory by kopia's \`FilesystemOutput\`,
which Cairn used before, and by Cairn's own writer, which writes beneath a handle on the
volume and follows no link (docs/volumes.md), in turns, medians of 5 rounds each, both with
the node agent's two files at once.

| writer | median ms | throughput, Cairn / kopia | goal |
|---|---|---|---|
| kopia's FilesystemOutput | $(metric $w RestoreWriters kopia-ms) | | |
| Cairn's confined writer | $(metric $w RestoreWriters cairn-ms) | $(metric $w RestoreWriters throughput-ratio) | ≥ 0.9 ($(verdict "$(metric $w RestoreWriters throughput-ratio)" ">=" 0.9)) |

Both spend most of their time in the system calls that create the files, and on this shared
machine the rounds move more with the load than between the writers (the raw output gives
each round). Cairn's writer walks no path: each directory is opened once, beneath the root,
and its handle kept while its files are written (at most 64 at a time); a file that is not
there yet is made under its own name (\`O_CREAT|O_EXCL\`, which follows no link), and only one
that is replaced goes through a temporary name and a rename. The first version, which opened
the parent of every file, took a fresh 1 MiB copy buffer per file and renamed every file, ran
at 0.44 of kopia's throughput; reusing the buffers brought it to 0.86, keeping the
directories' handles to 0.82 to 1.10 across runs at a load of 16 to 36, and creating new files
in place to the table's run, at a load under 1.
MD
fi

if [[ -f docs/bench/hooks.txt ]]; then
  h=docs/bench/hooks.txt
  cat >>docs/benchmarks.md <<MD

## Hooks: an empty pre+post hook pair on each of 50 pods

Issue 30's measure, on the one-node cluster (test/e2e/node, \`BENCHES=hooks make bench\`): 50
pods of the volume-data app in one namespace, backed up (pods only, no volume data) three
times without hooks and three times with \`spec.hooks\` giving every pod an empty pre hook and an
empty post hook (\`/voldata hook\`, which exits 0 at once), alternately. Each backup is timed from
its creation to \`Completed\` as a client sees it (polled every 50 ms); the medians are compared.
Every exec is a real round trip: the manager's pod, the API server, the kubelet, containerd,
runc exec in the container.

| measurement | result | goal | verdict |
|---|---|---|---|
| backup of 50 pods, no hooks (median) | $(metric $h HookPair50Pods s-without) s | — | — |
| the same with a pre+post pair on each pod, $(metric $h HookPair50Pods hooks) hooks (median) | $(metric $h HookPair50Pods s-with) s | — | — |
| added by the hooks | $(metric $h HookPair50Pods s-added) s | < 2 s | $(verdict "$(metric $h HookPair50Pods s-added)" "<" 2) |

Runs: $(sed -n 's/^# //p' $h).

How to read it:
- The hooks run in the backup's worker pool (\`itemBlockWorkerCount\`, 4 in the chart): a pod's
  pre hook, its object, its post hook (right away: it has no volume copy to wait for), four
  pods at a time. So each worker makes about 25 pods × 2 = 50 execs one after the other, and
  what the hooks add is about 50 exec round trips. At 8 s added, one exec took about 0.16 s
  from the manager: the API server's exec request, its upgraded connection to the kubelet, the kubelet's
  CRI call, containerd's and runc's exec of a new process in the container, and the streams
  closed again. The same \`kubectl exec ... /voldata hook\`, timed by hand right after the run
  with the machine's load average at 14 (two cores, shared with other sessions' test suites),
  took 0.07 to 0.3 s, kubectl's own start included.
- The goal (< 2 s for the 100 hooks) needs 40 ms per exec with four workers: it is missed by
  about 6 s (four times the goal) on this machine, by the execs, not by Cairn's own work (the
  backup of the same 50 pods without hooks takes 0.6 s).
- More workers do not help here. The same measure with \`itemBlockWorkerCount: 16\` (a
  one-off run on 2026-11-26, the chart value changed by hand) added 8.5 s (without hooks 0.34,
  0.60, 1.20 s; with 9.06, 9.80, 6.60 s): sixteen execs at once take as long as four did one
  after the other, so an exec's cost here is CPU, not waiting — the API server's TLS and
  upgrade, the kubelet, containerd and runc starting a process in the container's namespaces,
  all on the same two cores, which other sessions' suites kept busy (load average 14). About
  80 ms of the machine per exec; a node with cores to spare for its kubelet and runtime, and an
  API server elsewhere, is where the pool's parallelism would show. Hooks are for the pods
  that need them, a few per backup, where their time is the exec's and the application's own
  quiescing.
MD
fi
# The guard (issue 41): each row's figure next to the one last accepted, flagged when it moved
# by more than 25% (hack/bench-compare.sh, docs/bench/accepted.txt).
compared=$(hack/bench-compare.sh)
echo "bench: each row against its accepted figure (docs/bench/accepted.txt):" >&2
echo "$compared" >&2
if grep -q -- '\*\*moved\*\*' <<<"$compared"; then
  echo "bench: some rows moved by more than 25% from their accepted figure (**moved** above): find out why, or accept the new figure on purpose (docs/benchmarks.md, Accepted figures)" >&2
fi
cat >>docs/benchmarks.md <<MD

## Accepted figures

What let the restore's figures slip unnoticed (issue 41) is that nothing compared them with
what they had been. \`docs/bench/accepted.txt\` records each row's last accepted figure —
ratios (a run against its floor, measured in turns in one run, or one kind of run against
another), never times, which move with the machine; the cancels are the exception, a latency
with no floor to divide by, in milliseconds. \`make bench\` prints each row's figure next to the
accepted one (\`hack/bench-compare.sh\`, which can also be run alone on the raw outputs of
\`docs/bench/\`) and flags one that moved by more than 25% either way:

$compared

A flagged row is a question, not a failure: these machines are shared and noisy, so first run
that benchmark again (\`BENCHES=<name> make bench\`) and look at its rounds in the raw output.
When a new figure is meant — a change that costs or saves time on purpose, or a benchmark
measured differently — accept it on purpose:

1. Run the benchmark at least twice, at a known load (the raw output gives the load average),
   and make sure the figure holds.
2. \`hack/bench-compare.sh --accept <row>\` (the first column of \`docs/bench/accepted.txt\`;
   \`all\` takes every row's figure now) writes the figure measured now and today's date.
3. Commit \`docs/bench/accepted.txt\` with the raw output and this report, the commit message
   saying why the figure moved (the change, the issue); a reviewer sees the old and the new
   figure in the diff.

Editing a figure by hand to make a flag go away defeats the point; so does accepting a figure
from one noisy run.
MD
echo "bench: wrote docs/benchmarks.md" >&2
