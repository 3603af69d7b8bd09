# Shared by hack/node-up.sh, hack/node-down.sh and hack/node-images.sh (sourced, with ROOT set):
# the one-node cluster's names, addresses and paths, and small helpers.
# Settings: NODE_DIR (bin/node), KUBE_VERSION (1.36.3), KUBEBUILDER_ASSETS (the binaries),
# COREDNS_VERSION (v1.15.0, the cluster's DNS server).

KUBE_VERSION=${KUBE_VERSION:-1.36.3}
COREDNS_VERSION=${COREDNS_VERSION:-v1.15.0}
ASSETS=${KUBEBUILDER_ASSETS:-$ROOT/bin/k8s/${KUBE_VERSION}-linux-amd64}
DIR=${NODE_DIR:-$ROOT/bin/node}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
LOG_DIR=$DIR/logs
# What the scripts changed outside DIR, and how the machine was before (see record_host).
HOST_DIR=$DIR/host
# containerd's state (sockets, the pods' network namespaces, mounted root filesystems).
RUN_DIR=/run/cairn-node
CONTAINERD_SOCK=$RUN_DIR/containerd.sock
KUBECONFIG_FILE=$DIR/kubeconfig
IMAGES_DIR=$ROOT/bin/images

NETNS=cairn-node
NODE_NAME=cairn-node
# The node's own address, on the namespace's lo.
NODE_IP=10.200.0.1
# The Services' cluster IPs, which kube-proxy forwards (on no link): the kubernetes Service's
# (the first of SERVICE_CIDR, to the API server on the node's address) and the cluster DNS's
# (kube-system/kube-dns, CoreDNS's pod), the kubelet's clusterDNS.
SERVICE_CIDR=10.0.0.0/24
SERVICE_IP=10.0.0.1
DNS_IP=10.0.0.10
POD_SUBNET=10.244.0.0/24
# The kubelet's cgroup root, under every cgroup v1 hierarchy.
CGROUP_ROOT=cairn-node
# The cgroup hierarchies mounted on this machine (/sys/fs/cgroup/<name>): v1 ones, and the
# unified (v2) one that runc also writes to when it is mounted beside them.
mapfile -t CGROUP_HIERARCHIES < <(awk '$3 ~ "^cgroup2?$" && $2 ~ "^/sys/fs/cgroup/" { sub("^/sys/fs/cgroup/", "", $2); print $2 }' /proc/self/mounts)
# Local image names: nothing is pulled (imagePullPolicy: IfNotPresent).
PAUSE_IMAGE=${PAUSE_IMAGE:-cairn-pause:dev}
COREDNS_IMAGE=${COREDNS_IMAGE:-cairn-coredns:dev}
MANAGER_IMAGE=${MANAGER_IMAGE:-cairn-manager:dev}
HTTPD_IMAGE=${HTTPD_IMAGE:-cairn-e2e-httpd:dev}
VOLDATA_IMAGE=${VOLDATA_IMAGE:-cairn-e2e-voldata:dev}
# Paths outside DIR that containerd, the CNI plugins, the kubelet or mount(8) create when absent;
# the ones absent before node-up are emptied of what the node left and removed by node-down.
HOST_PATHS=(/run/containerd /var/lib/cni /var/log/containers /var/lib/kubelet /run/netns /run/mount)
# Kernel settings the kubelet changes when it starts; node-down puts back what they were.
KUBELET_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

log() { echo "node: $*" >&2; }

# The node on this machine (there is one namespace and one RUN_DIR) belongs to the state
# directory written in RUN_DIR/owner when node-up created its namespace.
owned() { [[ -f "$RUN_DIR/owner" && $(cat "$RUN_DIR/owner") == "$DIR" ]]; }

# check_owner fails when the node on this machine was started from another state directory,
# such as another work tree's bin/node, or when the namespace exists and no node-up made it.
check_owner() {
  if [[ -f "$RUN_DIR/owner" ]] && ! owned; then
    fail "the node running on this machine is $(cat "$RUN_DIR/owner")'s: stop it with its hack/node-down.sh first"
  fi
  if [[ -e "/run/netns/$NETNS" ]] && ! owned; then
    fail "the network namespace $NETNS exists, but no hack/node-up.sh made it: delete it (ip netns delete $NETNS) once nothing uses it"
  fi
}

fail() {
  echo "node: $*" >&2
  exit 1
}

# in_ns COMMAND...: run COMMAND in the namespace (network only: the mounts stay the machine's,
# which containerd and the kubelet share).
in_ns() { nsenter --net="/run/netns/$NETNS" -- "$@"; }
kc() { in_ns "$ASSETS/kubectl" --kubeconfig "$KUBECONFIG_FILE" "$@"; }
ctr() { command ctr --address "$CONTAINERD_SOCK" --namespace k8s.io "$@"; }

# ours NAME PID: true when PID is a live process running the binary NAME, so that a pid file
# left from before a reboot never names someone else's process.
ours() {
  local exe
  exe=$(readlink "/proc/$2/exe" 2>/dev/null) || return 1
  [[ $(basename "${exe% (deleted)}") == "$1" ]]
}

# running NAME: true when NAME's pid file names a live process of ours.
running() {
  local pidfile="$DIR/$1.pid"
  [[ -f "$pidfile" ]] && ours "$1" "$(cat "$pidfile")"
}

# start NAME COMMAND...: run COMMAND in the namespace in the background, record its pid (nsenter
# execs it, so the pid is the command's), log to logs/NAME.log.
start() {
  local name=$1
  shift
  mkdir -p "$LOG_DIR"
  nohup nsenter --net="/run/netns/$NETNS" -- "$@" >"$LOG_DIR/$name.log" 2>&1 &
  echo $! >"$DIR/$name.pid"
}

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
  local seconds=$1 what=$2 i
  shift 2
  for ((i = 0; i < seconds * 5; i++)); do
    if "$@"; then return 0; fi
    sleep 0.2
  done
  fail "timed out after ${seconds}s waiting for $what; logs are in $LOG_DIR"
}

# check_isolated fails unless the namespace is cut off from the rest of the machine and the
# world: its only links are lo, the pods' bridge cni0 and veths enslaved to it; no route of any
# table, IPv4 or IPv6, is a default route, goes through a gateway or leaves by another link; and
# no link of the machine's own namespace has its peer in it.
check_isolated() {
  [[ -e "/run/netns/$NETNS" ]] || fail "network namespace $NETNS does not exist"
  local line name allowed=" lo cni0 " bad=()
  while read -r line; do
    name=$(echo "$line" | awk -F': ' '{ print $2 }')
    name=${name%%@*}
    case "$name" in
    lo | cni0) ;;
    veth*)
      if [[ $line == *" master cni0 "* ]]; then allowed+="$name "; else bad+=("link $name is not on cni0"); fi
      ;;
    *) bad+=("link $name") ;;
    esac
  done < <(ip -n "$NETNS" -o link show)
  local family dev
  for family in -4 -6; do
    while read -r line; do
      [[ -z $line ]] && continue
      case "$line" in
      default* | *" via "* | *nexthop* | *" nhid "*)
        bad+=("route: $line")
        continue
        ;;
      unreachable* | prohibit* | blackhole* | throw*) continue ;;
      esac
      dev=$(echo "$line" | sed -n 's/.* dev \([^ ]*\).*/\1/p')
      if [[ -z $dev || $allowed != *" $dev "* ]]; then bad+=("route: $line"); fi
    done < <(ip -n "$NETNS" "$family" route show table all)
  done
  # The machine's own namespace is kthreadd's (kernel threads live in the initial one): this may
  # run inside the node's.
  local host_links
  host_links=$(nsenter --net=/proc/2/ns/net ip -o link show) ||
    fail "cannot list the links of the machine's own network namespace"
  if grep -q "link-netns $NETNS" <<<"$host_links"; then
    bad+=("a link of the machine's namespace has its peer in $NETNS")
  fi
  if [[ ${#bad[@]} -gt 0 ]]; then
    echo "node: the namespace $NETNS has a way off the machine:" >&2
    printf '  %s\n' "${bad[@]}" >&2
    fail "refusing to go on"
  fi
}
