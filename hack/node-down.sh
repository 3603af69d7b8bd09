#!/usr/bin/env bash
# Stops the one-node cluster of hack/node-up.sh and leaves the machine as node-up found it:
# the pods are stopped through the kubelet (so that containerd tears down their networks and
# mounts; CoreDNS's pod too), then the kubelet, kube-proxy, containerd and the shims it started,
# the control plane, each by the pid recorded at start; then whatever is still mounted under
# bin/node or /run/cairn-node is unmounted, the network namespace (with its bridge and iptables
# rules, kube-proxy's included) deleted, the kubelet's cgroups removed, the kernel settings the
# kubelet changed put back, and the directories node-up found absent removed once empty.
#
# The state under bin/node (etcd data, certificates, containerd's images) is kept, so that the
# next node-up is quick; delete the directory for a fresh start.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/node-lib.sh
source "$ROOT/hack/node-lib.sh"

stop() { # stop NAME: TERM, then KILL after 15s, only the pid we recorded
  local name=$1 pidfile="$DIR/$1.pid" pid i
  [[ -f "$pidfile" ]] || return 0
  pid=$(cat "$pidfile")
  if ours "$name" "$pid"; then
    kill "$pid" 2>/dev/null || true
    for ((i = 0; i < 75; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    log "stopped $name (pid $pid)"
  fi
  rm -f "$pidfile"
}

# stop_pods deletes every pod through the API (the controllers and the scheduler are already
# stopped, so that nothing replaces them) and the kubelet stops each through containerd's CRI,
# which removes the pod's network (veth, address, namespace) and mounts.
stop_pods() {
  running kubelet && running kube-apiserver || return 0
  kc delete pods --all --all-namespaces --grace-period=5 --timeout=90s >/dev/null 2>&1 || true
  local i
  for ((i = 0; i < 150; i++)); do
    [[ -z $(ctr tasks list -q 2>/dev/null) ]] && return 0
    sleep 0.2
  done
  log "containers still run after the pods were deleted; they are killed"
}

# stop_containers kills and deletes any task containerd still runs (none, when the kubelet
# stopped the pods).
stop_containers() {
  running containerd || return 0
  local id
  for id in $(ctr tasks list -q 2>/dev/null); do
    ctr tasks kill --signal SIGKILL "$id" >/dev/null 2>&1 || true
  done
  sleep 1
  for id in $(ctr tasks list -q 2>/dev/null); do
    ctr tasks delete --force "$id" >/dev/null 2>&1 || true
  done
}

# stop_shims stops the runc shims of the node's containerd: those started with its socket as
# their -address (they outlive containerd by design).
stop_shims() {
  local f pid cmdline
  for f in /proc/[0-9]*/cmdline; do
    pid=${f#/proc/}
    pid=${pid%/cmdline}
    cmdline=$(tr '\0' ' ' <"$f" 2>/dev/null) || continue
    if [[ $cmdline == *containerd-shim*" -address $CONTAINERD_SOCK "* ]]; then
      kill -9 "$pid" 2>/dev/null || true
      log "stopped a shim (pid $pid)"
    fi
  done
}

# unmount_under DIR...: unmount everything mounted under the directories, deepest first.
unmount_under() {
  local d m
  for d in "$@"; do
    while read -r m; do
      umount -l "$m" 2>/dev/null || true
    done < <(awk -v d="$d/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
  done
}

# remove_cgroups removes the kubelet's cgroup root and everything under it.
remove_cgroups() {
  local h
  for h in "${CGROUP_HIERARCHIES[@]}"; do
    [[ -d "/sys/fs/cgroup/$h/$CGROUP_ROOT" ]] || continue
    find "/sys/fs/cgroup/$h/$CGROUP_ROOT" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    if [[ -d "/sys/fs/cgroup/$h/$CGROUP_ROOT" ]]; then log "could not remove /sys/fs/cgroup/$h/$CGROUP_ROOT"; fi
  done
}

# restore_host puts back what record_host (node-up) noted.
restore_host() {
  [[ -f "$HOST_DIR/recorded" ]] || return 0
  local line
  while read -r line; do
    if [[ -n $line ]]; then sysctl -qw "$line"; fi
  done <"$HOST_DIR/sysctl"
  # The kubelet's links to the pods' logs, the CNI plugins' cache of this network, and the
  # device-plugin socket and checkpoint the kubelet keeps in /var/lib/kubelet whatever its root.
  if [[ -d /var/log/containers ]]; then
    find /var/log/containers -maxdepth 1 -type l -lname "$DIR/pod-logs/*" -delete
  fi
  if [[ -d /var/lib/cni ]]; then
    find /var/lib/cni -type f -name "$NETNS-*" -delete
  fi
  if grep -qx /var/lib/kubelet "$HOST_DIR/absent"; then
    rm -f /var/lib/kubelet/device-plugins/kubelet.sock /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint
  fi
  if [[ $(cat "$HOST_DIR/netns-mounted") == no ]] && mountpoint -q /run/netns &&
    [[ -z $(ls -A /run/netns) ]]; then
    umount /run/netns
  fi
  local p
  while read -r p; do
    if [[ -d $p ]]; then find "$p" -depth -type d -empty -delete; fi
    if [[ -e $p ]]; then log "left $p: it holds files that are not the node's"; fi
  done <"$HOST_DIR/absent"
  rm -rf "$HOST_DIR"
}

# A node of another state directory is left alone; a namespace no node-up made, too.
if [[ -f "$RUN_DIR/owner" ]] && ! owned; then
  fail "the node running on this machine is $(cat "$RUN_DIR/owner")'s: stop it with its hack/node-down.sh"
fi
stop kube-controller-manager
stop kube-scheduler
stop_pods
stop kubelet
stop kube-proxy
stop_containers
stop containerd
if owned; then stop_shims; fi
stop kube-apiserver
stop etcd
unmount_under "$DIR"
if owned; then
  unmount_under "$RUN_DIR"
  if [[ -e "/run/netns/$NETNS" ]]; then
    ip netns delete "$NETNS"
    log "deleted the network namespace $NETNS"
  fi
  remove_cgroups
  rm -rf "$RUN_DIR"
elif [[ -e "/run/netns/$NETNS" ]]; then
  log "left the network namespace $NETNS: no hack/node-up.sh made it"
fi
restore_host
log "the node is down"
