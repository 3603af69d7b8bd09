#!/usr/bin/env bash
# Makes real Velero backups for Cairn's tests (issue 33): builds Velero and its AWS object-store
# plugin from the Go module proxy, runs the Velero server out of cluster against a local
# control plane (hack/local-up.sh, its own directory and free ports) and a versitygw S3 server
# (127.0.0.1, a free port), creates the objects below, backs them up with Velero, and copies
# the bucket tree versitygw wrote into testdata/velero/bucket.
#
#   hack/velero-fixtures.sh          regenerate testdata/velero/bucket and testdata/velero/source
#   hack/velero-fixtures.sh volumes  regenerate testdata/velero/volumes instead: a Velero
#                                    file-system backup of a pod's volumes, made on the one-node
#                                    cluster by hack/velero-volume-fixtures.sh
#
# The backups (Velero's BSL prefix is "velero"):
#   shop-full       namespace shop: ConfigMaps, Secrets, a Deployment, a Service, a
#                   ServiceAccount, a Role and RoleBinding, a CRD (widgets.fixtures.cairn.dev)
#                   with two custom resources (the CRD comes with them). Completed.
#   shop-labelled   namespace shop, label selector app=web. Completed.
#   shop-broken     namespaces shop and broken. PartiallyFailed: namespace broken holds a
#                   custom resource of gadgets.fixtures.cairn.dev, whose preferred version
#                   (v2) needs a conversion webhook that does not exist, so Velero's listing of
#                   it fails ("Error listing items") and Velero counts the error.
#   daily-<time>    made from the Velero Schedule "daily" (namespace shop, ttl 72h) with
#                   velero backup create --from-schedule: Velero's velero.io/schedule-name label.
# and a Velero restore of shop-labelled (restores/shop-labelled-restore/ in the bucket; it ends
# PartiallyFailed out of cluster: a restore plugin looks for Velero's own Deployment, which does
# not exist here; its results say so).
# testdata/velero/source holds the objects as the API server returned them before the backups
# (kubectl get -o json), for the tests' object-by-object comparison.
#
# Nothing leaves the machine but the Go module proxy's downloads; every process the script
# starts is stopped at its end, by pid. Needs: go, curl, python3, openssl, the envtest
# binaries (KUBEBUILDER_ASSETS), versitygw (VERSITYGW).
set -euo pipefail

if [[ ${1:-} == volumes ]]; then
  exec "$(dirname "$0")/velero-volume-fixtures.sh"
fi

# shellcheck source=hack/velero-lib.sh
. "$(dirname "$0")/velero-lib.sh"

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$ROOT/testdata/velero
ASSETS=${KUBEBUILDER_ASSETS:?set KUBEBUILDER_ASSETS to the envtest binaries}
VERSITYGW=${VERSITYGW:-$ROOT/bin/versitygw-v1.8.0}
WORK=${WORK:-$(mktemp -d /tmp/velero-fixtures.XXXXXX)}
mkdir -p "$WORK"
echo "velero-fixtures: working in $WORK"

PIDS=()
cleanup() {
  local rc=$?
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  [[ -f "$WORK/local/kubeconfig" ]] && LOCAL_DIR=$WORK/local "$ROOT/hack/local-up.sh" down >/dev/null 2>&1 || true
  exit $rc
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

echo "velero-fixtures: building Velero $VELERO_VERSION and velero-plugin-for-aws $AWS_PLUGIN_VERSION"
mkdir -p "$WORK/bin/plugins"
velero_build github.com/vmware-tanzu/velero "$VELERO_VERSION" ./cmd/velero "$WORK/bin/velero"
velero_build github.com/vmware-tanzu/velero-plugin-for-aws "$AWS_PLUGIN_VERSION" ./velero-plugin-for-aws "$WORK/bin/plugins/velero-plugin-for-aws"
VELERO=$WORK/bin/velero

echo "velero-fixtures: starting the control plane"
export LOCAL_DIR=$WORK/local LOCAL_API_PORT=$(free_port) LOCAL_ETCD_PORT=$(free_port) \
  LOCAL_ETCD_PEER_PORT=$(free_port) LOCAL_CONTROLLER_MANAGER_PORT=$(free_port) KUBEBUILDER_ASSETS=$ASSETS
"$ROOT/hack/local-up.sh" up
export KUBECONFIG=$LOCAL_DIR/kubeconfig
kc() { "$ASSETS/kubectl" "$@"; }

echo "velero-fixtures: starting versitygw"
S3_PORT=$(free_port)
S3_KEY=velero$(openssl rand -hex 4)
S3_SECRET=$(openssl rand -hex 20)
mkdir -p "$WORK/s3/data/velero" "$WORK/s3/meta"
"$VERSITYGW" --port "127.0.0.1:$S3_PORT" --access "$S3_KEY" --secret "$S3_SECRET" --quiet \
  posix --sidecar "$WORK/s3/meta" "$WORK/s3/data" >"$WORK/versitygw.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do curl -s "http://127.0.0.1:$S3_PORT" >/dev/null && break; sleep 0.2; done
printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' "$S3_KEY" "$S3_SECRET" >"$WORK/credentials"

echo "velero-fixtures: installing Velero's CRDs and location"
"$VELERO" install --crds-only --dry-run -o yaml | kc apply -f - >/dev/null
kc create namespace velero
kc apply -f - <<EOF
apiVersion: velero.io/v1
kind: BackupStorageLocation
metadata: {name: default, namespace: velero}
spec:
  provider: aws
  default: true
  objectStorage: {bucket: velero, prefix: velero}
  config: {region: us-east-1, s3ForcePathStyle: "true", s3Url: "http://127.0.0.1:$S3_PORT"}
EOF

# The objects come before the server: Velero discovers the API's resources when it starts (and
# every 5 minutes after), so a CRD made later would not be backed up yet.
echo "velero-fixtures: creating the objects"
kc apply -f "$ROOT/hack/velero-fixtures/objects.yaml" >/dev/null
kc wait --for condition=established crd/widgets.fixtures.cairn.dev crd/gadgets.fixtures.cairn.dev >/dev/null
kc apply -f "$ROOT/hack/velero-fixtures/custom.yaml" >/dev/null

echo "velero-fixtures: starting the Velero server"
AWS_SHARED_CREDENTIALS_FILE=$WORK/credentials "$VELERO" server --kubeconfig "$KUBECONFIG" --namespace velero \
  --plugin-dir "$WORK/bin/plugins" --metrics-address "127.0.0.1:$(free_port)" \
  --profiler-address "127.0.0.1:$(free_port)" --uploader-type kopia \
  --store-validation-frequency 5s --backup-sync-period 0s >"$WORK/velero-server.log" 2>&1 &
PIDS+=($!)
velero_wait_location velero-fixtures

# backup NAME ARGS...: a Velero backup, waited for; it must end as expected ($EXPECT).
backup() {
  local name=$1
  shift
  "$VELERO" backup create "$name" -n velero --wait "$@" >/dev/null
  local phase
  phase=$(kc get backups.velero.io "$name" -n velero -o jsonpath='{.status.phase}')
  echo "velero-fixtures: backup $name: $phase"
  [[ $phase == "$EXPECT" ]] || { echo "velero-fixtures: expected $EXPECT; see $WORK/velero-server.log" >&2; exit 1; }
}
EXPECT=Completed backup shop-full --include-namespaces shop --ttl 720h
EXPECT=Completed backup shop-labelled --include-namespaces shop --selector app=web --ttl 240h
EXPECT=PartiallyFailed backup shop-broken --include-namespaces shop,broken

"$VELERO" schedule create daily -n velero --schedule "@every 24h" --include-namespaces shop --ttl 72h >/dev/null
# A backup of the schedule now (its first run is a day away), labelled with its name as a run
# of it is, named as Velero names its runs.
EXPECT=Completed backup "daily-$(date -u +%Y%m%d%H%M%S)" --from-schedule daily
"$VELERO" schedule delete daily -n velero --confirm >/dev/null
# A restore, so that the bucket has Velero's restores/ beside backups/, as a real one does.
"$VELERO" restore create shop-labelled-restore -n velero --from-backup shop-labelled \
  --namespace-mappings shop:shop-restored --wait >/dev/null
echo "velero-fixtures: restore shop-labelled-restore: $(kc get restores.velero.io shop-labelled-restore -n velero -o jsonpath='{.status.phase}')"

echo "velero-fixtures: writing $OUT"
rm -rf "$OUT/bucket" "$OUT/source"
mkdir -p "$OUT/source"
# versitygw's posix backend keeps each object as a file under data/<bucket>/<key>.
cp -r "$WORK/s3/data/velero" "$OUT/bucket"
for ns in shop broken; do
  kc get configmaps,secrets,serviceaccounts,services,deployments.apps,roles.rbac.authorization.k8s.io,rolebindings.rbac.authorization.k8s.io,widgets.fixtures.cairn.dev,gadgets.v1.fixtures.cairn.dev \
    -n "$ns" -o json >"$OUT/source/$ns.json"
done
kc get crd widgets.fixtures.cairn.dev gadgets.fixtures.cairn.dev -o json >"$OUT/source/crds.json"
cat >"$OUT/VERSION" <<EOF
Made by hack/velero-fixtures.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ)
Velero $VELERO_VERSION (github.com/vmware-tanzu/velero), velero-plugin-for-aws $AWS_PLUGIN_VERSION,
both built with k8s.io modules at $K8S_REPLACE_VERSION (the proxy refuses v0.33.11);
kube-apiserver $("$ASSETS/kube-apiserver" --version | awk '{print $2}'), versitygw $("$VERSITYGW" --version 2>/dev/null | head -1 | awk '{print $NF}').
Velero BSL: provider aws, bucket velero, prefix velero. bucket/ is the bucket's tree.
EOF
echo "velero-fixtures: done"
