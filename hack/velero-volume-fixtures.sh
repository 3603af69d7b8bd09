#!/usr/bin/env bash
# Makes a real Velero file-system backup (kopia) of a pod's volumes for Cairn's tests (issue 33,
# "Volume data"), on the one-node cluster (hack/node-up.sh): Velero's own server and node agent
# copy the volumes of the pod in hack/velero-fixtures/volumes.yaml into a kopia repository in a
# versitygw bucket, and the bucket's tree is copied into testdata/velero/volumes/bucket.
#
#   hack/velero-volume-fixtures.sh     regenerate testdata/velero/volumes (also run by
#                                      'hack/velero-fixtures.sh volumes')
#
# How Velero runs here. Velero v1.18 copies a pod volume in a "hosting pod" that its node agent
# creates on the volume's node from the node agent DaemonSet's own pod template (image, service
# account, env, volumes), running '/velero pod-volume backup'; so the node agent and that pod
# need Velero as an image: Velero is built static (CGO_ENABLED=0) and packed alone into an image
# by hack/image (as the node's other images), imported into the node's containerd. The node
# agent runs as Velero's DaemonSet would make it (velero install --use-node-agent: the kubelet's
# pods directory mounted at /host_pods, volume host-pods), with the kubelet root of this node.
# The Velero server runs as a process inside the node's network namespace with the node's admin
# kubeconfig and the AWS object-store plugin, as hack/velero-fixtures.sh runs it. versitygw
# listens on the node's address (10.200.0.1) on a free port, inside the namespace, where both
# the server and the pods reach it. The repository's password is Velero's default
# (static-passw0rd, the Secret velero-repo-credentials that the server makes).
#
# What is recorded beside the bucket: the pod as the API server returned it (pod.json), and the
# tree of each volume as it was on the node when Velero copied it (<volume>.tree: one line per
# entry, "path type mode sha256-or-link-target", in path order), which the tests compare with
# what a restore writes; and the app's own report of each volume (report.json, voldata's
# /digest), which the one-node suite compares with the restored app's.
#
# Nothing leaves the machine but the Go module proxy's downloads (the node's namespace has no
# route off it); every process the script starts is stopped, by pid, and what it made in the
# cluster is deleted; a node the script started is stopped again. Needs: go, python3, curl,
# openssl, root (the node), the envtest binaries (KUBEBUILDER_ASSETS), versitygw (VERSITYGW).
set -euo pipefail

# shellcheck source=hack/velero-lib.sh
. "$(dirname "$0")/velero-lib.sh"
VELERO_IMAGE=cairn-velero-fixture:dev
NS=ledger
POD=books
BACKUP=ledger-fs

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/node-lib.sh
source "$ROOT/hack/node-lib.sh"
OUT=$ROOT/testdata/velero/volumes
VERSITYGW=${VERSITYGW:-$ROOT/bin/versitygw-v1.8.0}
WORK=${WORK:-$(mktemp -d /tmp/velero-volume-fixtures.XXXXXX)}
mkdir -p "$WORK"
echo "velero-volume-fixtures: working in $WORK"

PIDS=()
STARTED_NODE=false
cleanup() {
  local rc=$?
  if [[ -f "$KUBECONFIG_FILE" ]] && "$ROOT/hack/node-up.sh" --running >/dev/null 2>&1; then
    kc delete namespace "$NS" velero --ignore-not-found --wait=true --timeout=120s >/dev/null 2>&1 || true
    kc delete clusterrolebinding velero-fixture --ignore-not-found >/dev/null 2>&1 || true
    "$VELERO" install --crds-only --dry-run -o yaml 2>/dev/null | kc delete --ignore-not-found --wait=false -f - >/dev/null 2>&1 || true
    for _ in $(seq 60); do kc get crd -o name 2>/dev/null | grep -q '[.]velero[.]io$' || break; sleep 1; done
    # A CRD deleted seconds after it was made can stay Terminating ("storage is (re)initializing"):
    # its instances went with namespace velero, so its finalizer is taken off.
    for crd in $(kc get crd -o name 2>/dev/null | grep '[.]velero[.]io$'); do
      kc patch "$crd" --type merge -p '{"metadata":{"finalizers":[]}}' >/dev/null 2>&1 || true
    done
  fi
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if $STARTED_NODE; then "$ROOT/hack/node-down.sh" || true; fi
  exit $rc
}
trap cleanup EXIT

free_port() { in_ns python3 -c 'import socket; s=socket.socket(); s.bind(("10.200.0.1",0)); print(s.getsockname()[1]); s.close()'; }

echo "velero-volume-fixtures: building Velero $VELERO_VERSION (static) and velero-plugin-for-aws $AWS_PLUGIN_VERSION"
mkdir -p "$WORK/bin/plugins"
velero_build github.com/vmware-tanzu/velero "$VELERO_VERSION" ./cmd/velero "$WORK/bin/velero"
velero_build github.com/vmware-tanzu/velero-plugin-for-aws "$AWS_PLUGIN_VERSION" ./velero-plugin-for-aws "$WORK/bin/plugins/velero-plugin-for-aws"
VELERO=$WORK/bin/velero

if ! "$ROOT/hack/node-up.sh" --running >/dev/null 2>&1; then
  echo "velero-volume-fixtures: starting the one-node cluster"
  STARTED_NODE=true
  "$ROOT/hack/node-images.sh" build
  "$ROOT/hack/node-up.sh"
fi
[[ -f "$IMAGES_DIR/voldata.tar" ]] || "$ROOT/hack/node-images.sh" build import

echo "velero-volume-fixtures: packing Velero as the image $VELERO_IMAGE"
(cd "$ROOT/hack/image" && CGO_ENABLED=0 go build -trimpath -o "$WORK/bin/image-builder" .)
"$WORK/bin/image-builder" -binary "$VELERO" -name "$VELERO_IMAGE" -user 0:0 -out "$WORK/velero.tar"
ctr images import "$WORK/velero.tar" >/dev/null

echo "velero-volume-fixtures: starting versitygw on $NODE_IP in the node's namespace"
S3_PORT=$(free_port)
S3_KEY=velero$(openssl rand -hex 4)
S3_SECRET=$(openssl rand -hex 20)
# A fresh bucket and Velero client state (its repository config lives under HOME, $WORK).
rm -rf "$WORK/s3" "$WORK/udmrepo"
mkdir -p "$WORK/s3/data/velero" "$WORK/s3/meta"
# nsenter, not the in_ns function, so that $! is the server's own pid (nsenter execs it).
nsenter --net="/run/netns/$NETNS" -- "$VERSITYGW" --port "$NODE_IP:$S3_PORT" --access "$S3_KEY" --secret "$S3_SECRET" --quiet \
  posix --sidecar "$WORK/s3/meta" "$WORK/s3/data" >"$WORK/versitygw.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do in_ns curl -s "http://$NODE_IP:$S3_PORT" >/dev/null && break; sleep 0.2; done
printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' "$S3_KEY" "$S3_SECRET" >"$WORK/credentials"

echo "velero-volume-fixtures: installing Velero's CRDs, location and node agent"
"$VELERO" install --crds-only --dry-run -o yaml | kc apply -f - >/dev/null
kc create namespace velero >/dev/null
kc create secret generic cloud-credentials -n velero --from-file=cloud="$WORK/credentials" >/dev/null
kc apply -f - >/dev/null <<EOF
apiVersion: velero.io/v1
kind: BackupStorageLocation
metadata: {name: default, namespace: velero}
spec:
  provider: aws
  default: true
  objectStorage: {bucket: velero, prefix: velero}
  config: {region: us-east-1, s3ForcePathStyle: "true", s3Url: "http://$NODE_IP:$S3_PORT"}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: velero, namespace: velero}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: velero-fixture}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{kind: ServiceAccount, name: velero, namespace: velero}]
---
# As 'velero install --use-node-agent' makes it, with this node's kubelet root.
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: node-agent, namespace: velero, labels: {component: velero}}
spec:
  selector: {matchLabels: {name: node-agent}}
  template:
    metadata: {labels: {name: node-agent, role: node-agent, component: velero}}
    spec:
      serviceAccountName: velero
      terminationGracePeriodSeconds: 1
      securityContext: {runAsUser: 0}
      containers:
        - name: node-agent
          image: $VELERO_IMAGE
          imagePullPolicy: IfNotPresent
          command: ["/velero"]
          args: ["node-agent", "server", "--log-level", "debug"]
          env:
            - {name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}
            - {name: VELERO_NAMESPACE, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
            - {name: VELERO_SCRATCH_DIR, value: /scratch}
            - {name: AWS_SHARED_CREDENTIALS_FILE, value: /credentials/cloud}
            - {name: HOME, value: /scratch}
          volumeMounts:
            - {name: host-pods, mountPath: /host_pods, mountPropagation: HostToContainer}
            - {name: scratch, mountPath: /scratch}
            - {name: tmp, mountPath: /tmp}
            - {name: cloud-credentials, mountPath: /credentials}
      volumes:
        - {name: host-pods, hostPath: {path: "$DIR/kubelet/pods"}}
        - {name: scratch, emptyDir: {}}
        - {name: tmp, emptyDir: {}}
        - {name: cloud-credentials, secret: {secretName: cloud-credentials}}
EOF

echo "velero-volume-fixtures: starting the app"
kc apply -f "$ROOT/hack/velero-fixtures/volumes.yaml" >/dev/null
kc wait --for=condition=Ready "pod/$POD" -n "$NS" --timeout=120s >/dev/null
kc rollout status daemonset/node-agent -n velero --timeout=120s >/dev/null

echo "velero-volume-fixtures: starting the Velero server in the node's namespace"
nsenter --net="/run/netns/$NETNS" -- env AWS_SHARED_CREDENTIALS_FILE="$WORK/credentials" HOME="$WORK" "$VELERO" server --kubeconfig "$KUBECONFIG_FILE" \
  --namespace velero --plugin-dir "$WORK/bin/plugins" --metrics-address "127.0.0.1:$(free_port)" \
  --profiler-address "127.0.0.1:$(free_port)" --uploader-type kopia \
  --store-validation-frequency 5s --backup-sync-period 0s >"$WORK/velero-server.log" 2>&1 &
PIDS+=($!)
velero_wait_location velero-volume-fixtures

echo "velero-volume-fixtures: backing up namespace $NS with Velero's file-system backup"
in_ns "$VELERO" --kubeconfig "$KUBECONFIG_FILE" backup create "$BACKUP" -n velero --include-namespaces "$NS" \
  --default-volumes-to-fs-backup --ttl 720h --wait >/dev/null
phase=$(kc get backups.velero.io "$BACKUP" -n velero -o jsonpath='{.status.phase}')
echo "velero-volume-fixtures: backup $BACKUP: $phase"
[[ $phase == Completed ]] || {
  echo "velero-volume-fixtures: expected Completed; see $WORK/velero-server.log and the node agent's log" >&2
  kc logs -n velero daemonset/node-agent --tail=50 >&2 || true
  exit 1
}
kc get podvolumebackups.velero.io -n velero -o jsonpath='{range .items[*]}{.spec.volume}: {.status.phase} {.status.snapshotID}{"\n"}{end}'

echo "velero-volume-fixtures: writing $OUT"
rm -rf "$OUT"
mkdir -p "$OUT"
# versitygw's posix backend keeps each object as a file under data/<bucket>/<key>.
cp -r "$WORK/s3/data/velero" "$OUT/bucket"
kc get pod "$POD" -n "$NS" -o json >"$OUT/pod.json"
ip=$(kc get pod "$POD" -n "$NS" -o jsonpath='{.status.podIP}')
in_ns curl -sf "http://$ip:8080/digest" | python3 -m json.tool >"$OUT/report.json"
uid=$(kc get pod "$POD" -n "$NS" -o jsonpath='{.metadata.uid}')
for volume in data journal; do
  python3 - "$DIR/kubelet/pods/$uid/volumes/kubernetes.io~empty-dir/$volume" >"$OUT/$volume.tree" <<'PY'
import hashlib, os, stat, sys
root = sys.argv[1]
out = []
for dirpath, dirs, files in os.walk(root):
    for name in dirs + files:
        path = os.path.join(dirpath, name)
        st = os.lstat(path)
        rel = os.path.relpath(path, root)
        mode = "%04o" % stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            out.append((rel, "symlink", mode, os.readlink(path)))
        elif stat.S_ISDIR(st.st_mode):
            out.append((rel, "dir", mode, "-"))
        else:
            with open(path, "rb") as f:
                out.append((rel, "file", mode, hashlib.sha256(f.read()).hexdigest()))
for line in sorted(out):
    print(" ".join(line))
PY
done
cat >"$OUT/VERSION" <<EOF
Made by hack/velero-volume-fixtures.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ)
Velero $VELERO_VERSION (github.com/vmware-tanzu/velero; kopia github.com/project-velero/kopia
$(grep 'project-velero/kopia' "$WORK/src/velero/go.mod" | awk '{print $NF}')), server and node agent, velero-plugin-for-aws $AWS_PLUGIN_VERSION,
built static with k8s.io modules at $K8S_REPLACE_VERSION; the one-node cluster's kubelet $KUBE_VERSION, versitygw.
Velero BSL: provider aws, bucket velero, prefix velero; repository password Velero's default
(static-passw0rd). Backup $BACKUP of namespace $NS (pod $POD, emptyDir volumes data and journal)
with --default-volumes-to-fs-backup. bucket/ is the bucket's tree; <volume>.tree the volume's
tree on the node ("path type mode sha256-or-link-target"); report.json the app's /digest.
EOF
echo "velero-volume-fixtures: done"
