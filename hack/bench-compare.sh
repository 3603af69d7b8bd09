#!/usr/bin/env bash
# Compares each benchmark row's figure in docs/bench/*.txt with the one last accepted
# (docs/bench/accepted.txt) and prints a markdown table: the figure now, the accepted one, the
# change, and "**moved**" when it changed by more than 25% either way. 'make bench' runs it
# (hack/bench.sh) and puts the table in docs/benchmarks.md; run it alone to compare again.
#
#   hack/bench-compare.sh                 the table
#   hack/bench-compare.sh --accept ROW... make ROW's figure now the accepted one (ROW is the
#                                         first column of docs/bench/accepted.txt; "all" is
#                                         every row that has a figure now)
#
# Accepting is on purpose: see docs/benchmarks.md, "Accepted figures".
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
ACCEPTED=docs/bench/accepted.txt
# MOVED is how far a figure may move from the accepted one, either way, before it is flagged.
MOVED=${MOVED:-0.25}

# figure FILE BENCH UNIT: the value a benchmark reported for a unit ("" when none).
figure() {
  [[ -f "docs/bench/$1.txt" ]] || return 0
  awk -v b="$2" -v u="$3" '$1 ~ "^Benchmark"b"(-[0-9]+)?$" { for (i=2; i<=NF; i++) if ($(i)==u) print $(i-1) }' "docs/bench/$1.txt" | tail -1
}

if [[ "${1:-}" == "--accept" ]]; then
  shift
  [[ $# -gt 0 ]] || { echo "bench-compare: --accept needs the rows to accept (or all)" >&2; exit 2; }
  today=$(date -u +%Y-%m-%d)
  tmp=$(mktemp)
  while IFS= read -r line; do
    read -r row file bench unit accepted date rest <<<"$line" || true
    if [[ -z "$row" || "$row" == \#* ]]; then
      printf '%s\n' "$line" >>"$tmp"
      continue
    fi
    wanted=no
    for want in "$@"; do [[ "$want" == all || "$want" == "$row" ]] && wanted=yes; done
    now=$(figure "$file" "$bench" "$unit")
    if [[ "$wanted" == yes && -n "$now" ]]; then
      echo "bench-compare: $row: accepted $now (was $accepted, $date)" >&2
      printf '%-34s %-14s %-40s %-36s %-8s %s\n' "$row" "$file" "$bench" "$unit" "$now" "$today" >>"$tmp"
    else
      [[ "$wanted" == yes ]] && echo "bench-compare: $row: no figure in docs/bench/$file.txt, left as it was" >&2
      printf '%s\n' "$line" >>"$tmp"
    fi
  done <"$ACCEPTED"
  mv "$tmp" "$ACCEPTED"
  exit 0
fi

echo "| row | now | accepted (date) | change | |"
echo "|---|---|---|---|---|"
while read -r row file bench unit accepted date; do
  [[ -z "$row" || "$row" == \#* ]] && continue
  now=$(figure "$file" "$bench" "$unit")
  awk -v row="$row" -v now="$now" -v acc="$accepted" -v date="$date" -v moved="$MOVED" 'BEGIN {
    if (now == "") { printf "| %s | no result | %s (%s) | | |\n", row, acc, date; exit }
    change = (now - acc) / acc
    flag = (change > moved || change < -moved) ? "**moved**" : sprintf("within %.0f%%", moved * 100)
    printf "| %s | %s | %s (%s) | %+.0f%% | %s |\n", row, now, acc, date, change * 100, flag
  }'
done <"$ACCEPTED"
