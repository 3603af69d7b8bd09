#!/usr/bin/env bash
# A real one-node Kubernetes cluster on this machine, for the tests that must run Cairn as a pod:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, a kubelet v1.36.3 with
# containerd and runc, and kube-proxy, all inside the network namespace "cairn-node"; and CoreDNS,
# the cluster's DNS, as a Deployment in kube-system. An ordinary cluster: a pod resolves
# <service>.<namespace>.svc(.cluster.local) and reaches the Service's cluster IP, so a bare
# 'helm install' works as anywhere.
#
#   hack/node-up.sh            start (idempotent: returns at once when the node is Ready)
#   hack/node-up.sh --check    only check that the namespace has no route off the machine
#   hack/node-up.sh --running  exit 0 when the node runs and is Ready, 1 otherwise
#   hack/node-up.sh --prepare  only install the packages and build the binaries the node needs
#                              (what 'make test' does before its suites run side by side)
#   hack/node-down.sh          stop exactly what this started and undo its changes to the machine
#
# Network safety comes first. The namespace has only lo (with the node's address, 10.200.0.1)
# and the pods' bridge cni0 (10.244.0.0/24) with their veths, and no default route: no packet
# can leave the machine. The script refuses to start when the namespace has any route off the
# machine, and iptables in the namespace drops forwarding except between the pods on the bridge.
# Every server listens inside the namespace (the apiserver on 10.200.0.1:443). The Services'
# cluster IPs (10.0.0.0/24: the kubernetes Service 10.0.0.1, the cluster DNS 10.0.0.10) are on
# no link: kube-proxy (iptables mode) rewrites them to their endpoints, which are all on the
# bridge or the node's address. Clients run inside the namespace too:
#   nsenter --net=/run/netns/cairn-node bin/k8s/1.36.3-linux-amd64/kubectl --kubeconfig bin/node/kubeconfig get pods -A
#
# The binaries: etcd, kube-apiserver, kube-controller-manager and kubectl come from
# hack/envtest.sh; kube-scheduler, the kubelet and kube-proxy are built here the same way (one
# throwaway module requiring k8s.io/kubernetes with every staging module replaced by its
# published tag), into the same cached directory. containerd, runc, the CNI plugins and iptables
# come from Debian when missing. No image can be pulled: the sandbox ("pause") image and
# CoreDNS's (its binary built from github.com/coredns/coredns v1.15.0 into bin/) are built
# locally (hack/node-images.sh), and whatever image tarballs are in bin/images/ are imported.
#
# Facts of these machines the configuration answers: cgroup v1 only (failCgroupV1: false,
# cgroupDriver: cgroupfs), failSwapOn: false, root without
# CAP_SYS_RESOURCE (containerd's restrict_oom_score_adj = true, or every sandbox fails with
# "can't get final child's PID from pipe"), Debian's containerd 1.6 (the kubelet falls back
# from the RuntimeConfig call), and a node is Ready only with a CNI config (bridge + host-local).
#
# State lives under NODE_DIR (bin/node): certificates, tokens, etcd data, containerd's content
# and snapshots, the kubelet's root, logs and pid files, and the admin kubeconfig
# (bin/node/kubeconfig). What the script changes outside it is recorded in bin/node/host/ so
# that hack/node-down.sh undoes exactly that.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/node-lib.sh
source "$ROOT/hack/node-lib.sh"

# ensure_packages installs the Debian packages the node needs, when a command is missing.
ensure_packages() {
  local missing=()
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  [[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] ||
    missing+=(containernetworking-plugins)
  command -v iptables >/dev/null || missing+=(iptables)
  command -v nsenter >/dev/null || missing+=(util-linux)
  command -v openssl >/dev/null || missing+=(openssl)
  [[ ${#missing[@]} -eq 0 ]] && return 0
  log "installing ${missing[*]} from Debian"
  apt-get update -qq
  # The containerd service the package would start is not wanted: the node runs its own, in
  # its namespace. policy-rc.d answering 101 forbids starting services during the install.
  local policy=""
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
  fi
  local rc=0
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || rc=$?
  if [[ -n $policy ]]; then rm -f "$policy"; fi
  return "$rc"
}

# ensure_binaries builds what is missing: the envtest four with hack/envtest.sh, kube-scheduler,
# the kubelet and kube-proxy here, with the same recipe (so all come from the one
# k8s.io/kubernetes version), and CoreDNS with hack/node-images.sh.
ensure_binaries() {
  local b need_envtest=false
  for b in etcd kube-apiserver kube-controller-manager kubectl; do
    [[ -x "$ASSETS/$b" ]] || need_envtest=true
  done
  if $need_envtest; then "$ROOT/hack/envtest.sh"; fi
  local missing=()
  for b in kube-scheduler kubelet kube-proxy; do
    [[ -x "$ASSETS/$b" ]] || missing+=("$b")
  done
  "$ROOT/hack/node-images.sh" coredns
  [[ ${#missing[@]} -eq 0 ]] && return 0
  log "building ${missing[*]} v${KUBE_VERSION} (a few minutes on a cold cache)"
  local mod="$ROOT/bin/.build/node-kubernetes-${KUBE_VERSION}"
  rm -rf "$mod"
  mkdir -p "$mod" "$ASSETS"
  export GOFLAGS=-mod=mod CGO_ENABLED=0
  local kgomod staging_version="v0${KUBE_VERSION#1}"
  kgomod=$(cd "$mod" && go mod download -json "k8s.io/kubernetes@v${KUBE_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  {
    echo "module cairn.dev/node-kubernetes"
    echo
    echo "go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/')"
    echo
    echo "require k8s.io/kubernetes v${KUBE_VERSION}"
    echo
    grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$kgomod" |
      awk -v v="$staging_version" '{ printf "replace %s => %s %s\n", $1, $1, v }'
  } >"$mod/go.mod"
  cat >"$mod/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
  (cd "$mod" && go mod tidy -e >/dev/null 2>&1 || true)
  (cd "$mod" && go get "k8s.io/kubernetes@v${KUBE_VERSION}" >/dev/null 2>&1 || true)
  local minor ldflags="-s -w" pkg
  minor=$(echo "$KUBE_VERSION" | cut -d. -f2)
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=v${KUBE_VERSION} -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor}"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  for b in "${missing[@]}"; do
    # Built next to the target and renamed, so that a stopped build leaves no half binary.
    (cd "$mod" && go build -trimpath -ldflags "$ldflags" -o "$ASSETS/.$b.tmp" "k8s.io/kubernetes/cmd/$b")
    mv "$ASSETS/.$b.tmp" "$ASSETS/$b"
  done
}

# record_host notes, once, how the machine was before the node changed it: which of the paths
# that containerd, the CNI plugins and the kubelet create outside bin/node were absent, whether
# /run/netns was a mount point, and the kernel settings the kubelet sets.
record_host() {
  [[ -f "$HOST_DIR/recorded" ]] && return 0
  mkdir -p "$HOST_DIR"
  : >"$HOST_DIR/absent"
  local p
  for p in "${HOST_PATHS[@]}"; do
    [[ -e "$p" ]] || echo "$p" >>"$HOST_DIR/absent"
  done
  if mountpoint -q /run/netns 2>/dev/null; then echo yes; else echo no; fi >"$HOST_DIR/netns-mounted"
  : >"$HOST_DIR/sysctl"
  for p in "${KUBELET_SYSCTLS[@]}"; do
    echo "$p=$(sysctl -n "$p")" >>"$HOST_DIR/sysctl"
  done
  touch "$HOST_DIR/recorded"
}

# setup_namespace creates the network namespace with lo and the node's address, and the
# forwarding rules.
setup_namespace() {
  if [[ ! -e "/run/netns/$NETNS" ]]; then
    mkdir -p "$RUN_DIR"
    echo "$DIR" >"$RUN_DIR/owner"
    ip netns add "$NETNS"
  fi
  ip -n "$NETNS" link set lo up
  ip -n "$NETNS" -o addr show dev lo | grep -q " $NODE_IP/32 " || ip -n "$NETNS" addr add "$NODE_IP/32" dev lo
  # Forwarding is dropped, except between pods on the bridge (bridged frames pass through
  # iptables when br_netfilter is loaded). There is no route to forward to anyway. It is on for
  # that: a pod's packet to a cluster IP goes to cni0's address, kube-proxy's rule sends it to
  # the endpoint, back out on cni0.
  in_ns sysctl -qw net.ipv4.ip_forward=1
  in_ns iptables -w -P FORWARD DROP
  in_ns iptables -w -C FORWARD -i cni0 -o cni0 -j ACCEPT 2>/dev/null ||
    in_ns iptables -w -A FORWARD -i cni0 -o cni0 -j ACCEPT
}

# setup_certs makes the cluster's CA, the apiserver's serving certificate (for the service
# address, the node address and 127.0.0.1), the apiserver's client certificate for kubelets,
# the service-account key pair, and one static token for each client.
setup_certs() {
  local c="$DIR/pki"
  mkdir -p "$c"
  if [[ ! -f "$c/ca.crt" ]]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=cairn-node-ca" \
      -keyout "$c/ca.key" -out "$c/ca.crt" 2>/dev/null
  fi
  if [[ ! -f "$c/apiserver.crt" ]]; then
    openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
      -keyout "$c/apiserver.key" -out "$c/apiserver.csr" 2>/dev/null
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' \
      "IP:${SERVICE_IP},IP:${NODE_IP},IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost" \
      >"$c/apiserver.ext"
    openssl x509 -req -in "$c/apiserver.csr" -CA "$c/ca.crt" -CAkey "$c/ca.key" -CAcreateserial \
      -days 3650 -extfile "$c/apiserver.ext" -out "$c/apiserver.crt" 2>/dev/null
  fi
  if [[ ! -f "$c/apiserver-kubelet-client.crt" ]]; then
    openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" \
      -keyout "$c/apiserver-kubelet-client.key" -out "$c/apiserver-kubelet-client.csr" 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\n' >"$c/client.ext"
    openssl x509 -req -in "$c/apiserver-kubelet-client.csr" -CA "$c/ca.crt" -CAkey "$c/ca.key" \
      -CAcreateserial -days 3650 -extfile "$c/client.ext" -out "$c/apiserver-kubelet-client.crt" 2>/dev/null
  fi
  if [[ ! -f "$c/sa.key" ]]; then
    openssl genrsa -out "$c/sa.key" 2048 2>/dev/null
    openssl rsa -in "$c/sa.key" -pubout -out "$c/sa.pub" 2>/dev/null
  fi
  if [[ ! -f "$c/tokens.csv" ]]; then
    {
      echo "$(openssl rand -hex 24),cairn-admin,cairn-admin,system:masters"
      echo "$(openssl rand -hex 24),system:node:${NODE_NAME},system:node:${NODE_NAME},system:nodes"
      echo "$(openssl rand -hex 24),system:kube-controller-manager,system:kube-controller-manager,system:masters"
      echo "$(openssl rand -hex 24),system:kube-scheduler,system:kube-scheduler,system:masters"
    } >"$c/tokens.csv"
    chmod 600 "$c/tokens.csv"
  fi
  # kube-proxy's user, which the default binding system:node-proxier authorizes (added to the
  # tokens of a node made before kube-proxy ran).
  if ! grep -q ',system:kube-proxy,' "$c/tokens.csv"; then
    echo "$(openssl rand -hex 24),system:kube-proxy,system:kube-proxy" >>"$c/tokens.csv"
  fi
  write_kubeconfig "$KUBECONFIG_FILE" cairn-admin
  write_kubeconfig "$DIR/kubelet.kubeconfig" "system:node:${NODE_NAME}"
  write_kubeconfig "$DIR/controller-manager.kubeconfig" system:kube-controller-manager
  write_kubeconfig "$DIR/scheduler.kubeconfig" system:kube-scheduler
  write_kubeconfig "$DIR/kube-proxy.kubeconfig" system:kube-proxy
}

# write_kubeconfig FILE USER: a kubeconfig for USER's static token, to the API server on the
# node's address (not the kubernetes Service's: kube-proxy itself needs the API first).
write_kubeconfig() {
  local file=$1 user=$2 token
  token=$(awk -F, -v u="$user" '$2 == u { print $1 }' "$DIR/pki/tokens.csv")
  cat >"$file" <<KC
apiVersion: v1
kind: Config
clusters:
- name: cairn-node
  cluster:
    server: https://${NODE_IP}:443
    certificate-authority: ${DIR}/pki/ca.crt
users:
- name: ${user}
  user:
    token: ${token}
contexts:
- name: cairn-node
  context:
    cluster: cairn-node
    user: ${user}
current-context: cairn-node
KC
  chmod 600 "$file"
}

# write_configs writes containerd's, the CNI's, the kubelet's and kube-proxy's configuration, and
# the cluster DNS's manifests. Every path
# containerd and the kubelet would otherwise take on the machine (/var/lib/containerd,
# /run/containerd/runc, /var/lib/cni/networks, /var/log/pods, /var/lib/kubelet, ...) is moved
# under bin/node or RUN_DIR.
write_configs() {
  mkdir -p "$DIR/containerd" "$DIR/cni/net.d" "$DIR/kubelet" "$DIR/pod-logs" "$RUN_DIR"
  cat >"$DIR/containerd/config.toml" <<TOML
version = 2
root = "${DIR}/containerd/root"
state = "${RUN_DIR}/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = "${CONTAINERD_SOCK}"

[ttrpc]
  address = "${RUN_DIR}/containerd.ttrpc.sock"

[debug]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "${DIR}/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "${PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "${RUN_DIR}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "${DIR}/cni/net.d"
TOML
  cat >"$DIR/cni/net.d/10-cairn-node.conflist" <<JSON
{
  "cniVersion": "0.4.0",
  "name": "cairn-node",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "${DIR}/cni/ipam",
        "ranges": [[{ "subnet": "${POD_SUBNET}" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    }
  ]
}
JSON
  # The resolv.conf the kubelet takes pods' search domains from: none, nothing is asked outside.
  echo "options ndots:1" >"$DIR/resolv.conf"
  cat >"$DIR/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: ${NODE_IP}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: ${DIR}/pki/ca.crt
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://${CONTAINERD_SOCK}
cgroupDriver: cgroupfs
cgroupRoot: /${CGROUP_ROOT}
failCgroupV1: false
failSwapOn: false
podLogsDir: ${DIR}/pod-logs
volumePluginDir: ${DIR}/kubelet/volume-plugins
resolvConf: ${DIR}/resolv.conf
clusterDomain: cluster.local
# Pods ask CoreDNS for names (ClusterFirst), at the kube-dns Service's cluster IP.
clusterDNS: [${DNS_IP}]
# Room for the suite's specs and the hook measure's 50 pods (test/e2e/node/hooks_test.go), beside
# the manager, the node agent and whatever a failed spec left.
maxPods: 80
# The images cannot be pulled again: never garbage-collect them, never evict for disk.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
  nodefs.inodesFree: 1%
YAML
  # iptables mode, the namespace's own iptables (Debian's, nft backend) beside the FORWARD rules
  # above. kube-proxy changes no setting of the machine's: conntrack's limits and timeouts are
  # left as they are (0), as is its OOM score (root here cannot lower it); its health and
  # metrics ports are the namespace's 127.0.0.1.
  cat >"$DIR/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: ${DIR}/kube-proxy.kubeconfig
hostnameOverride: ${NODE_NAME}
bindAddress: ${NODE_IP}
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
mode: iptables
clusterCIDR: ${POD_SUBNET}
detectLocalMode: ClusterCIDR
nodePortAddresses: ["${NODE_IP}/32"]
oomScoreAdj: 0
iptables:
  localhostNodePorts: false
  minSyncPeriod: 1s
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
YAML
  write_dns_manifests
}

# write_dns_manifests writes the cluster DNS as a cluster's add-on is: CoreDNS's Deployment in
# kube-system (the image hack/node-images.sh builds, non-root, read-only root), its
# ServiceAccount and read-only role, its Corefile, and the Service kube-dns on DNS_IP. The
# kubernetes plugin serves cluster.local (and the reverse zones) from the Services, EndpointSlices
# and Pods it watches; there is nothing to forward other names to (no route off the machine), so
# CoreDNS answers them SERVFAIL. It listens on 1053 (a non-root user binds no port under 1024),
# which the Service's port 53 targets; every query is logged (logs of kube-system's coredns pod).
write_dns_manifests() {
  cat >"$DIR/coredns.yaml" <<YAML
apiVersion: v1
kind: ServiceAccount
metadata:
  name: coredns
  namespace: kube-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:coredns
rules:
  - apiGroups: [""]
    resources: [endpoints, services, pods, namespaces]
    verbs: [list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:coredns
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:coredns
subjects:
  - kind: ServiceAccount
    name: coredns
    namespace: kube-system
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: coredns
  namespace: kube-system
data:
  Corefile: |
    .:1053 {
        errors
        log
        health :8080
        ready :8181
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
            ttl 5
        }
        cache 5
        reload
        loadbalance
    }
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
  labels:
    k8s-app: kube-dns
spec:
  replicas: 1
  selector:
    matchLabels:
      k8s-app: kube-dns
  template:
    metadata:
      labels:
        k8s-app: kube-dns
    spec:
      serviceAccountName: coredns
      priorityClassName: system-cluster-critical
      # Not itself: the node's resolv.conf, which names no server.
      dnsPolicy: Default
      terminationGracePeriodSeconds: 5
      securityContext:
        runAsNonRoot: true
      containers:
        - name: coredns
          image: ${COREDNS_IMAGE}
          imagePullPolicy: IfNotPresent
          args: ["-conf", "/etc/coredns/Corefile"]
          ports:
            - name: dns
              containerPort: 1053
              protocol: UDP
            - name: dns-tcp
              containerPort: 1053
              protocol: TCP
          livenessProbe:
            httpGet:
              path: /health
              port: 8080
            initialDelaySeconds: 10
            periodSeconds: 10
          readinessProbe:
            httpGet:
              path: /ready
              port: 8181
            periodSeconds: 2
          resources:
            limits:
              memory: 170Mi
            requests:
              cpu: 50m
              memory: 30Mi
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: ["ALL"]
          volumeMounts:
            - name: config
              mountPath: /etc/coredns
              readOnly: true
      volumes:
        - name: config
          configMap:
            name: coredns
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels:
    k8s-app: kube-dns
spec:
  selector:
    k8s-app: kube-dns
  clusterIP: ${DNS_IP}
  ports:
    - name: dns
      port: 53
      targetPort: dns
      protocol: UDP
    - name: dns-tcp
      port: 53
      targetPort: dns-tcp
      protocol: TCP
YAML
}

# setup_cgroups creates the kubelet's cgroup root in every cgroup v1 hierarchy (the kubelet
# requires it to exist); hack/node-down.sh removes it with everything under it.
setup_cgroups() {
  local h
  for h in "${CGROUP_HIERARCHIES[@]}"; do
    [[ -d "/sys/fs/cgroup/$h/$CGROUP_ROOT" ]] && continue
    mkdir "/sys/fs/cgroup/$h/$CGROUP_ROOT"
    if [[ $h == cpuset ]]; then
      cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset/$CGROUP_ROOT/cpuset.cpus"
      cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset/$CGROUP_ROOT/cpuset.mems"
    fi
  done
}

api_ready() { kc get --raw /readyz >/dev/null 2>&1; }
node_ready() {
  [[ $(kc get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}
containerd_ready() { ctr version >/dev/null 2>&1; }
# kube-proxy has written the kubernetes Service's rule.
proxy_ready() { in_ns iptables -w -t nat -S KUBE-SERVICES 2>/dev/null | grep -q 'default/kubernetes:https'; }
dns_ready() {
  [[ $(kc get deployment coredns -n kube-system -o 'jsonpath={.status.conditions[?(@.type=="Available")].status}' 2>/dev/null) == True ]]
}

# node_running: every process of the node runs, the node is Ready and so is the cluster DNS.
node_running() {
  local name
  for name in etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy; do
    running "$name" || return 1
  done
  node_ready && dns_ready
}

up() {
  check_owner
  if node_running; then
    check_isolated
    log "node ${NODE_NAME} is already Ready"
    return 0
  fi
  if [[ "$(stat -fc %T /sys/fs/cgroup)" != tmpfs ]]; then
    fail "this script knows cgroup v1 machines only (/sys/fs/cgroup is $(stat -fc %T /sys/fs/cgroup))"
  fi
  ensure_packages
  ensure_binaries
  mkdir -p "$DIR" "$LOG_DIR"
  record_host
  setup_namespace
  check_isolated
  setup_certs
  write_configs
  setup_cgroups
  "$ROOT/hack/node-images.sh" pause coredns

  if ! running etcd; then
    mkdir -p "$DIR/etcd"
    start etcd "$ASSETS/etcd" --name "$NODE_NAME" --data-dir "$DIR/etcd" \
      --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
      --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
      --initial-cluster "${NODE_NAME}=http://127.0.0.1:2380" --listen-metrics-urls http://127.0.0.1:2381 \
      --unsafe-no-fsync
  fi
  if ! running kube-apiserver; then
    start kube-apiserver "$ASSETS/kube-apiserver" \
      --bind-address 0.0.0.0 --secure-port 443 --advertise-address "$NODE_IP" \
      --etcd-servers http://127.0.0.1:2379 \
      --tls-cert-file "$DIR/pki/apiserver.crt" --tls-private-key-file "$DIR/pki/apiserver.key" \
      --client-ca-file "$DIR/pki/ca.crt" \
      --token-auth-file "$DIR/pki/tokens.csv" \
      --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
      --service-cluster-ip-range "$SERVICE_CIDR" \
      --service-account-issuer https://kubernetes.default.svc.cluster.local \
      --service-account-key-file "$DIR/pki/sa.pub" \
      --service-account-signing-key-file "$DIR/pki/sa.key" \
      --kubelet-client-certificate "$DIR/pki/apiserver-kubelet-client.crt" \
      --kubelet-client-key "$DIR/pki/apiserver-kubelet-client.key" \
      --kubelet-preferred-address-types InternalIP \
      --allow-privileged=true
  fi
  wait_for 120 "the API server to answer" api_ready
  if ! running kube-controller-manager; then
    start kube-controller-manager "$ASSETS/kube-controller-manager" \
      --kubeconfig "$DIR/controller-manager.kubeconfig" \
      --bind-address 127.0.0.1 --secure-port 10257 --cert-dir "$DIR/controller-manager-certs" \
      --leader-elect=false --use-service-account-credentials=false \
      --service-account-private-key-file "$DIR/pki/sa.key" --root-ca-file "$DIR/pki/ca.crt" \
      --allocate-node-cidrs=false --cluster-name "$NODE_NAME" \
      --flex-volume-plugin-dir "$DIR/controller-manager/volume-plugins"
  fi
  if ! running kube-scheduler; then
    start kube-scheduler "$ASSETS/kube-scheduler" \
      --kubeconfig "$DIR/scheduler.kubeconfig" \
      --bind-address 127.0.0.1 --secure-port 10259 --cert-dir "$DIR/scheduler-certs" \
      --leader-elect=false
  fi
  if ! running containerd; then
    start containerd containerd --config "$DIR/containerd/config.toml"
  fi
  wait_for 60 "containerd to answer" containerd_ready
  "$ROOT/hack/node-images.sh" import
  if ! running kubelet; then
    start kubelet "$ASSETS/kubelet" --config "$DIR/kubelet.yaml" \
      --kubeconfig "$DIR/kubelet.kubeconfig" --hostname-override "$NODE_NAME" \
      --node-ip "$NODE_IP" --root-dir "$DIR/kubelet" --cert-dir "$DIR/kubelet/pki"
  fi
  if ! running kube-proxy; then
    start kube-proxy "$ASSETS/kube-proxy" --config "$DIR/kube-proxy.yaml"
  fi
  wait_for 120 "the node to be Ready" node_ready
  wait_for 60 "kube-proxy to forward the kubernetes Service" proxy_ready
  kc apply -f "$DIR/coredns.yaml" >/dev/null
  wait_for 120 "CoreDNS to be Ready (kube-system/coredns)" dns_ready
  check_isolated
  log "node ${NODE_NAME} is Ready; kubectl runs inside the namespace:"
  log "nsenter --net=/run/netns/${NETNS} ${ASSETS}/kubectl --kubeconfig ${KUBECONFIG_FILE} get pods -A"
}

case "${1:-}" in
"") up ;;
--check) check_isolated ;;
--running) node_running ;;
--prepare)
  ensure_packages
  ensure_binaries
  ;;
*)
  echo "usage: $0 [--check|--running|--prepare]" >&2
  exit 2
  ;;
esac
