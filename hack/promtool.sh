#!/usr/bin/env bash
# Installs promtool (Prometheus's rule checker) into bin/ from Debian's prometheus package,
# without installing the package: the chart's alert rules are tested in Prometheus's own rule
# engine (charts/cairn/dashboard_test.go). Debian's package, because Prometheus's Go module
# cannot be installed with 'go install' (its go.mod has replace directives).
#
#   hack/promtool.sh BIN/promtool-VERSION VERSION
set -euo pipefail
target=$1 version=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
# The package lists may be missing on a fresh machine (CI); updating them needs root.
if ! apt-get download "prometheus=$version" >/dev/null 2>&1; then
  apt-get update -qq >/dev/null
  apt-get download "prometheus=$version" >/dev/null
fi
dpkg-deb -x prometheus_*.deb root
install -m 0755 root/usr/bin/promtool "$target"
"$target" --version >/dev/null
