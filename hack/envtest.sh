#!/usr/bin/env bash
# Builds the envtest control-plane binaries (kube-apiserver, kube-controller-manager, etcd,
# kubectl) from the Go module proxy, because envtest's usual binary download is not reachable on
# our machines.
#
#   hack/envtest.sh            build into bin/k8s/<version>-linux-amd64 unless already there
#   hack/envtest.sh --print    print the directory (for KUBEBUILDER_ASSETS)
#
# kube-apiserver, kube-controller-manager and kubectl come from k8s.io/kubernetes at KUBE_VERSION,
# built in a throwaway module that replaces every k8s.io staging module with its published v0.x
# tag (kubernetes' own go.mod points them at ./staging, which a module download does not
# contain). Only the missing ones are built, so a machine that has some cached builds the rest.
# envtest itself never runs kube-controller-manager; internal/testenv and hack/local-up.sh start
# it so that namespaces are finalized and owner references garbage-collected as in a cluster.
# etcd comes from a tiny main that calls etcdmain.Main.
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-1.36.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
GOOS_ARCH="$(go env GOOS)-$(go env GOARCH)"
DEST="$ROOT/bin/k8s/${KUBE_VERSION}-${GOOS_ARCH}"

if [[ "${1:-}" == "--print" ]]; then
  echo "$DEST"
  exit 0
fi

have() { [[ -x "$DEST/$1" ]]; }
KUBE_BINARIES=(kube-apiserver kube-controller-manager kubectl)
missing=()
for b in "${KUBE_BINARIES[@]}"; do
  have "$b" || missing+=("$b")
done
if [[ ${#missing[@]} -eq 0 ]] && have etcd; then
  exit 0
fi

mkdir -p "$DEST"
WORK="$ROOT/bin/.build"
mkdir -p "$WORK"
export GOFLAGS=-mod=mod
export CGO_ENABLED=0

if [[ ${#missing[@]} -gt 0 ]]; then
  echo "envtest: building ${missing[*]} v${KUBE_VERSION} (several minutes on a cold cache)" >&2
  mod="$WORK/kubernetes-${KUBE_VERSION}"
  rm -rf "$mod"
  mkdir -p "$mod"
  kgomod=$(cd "$mod" && go mod download -json "k8s.io/kubernetes@v${KUBE_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  staging_version="v0${KUBE_VERSION#1}"
  {
    echo "module cairn.dev/envtest-kubernetes"
    echo
    echo "go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/')"
    echo
    echo "require k8s.io/kubernetes v${KUBE_VERSION}"
    echo
    # Every "k8s.io/<staging> => ./staging/src/k8s.io/<staging>" line becomes a replace to the tag.
    grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$kgomod" |
      awk -v v="$staging_version" '{ printf "replace %s => %s %s\n", $1, $1, v }'
  } >"$mod/go.mod"
  cat >"$mod/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubectl/pkg/cmd"
)
GO
  (cd "$mod" && go mod tidy -e >/dev/null 2>&1 || true)
  (cd "$mod" && go get "k8s.io/kubernetes@v${KUBE_VERSION}" >/dev/null 2>&1 || true)
  # Stamp the version, as the release build does: the apiserver derives its compatibility
  # version from it, and kubectl prints it.
  minor=$(echo "$KUBE_VERSION" | cut -d. -f2)
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=v${KUBE_VERSION} -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor}"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  for b in "${missing[@]}"; do
    (cd "$mod" && go build -trimpath -ldflags "$ldflags" -o "$DEST/$b" "k8s.io/kubernetes/cmd/$b")
  done
fi

if ! have etcd; then
  echo "envtest: building etcd ${ETCD_VERSION}" >&2
  mod="$WORK/etcd-${ETCD_VERSION}"
  rm -rf "$mod"
  mkdir -p "$mod"
  cat >"$mod/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  (cd "$mod" && go mod init cairn.dev/envtest-etcd >/dev/null 2>&1 &&
    go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" >/dev/null 2>&1 &&
    go mod tidy >/dev/null 2>&1 &&
    go build -trimpath -ldflags "-s -w" -o "$DEST/etcd" .)
fi

echo "envtest: binaries ready in $DEST" >&2
