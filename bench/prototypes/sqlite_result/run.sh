#!/usr/bin/env bash
# run.sh: what a delivery's result costs SQLite with the indexes outboxd has, without
# the dead-letter queue's newest index, and with a `dead` column that would keep a first
# success out of every dead-letter index (README.md). ROUNDS rounds of the variants in
# turn on copies of one store migrated by this tree's outboxd and filled with N leased
# deliveries; prints the CPU µs per result of each run, or with MODE=callgrind the
# instructions per result (valgrind, the result loop alone).
#
# Usage: [N=20000] [ROUNDS=6] [MODE=time|callgrind] [BUILD=build]
#        bench/prototypes/sqlite_result/run.sh
# A measurement, not part of outboxd.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
N=${N:-20000}
ROUNDS=${ROUNDS:-6}
MODE=${MODE:-time}
BUILD=${BUILD:-build}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target outboxd >/dev/null
dir=$(mktemp -d /tmp/outboxd-result-XXXXXX)
trap 'rm -rf "$dir"' EXIT
cc -O2 -g -o "$dir/result" "$here/result.c" -lsqlite3
"$BUILD/outboxd" migrate --db "sqlite:$dir/base.db" >/dev/null 2>&1
"$dir/result" "$dir/base.db" fill "$N"
sqlite3 "$dir/base.db" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null

# outboxd's result statement (src/store/sqlite/conn.c, W_RESULT), as of this commit
full="UPDATE deliveries SET status = ?2, replay = ?3, attempt_count = ?4,
 retry_count = ?5, next_attempt_at = ?6, processed_at = ?7,
 last_code = CASE WHEN ?13 THEN last_code ELSE ?8 END,
 last_message = CASE WHEN ?13 THEN last_message ELSE ?9 END,
 last_cause = CASE WHEN ?13 THEN last_cause ELSE ?10 END,
 lease_owner = NULL, lease_until = NULL, delay_actions = ?14,
 failing_since = CASE WHEN ?2 = 'FAILED' THEN COALESCE(failing_since, ?11) END,
 dead_letter_pending = CASE WHEN ?15 THEN 1 ELSE dead_letter_pending END,
 updated_at = ?11 WHERE id = ?1 AND lease_owner = ?12"
# a first success naming only what it changes (a miss would fall back to the full one)
first_success="UPDATE deliveries SET status = ?2, attempt_count = ?4,
 next_attempt_at = NULL, processed_at = ?7, last_code = ?8, last_message = ?9,
 last_cause = ?10, lease_owner = NULL, lease_until = NULL, updated_at = ?11
 WHERE id = ?1 AND lease_owner = ?12 AND failing_since IS NULL
 AND dead_letter_pending = 0"
dead_column="ALTER TABLE deliveries ADD COLUMN dead INTEGER NOT NULL DEFAULT 0;
 DROP INDEX deliveries_dead_created; DROP INDEX deliveries_dead_sub;
 DROP INDEX deliveries_dead_type; DROP INDEX deliveries_dead_attempts;
 CREATE INDEX deliveries_dead_sub ON deliveries(subscription_id, created_at, id) WHERE dead = 1;
 CREATE INDEX deliveries_dead_type ON deliveries(event_type, created_at, id) WHERE dead = 1;
 CREATE INDEX deliveries_dead_attempts ON deliveries(attempt_count, id) WHERE dead = 1;
 CREATE INDEX deliveries_dead_created ON deliveries(created_at, id) WHERE dead = 1;"

one() { # name, schema change, statement
  cp "$dir/base.db" "$dir/t.db"
  rm -f "$dir/t.db-wal" "$dir/t.db-shm"
  [ -n "$2" ] && sqlite3 "$dir/t.db" "$2"
  if [ "$MODE" = callgrind ]; then
    valgrind --tool=callgrind --collect-atstart=no --toggle-collect=run_results \
      --callgrind-out-file="$dir/cg.out" "$dir/result" "$dir/t.db" run "$N" "$3" >/dev/null 2>&1
    ir=$(callgrind_annotate "$dir/cg.out" | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
    printf '%-16s %8d instructions per result\n' "$1" $((ir / N))
  else
    printf '%-16s %8s µs of CPU per result\n' "$1" "$("$dir/result" "$dir/t.db" run "$N" "$3")"
  fi
}
for r in $(seq "$ROUNDS"); do
  one current "" "$full"
  one no_dead_created "DROP INDEX deliveries_dead_created" "$full"
  one dead_column "$dead_column" "$first_success"
done
