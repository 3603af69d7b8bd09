#!/usr/bin/env bash
# The failures of a test run, short, for the end of its output: CI shows only the last lines of
# a run, where Ginkgo's summary names a failed spec but not why it failed.
#
#   hack/test-digest.sh LOG...
#
# Prints, for every LOG (a 'go test' output, Ginkgo's included), each Ginkgo [FAILED] message
# up to its "In [It] at:" line and each '--- FAIL:' line with the test's lines after it; at most
# 40 lines a failure. Prints nothing for a log without failures.
set -euo pipefail

for log in "$@"; do
  [[ -f "$log" ]] || continue
  # Without colour codes, which Ginkgo writes even into a pipe when asked to.
  digest=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | awk '
    /^[[:space:]]*\[FAILED\] / && !/\[FAILED\] in \[/ && !ginkgo { ginkgo = 1; n = 0 }
    /^--- FAIL:/ { gotest = 1; n = 0 }
    ginkgo {
      if (n++ < 40) print
      if ($0 ~ /In \[[A-Za-z]+\] at:/) { ginkgo = 0; print "" }
      next
    }
    gotest {
      if ($0 ~ /^(=== |--- PASS|PASS$|FAIL$|ok |FAIL\t)/ && n > 0) { gotest = 0; print ""; next }
      if (n++ < 40) print
    }
  ')
  if [[ -n "$digest" ]]; then
    echo "=== Failures in $log"
    echo "$digest"
  fi
done
