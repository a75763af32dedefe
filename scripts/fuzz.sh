#!/usr/bin/env bash
# fuzz.sh: libFuzzer over every parser a user can reach, with AddressSanitizer and
# UndefinedBehaviorSanitizer. Targets (tests/fuzz/): input (ingest bodies, subscription
# documents), filter (query strings and JSON filters), config (the configuration file),
# envelope (Kafka OutboxEvent envelopes and the subscriptions they derive), spool (spool
# records, with an encode/decode round trip), wire (the lean HTTP client's answer
# parsing: status line, headers, chunked bodies, Retry-After), url (its URL parser,
# against libcurl's), oauth2 (token endpoint answers, and their redaction), merge (a
# PATCH on a stored subscription), publish (the gRPC ingest's OutboxEvent messages and
# its PublishReply), query (the API's request targets: paths and query
# strings through api_handle on a SQLite store). scripts/deps.sh installs clang and its
# libFuzzer runtime (quiet when present). Every target is built with CMake (option
# OUTBOXD_FUZZ: the sources compiled once, in $OUT/cmake) and copied to $OUT/fuzz_TARGET
# ($OUT: FUZZ_BUILD, default build-fuzz); $OUT/corpus-TARGET is seeded from
# tests/fuzz/seeds/TARGET and each runs for FUZZ_SECONDS (default 60); FUZZ_TARGETS picks
# some ("filter envelope"). Exits non-zero when an input crashes; the input is saved as
# $OUT/crash-* (replay: $OUT/fuzz_TARGET $OUT/crash-...). FUZZ_OPT is the optimisation
# (default -O1). `make test` does not run this: it builds each target with gcc, linked
# with tests/fuzz/replay.c instead of libFuzzer, and runs it over its seeds and fixed
# variants of them (ctest fuzz/TARGET), so that no target stops building or running.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${FUZZ_SECONDS:-60}
OUT=${FUZZ_BUILD:-build-fuzz}

# clang and its libFuzzer runtime (only a recommendation of clang's, which apt leaves
# out) are for this script alone: make test does not install them
bash scripts/deps.sh clang libclang-rt-dev

TARGETS=${FUZZ_TARGETS:-input filter config envelope spool wire url oauth2 merge publish query}
for t in $TARGETS; do
  case $t in
    input | filter | config | envelope | spool | wire | url | oauth2 | merge | publish | query) ;;
    *) echo "fuzz: unknown target $t" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
# -O1: faster runs than the Debug build's -O0, frames still readable in a crash report
CC=clang cmake -S . -B "$OUT/cmake" -DCMAKE_BUILD_TYPE=Debug -DSANITIZE=ON \
  -DOUTBOXD_TESTS=OFF -DOUTBOXD_FUZZ=ON \
  -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link ${FUZZ_OPT:--O1}" \
  >"$OUT/cmake.log" 2>&1 || { tail -40 "$OUT/cmake.log" >&2; exit 1; }
# shellcheck disable=SC2046
cmake --build "$OUT/cmake" -j "${JOBS:-2}" --target $(printf 'fuzz_%s ' $TARGETS) \
  >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log" >&2; exit 1; }
for t in $TARGETS; do
  cp "$OUT/cmake/fuzz_$t" "$OUT/fuzz_$t"
done

ROOT=$(pwd)
cd "$OUT"
for t in $TARGETS; do
  mkdir -p "corpus-$t"
  cp -n "$ROOT"/tests/fuzz/seeds/"$t"/* "corpus-$t/" 2>/dev/null || true
  echo "fuzz: $t for ${SECONDS_TO_RUN}s" >&2
  ./fuzz_"$t" -max_total_time="$SECONDS_TO_RUN" -max_len=8192 -print_final_stats=1 \
    "corpus-$t" 2>"fuzz-$t.log" || { tail -40 "fuzz-$t.log" >&2; exit 1; }
  grep -E "stat::number_of_executed_units|stat::new_units_added" "fuzz-$t.log" |
    sed "s/^/fuzz: $t: /" >&2
done
