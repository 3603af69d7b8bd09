# Sourced by hack/velero-fixtures.sh and hack/velero-volume-fixtures.sh: the Velero they run,
# and how they build it.

VELERO_VERSION=v1.18.1
AWS_PLUGIN_VERSION=v1.14.3
# The proxy refuses some k8s.io modules at v0.33.11, the version Velero v1.18.1 requires
# (k8s.io/kube-aggregator and k8s.io/cli-runtime: "This module version is not available");
# both builds take every k8s.io module at v0.33.13, the nearest patch release it serves.
K8S_REPLACE_VERSION=v0.33.13
K8S_MODULES="api apimachinery client-go apiextensions-apiserver cli-runtime metrics kube-aggregator"

# velero_build MODULE VERSION PACKAGE OUTPUT: copy the module out of the module cache into
# $WORK/src and build it there, so that its own replace directives apply; static, so that the
# same binary runs on the machine and in an image of its own.
velero_build() {
  local module=$1 version=$2 pkg=$3 out=$4 dir src
  [[ -x "$out" ]] && return 0
  dir=$(go mod download -json "$module@$version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  src=$WORK/src/$(basename "$out")
  rm -rf "$src"
  mkdir -p "$WORK/src"
  cp -r "$dir" "$src"
  chmod -R u+w "$src"
  (
    cd "$src"
    for m in $K8S_MODULES; do go mod edit -replace "k8s.io/$m=k8s.io/$m@$K8S_REPLACE_VERSION"; done
    CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -o "$out" "$pkg"
  )
}

# velero_wait_location NAME: wait up to two minutes for Velero's location "default" to be
# Available (the caller's kc runs kubectl), else fail pointing at Velero's log.
velero_wait_location() {
  local name=$1
  for _ in $(seq 120); do
    [[ $(kc get backupstoragelocations.velero.io default -n velero -o jsonpath='{.status.phase}' 2>/dev/null) == Available ]] && return 0
    sleep 1
  done
  echo "$name: Velero's location did not become Available; see $WORK/velero-server.log" >&2
  exit 1
}
