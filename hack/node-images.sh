#!/usr/bin/env bash
# The images of the one-node cluster (hack/node-up.sh), built without Docker: each is one static
# binary in a single layer on an empty base (hack/image, go-containerregistry), written as a
# tarball under bin/images/ and imported into the node's containerd, which can pull nothing.
#
#   hack/node-images.sh pause    the sandbox image (bin/images/pause.tar), built when missing
#   hack/node-images.sh coredns  the cluster's DNS server (bin/images/coredns.tar), built when
#                                missing, from CoreDNS COREDNS_VERSION (v1.15.0) built here once,
#                                statically, into bin/coredns-<version>
#   hack/node-images.sh build    the manager (from bin/manager: run 'make build' first), the e2e
#                                suite's static HTTP server and volume-data app, and the sandbox
#                                image
#   hack/node-images.sh import   import every bin/images/*.tar into the node's containerd, when
#                                it runs (node-up imports them when it starts containerd)
#
# Several steps may be given: 'hack/node-images.sh build import' is 'make image'.
# Names: PAUSE_IMAGE (cairn-pause:dev), COREDNS_IMAGE (cairn-coredns:dev), MANAGER_IMAGE
# (cairn-manager:dev), HTTPD_IMAGE (cairn-e2e-httpd:dev), VOLDATA_IMAGE (cairn-e2e-voldata:dev);
# they run as uid 65532 (the pause image as 65535), like the Dockerfile's.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/node-lib.sh
source "$ROOT/hack/node-lib.sh"

TOOLS=$IMAGES_DIR/bin

# build_tool NAME: build hack/image's command NAME (. for the image builder itself) statically.
build_tool() {
  mkdir -p "$TOOLS"
  local out=$TOOLS/${2:-$1}
  (cd "$ROOT/hack/image" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out" "./$1")
}

# image BINARY NAME USER TARBALL [FLAG...]: the one-binary image NAME of BINARY, as /<its name>
# unless a flag says -path.
image() {
  "$TOOLS/image-builder" -binary "$1" -name "$2" -user "$3" -out "$4" "${@:5}"
}

pause() {
  [[ -f "$IMAGES_DIR/pause.tar" ]] && return 0
  build_tool . image-builder
  build_tool pause
  image "$TOOLS/pause" "$PAUSE_IMAGE" 65535:65535 "$IMAGES_DIR/pause.tar"
}

# coredns_binary builds CoreDNS COREDNS_VERSION into bin/coredns-<version> unless it is there:
# from the module github.com/coredns/coredns at that version, in a throwaway module whose main
# is CoreDNS's own (coremain.Run) with only the plugins the node's Corefile uses linked in
# (hack/node-up.sh), not the cloud DNS providers' (route53, azure, clouddns), whose SDKs would
# only lengthen the build; static (CGO_ENABLED=0), as every image of the node.
coredns_binary() {
  local out=$ROOT/bin/coredns-$COREDNS_VERSION
  [[ -x $out ]] && return 0
  log "building CoreDNS $COREDNS_VERSION (a few minutes on a cold cache)"
  local mod=$ROOT/bin/.build/coredns-$COREDNS_VERSION plugin imports=""
  rm -rf "$mod"
  mkdir -p "$mod"
  for plugin in cache errors health kubernetes loadbalance log ready reload; do
    imports+=$'\t_ "github.com/coredns/coredns/plugin/'"$plugin"$'"\n'
  done
  cat >"$mod/main.go" <<GO
// Command coredns is CoreDNS with the plugins of the one-node cluster's Corefile.
package main

import (
	"github.com/coredns/coredns/coremain"
${imports})

// The plugins register themselves when imported; their order in a server block is CoreDNS's
// own (core/dnsserver's Directives), whatever the Corefile's.

func main() { coremain.Run() }
GO
  (cd "$mod" && go mod init cairn.dev/node-coredns >/dev/null 2>&1 &&
    GOFLAGS=-mod=mod go get "github.com/coredns/coredns@$COREDNS_VERSION" >/dev/null 2>&1 &&
    GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 &&
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$COREDNS_VERSION" -o "$out.tmp" .)
  mv "$out.tmp" "$out"
}

coredns() {
  coredns_binary
  [[ -f "$IMAGES_DIR/coredns.tar" && "$IMAGES_DIR/coredns.tar" -nt "$ROOT/bin/coredns-$COREDNS_VERSION" ]] && return 0
  build_tool . image-builder
  image "$ROOT/bin/coredns-$COREDNS_VERSION" "$COREDNS_IMAGE" 65532:65532 "$IMAGES_DIR/coredns.tar" -path /coredns
}

build() {
  [[ -x "$ROOT/bin/manager" ]] || fail "bin/manager is missing: run 'make build' first"
  build_tool . image-builder
  build_tool pause
  build_tool httpd
  build_tool voldata
  image "$TOOLS/pause" "$PAUSE_IMAGE" 65535:65535 "$IMAGES_DIR/pause.tar"
  image "$TOOLS/httpd" "$HTTPD_IMAGE" 65532:65532 "$IMAGES_DIR/httpd.tar"
  image "$TOOLS/voldata" "$VOLDATA_IMAGE" 65532:65532 "$IMAGES_DIR/voldata.tar"
  image "$ROOT/bin/manager" "$MANAGER_IMAGE" 65532:65532 "$IMAGES_DIR/manager.tar"
  coredns
  log "images built in $IMAGES_DIR"
}

import() {
  if ! ctr version >/dev/null 2>&1; then
    log "the node's containerd is not running: the images are imported by 'make node-up'"
    return 0
  fi
  local t
  for t in "$IMAGES_DIR"/*.tar; do
    [[ -f $t ]] || continue
    ctr images import "$t" >/dev/null
    log "imported $(basename "$t")"
  done
}

[[ $# -gt 0 ]] || set -- build import
for step in "$@"; do
  case "$step" in
  pause | coredns | build | import) "$step" ;;
  *)
    echo "usage: $0 [pause|coredns|build|import]..." >&2
    exit 2
    ;;
  esac
done
