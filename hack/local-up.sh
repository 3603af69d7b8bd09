#!/usr/bin/env bash
# A local control plane for trying Cairn: etcd + kube-apiserver + kube-controller-manager on
# 127.0.0.1, Cairn's CRDs and admission policies, the cairn-system namespace and a default
# filesystem BackupStorageLocation. kube-controller-manager runs the controllers deleting and restoring
# namespaces relies on (namespace, garbage collector, serviceaccount and its tokens), the same
# as internal/testenv.ControllerManagerControllers.
#
#   hack/local-up.sh up      start (idempotent: returns at once when it already runs)
#   hack/local-up.sh down    stop exactly the processes that 'up' started, by pid
#   hack/local-up.sh env     print the export line for kubectl
#
# State (etcd data, keys, logs, pids, kubeconfig, storage) lives under LOCAL_DIR, kept across
# down/up so backups survive; delete the directory for a fresh start.
# Settings: LOCAL_DIR (bin/local), LOCAL_API_PORT (16443), LOCAL_ETCD_PORT (12379),
# LOCAL_ETCD_PEER_PORT (12380), LOCAL_CONTROLLER_MANAGER_PORT (16257, its /healthz),
# KUBEBUILDER_ASSETS (the envtest binaries, hack/envtest.sh).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${LOCAL_DIR:-$ROOT/bin/local}
API_PORT=${LOCAL_API_PORT:-16443}
ETCD_PORT=${LOCAL_ETCD_PORT:-12379}
ETCD_PEER_PORT=${LOCAL_ETCD_PEER_PORT:-12380}
CONTROLLER_MANAGER_PORT=${LOCAL_CONTROLLER_MANAGER_PORT:-16257}
CONTROLLERS=namespace-controller,garbage-collector-controller,serviceaccount-controller,serviceaccount-token-controller
ASSETS=${KUBEBUILDER_ASSETS:-$("$ROOT/hack/envtest.sh" --print)}
KUBECONFIG_FILE="$DIR/kubeconfig"
NAMESPACE=cairn-system

mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
KUBECONFIG_FILE="$DIR/kubeconfig"

kc() { "$ASSETS/kubectl" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

# running NAME: true when NAME's pid file names a live process started by us.
running() {
  local pidfile="$DIR/$1.pid"
  [[ -f "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

api_ready() {
  [[ -f "$KUBECONFIG_FILE" ]] && kc get --raw /readyz >/dev/null 2>&1
}

# controller_manager_ready: its /healthz answers ok, over TLS verified against the
# self-signed certificate it wrote into certs/.
controller_manager_ready() {
  running kube-controller-manager &&
    curl -sf --cacert "$DIR/certs/kube-controller-manager.crt" \
      "https://127.0.0.1:${CONTROLLER_MANAGER_PORT}/healthz" >/dev/null 2>&1
}

default_service_account() {
  kc get serviceaccount default -n default >/dev/null 2>&1
}

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
  local seconds=$1 what=$2
  shift 2
  for ((i = 0; i < seconds * 5; i++)); do
    if "$@"; then return 0; fi
    sleep 0.2
  done
  echo "local-up: timed out after ${seconds}s waiting for $what; logs are in $DIR" >&2
  return 1
}

start() { # start NAME COMMAND...: run in the background, record the pid, log to NAME.log
  local name=$1
  shift
  nohup "$@" >"$DIR/$name.log" 2>&1 &
  echo $! >"$DIR/$name.pid"
}

setup_keys() {
  if [[ ! -f "$DIR/sa.key" ]]; then
    openssl genrsa -out "$DIR/sa.key" 2048 2>/dev/null
    openssl rsa -in "$DIR/sa.key" -pubout -out "$DIR/sa.pub" 2>/dev/null
  fi
  if [[ ! -f "$DIR/tokens.csv" ]]; then
    local token
    token=$(openssl rand -hex 24)
    echo "$token,cairn-admin,cairn-admin,system:masters" >"$DIR/tokens.csv"
    chmod 600 "$DIR/tokens.csv"
  fi
  local token
  token=$(cut -d, -f1 "$DIR/tokens.csv")
  cat >"$KUBECONFIG_FILE" <<KC
apiVersion: v1
kind: Config
clusters:
- name: cairn-local
  cluster:
    server: https://127.0.0.1:${API_PORT}
    insecure-skip-tls-verify: true
users:
- name: cairn-admin
  user:
    token: ${token}
contexts:
- name: cairn-local
  context:
    cluster: cairn-local
    user: cairn-admin
current-context: cairn-local
KC
  chmod 600 "$KUBECONFIG_FILE"
}

# The admission policies that record who created each Backup, Restore, Schedule and
# DownloadRequest (config/admission, as the chart installs them). The operator's identity, whose
# creates keep the requester they carry, is the user `make run-local` runs bin/manager as: the
# kubeconfig's, cairn-admin, which is also yours here, so on this control plane your own creates
# keep a requester you set; every other user's are recorded. The operator's name in the files
# (config/default's ServiceAccount) is replaced, as internal/testenv.AdmissionPolicies does.
CONFIG_OPERATOR=system:serviceaccount:cairn-system:cairn-manager
install_admission_policies() {
  local operator
  operator=$(cut -d, -f2 "$DIR/tokens.csv")
  sed "s/${CONFIG_OPERATOR}/${operator}/" "$ROOT/config/admission/requester.yaml" | kc apply -f - >/dev/null
  kc apply -f "$ROOT/config/admission/requester-immutable.yaml" >/dev/null
  wait_for 30 "the admission policies to act" admission_policies_act
}

# admission_policies_act: a server-side dry run of a create by another user records that user
# over a forged requester, and one of an update changing the requester of a paused Schedule
# (created for the probe, deleted on the way out) is refused.
PROBE_USER=cairn:admission-probe
admission_policies_act() {
  local probe='{"apiVersion":"cairn.dev/v1alpha1","kind":"Schedule","metadata":{"name":"cairn-admission-probe","namespace":"default","annotations":{"cairn.dev/requester":"forged"}},"spec":{"schedule":"@every 24h","paused":true}}'
  local recorded
  recorded=$(echo "$probe" | kc create --dry-run=server --as "$PROBE_USER" --as-group system:masters \
    -o 'jsonpath={.metadata.annotations.cairn\.dev/requester}' -f - 2>/dev/null) || return 1
  [[ "$recorded" == "$PROBE_USER" ]] || return 1
  echo "$probe" | kc apply -f - >/dev/null 2>&1 || return 1
  local answer
  answer=$(kc annotate --overwrite --dry-run=server -n default schedule/cairn-admission-probe \
    cairn.dev/requester=changed 2>&1) || true
  kc delete -n default schedule/cairn-admission-probe --ignore-not-found >/dev/null 2>&1
  [[ "$answer" == *"ValidatingAdmissionPolicy 'cairn-requester-immutable'"* ]]
}

up() {
  for bin in etcd kube-apiserver kube-controller-manager kubectl; do
    if [[ ! -x "$ASSETS/$bin" ]]; then
      echo "local-up: $ASSETS/$bin is missing: run 'make envtest' first" >&2
      exit 1
    fi
  done
  setup_keys
  if ! running etcd; then
    mkdir -p "$DIR/etcd"
    start etcd "$ASSETS/etcd" --name cairn-local --data-dir "$DIR/etcd" \
      --listen-client-urls "http://127.0.0.1:${ETCD_PORT}" \
      --advertise-client-urls "http://127.0.0.1:${ETCD_PORT}" \
      --listen-peer-urls "http://127.0.0.1:${ETCD_PEER_PORT}" \
      --initial-advertise-peer-urls "http://127.0.0.1:${ETCD_PEER_PORT}" \
      --initial-cluster "cairn-local=http://127.0.0.1:${ETCD_PEER_PORT}" \
      --unsafe-no-fsync
  fi
  if ! running kube-apiserver; then
    mkdir -p "$DIR/certs"
    start kube-apiserver "$ASSETS/kube-apiserver" \
      --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
      --cert-dir "$DIR/certs" \
      --etcd-servers "http://127.0.0.1:${ETCD_PORT}" \
      --service-cluster-ip-range 10.0.0.0/24 \
      --service-account-issuer https://kubernetes.default.svc.cluster.local \
      --service-account-key-file "$DIR/sa.pub" \
      --service-account-signing-key-file "$DIR/sa.key" \
      --token-auth-file "$DIR/tokens.csv" \
      --authorization-mode RBAC \
      --disable-admission-plugins ServiceAccount \
      --allow-privileged=true
  fi
  wait_for 90 "the API server to answer" api_ready
  if ! running kube-controller-manager; then
    start kube-controller-manager "$ASSETS/kube-controller-manager" \
      --kubeconfig "$KUBECONFIG_FILE" \
      --bind-address 127.0.0.1 --secure-port "$CONTROLLER_MANAGER_PORT" \
      --cert-dir "$DIR/certs" \
      --controllers "$CONTROLLERS" \
      --leader-elect=false \
      --use-service-account-credentials=false \
      --service-account-private-key-file "$DIR/sa.key" \
      --kube-api-qps 200 --kube-api-burst 400
  fi
  wait_for 60 "kube-controller-manager to be healthy" controller_manager_ready
  # Its serviceaccount controller gives every namespace a "default" ServiceAccount soon after it
  # starts; waiting for the default namespace's makes what a first backup of it finds the same
  # every time (the README tour shows the count).
  wait_for 60 "the default namespace's ServiceAccount" default_service_account

  kc apply --server-side --force-conflicts -f "$ROOT/config/crd/bases" >/dev/null
  kc wait --for condition=Established --timeout 60s \
    crd/backups.cairn.dev crd/backupstoragelocations.cairn.dev crd/restores.cairn.dev \
    crd/schedules.cairn.dev crd/downloadrequests.cairn.dev >/dev/null
  install_admission_policies
  kc create namespace "$NAMESPACE" --dry-run=client -o yaml | kc apply -f - >/dev/null
  mkdir -p "$DIR/storage"
  kc apply -f - >/dev/null <<BSL
apiVersion: cairn.dev/v1alpha1
kind: BackupStorageLocation
metadata:
  name: default
  namespace: ${NAMESPACE}
spec:
  provider: filesystem
  default: true
  config:
    path: ${DIR}/storage
BSL
  echo "local-up: control plane ready at https://127.0.0.1:${API_PORT}" >&2
  echo "export KUBECONFIG=${KUBECONFIG_FILE}"
}

stop() { # stop NAME: TERM, then KILL after 10s, only the pid we recorded
  local name=$1 pidfile="$DIR/$1.pid"
  [[ -f "$pidfile" ]] || return 0
  local pid
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
  echo "local-down: stopped $name (pid $pid)" >&2
}

down() {
  stop kube-controller-manager
  stop kube-apiserver
  stop etcd
}

case "${1:-}" in
up) up ;;
down) down ;;
env) echo "export KUBECONFIG=${KUBECONFIG_FILE}" ;;
*)
  echo "usage: $0 up|down|env" >&2
  exit 2
  ;;
esac
