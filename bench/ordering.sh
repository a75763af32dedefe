#!/usr/bin/env bash
# ordering.sh: what per-key ordering costs, in one run: bench/quick.sh N events
# (default 20,000) on SQLite to one subscription — unordered without keys, unordered with
# 1,000 partition keys, and ordered by partition_key over 1,000 and over 50 keys — with
# deliveries/s and outboxd CPU per delivery, and each row's ratio to the first.
#
# Usage: bench/ordering.sh [events]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
rows=("0 none" "1000 none" "1000 partition_key" "50 partition_key")
printf '| keys | ordering | deliveries/s | ratio | outboxd CPU µs/delivery |\n|--:|---|--:|--:|--:|\n'
base=""
for r in "${rows[@]}"; do
  set -- $r
  out=$(KEYS=$1 ORDERING=$2 bash bench/quick.sh "$N")
  rate=$(sed -n 's/^end to end: *\([0-9]*\) deliveries.*/\1/p' <<<"$out")
  cpu=$(sed -n 's/^outboxd CPU: *\([0-9.]*\) us.*/\1/p' <<<"$out")
  [ -z "$base" ] && base=$rate
  awk -v k="$1" -v o="$2" -v r="$rate" -v b="$base" -v c="$cpu" \
    'BEGIN { printf "| %s | %s | %s | %.2f | %s |\n", k, o, r, r / b, c }'
done
printf '\nload average after: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
