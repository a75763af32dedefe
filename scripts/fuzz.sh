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
# strings through api_handle on a SQLite store; built with CMake, option OUTBOXD_FUZZ,
# in $OUT/cmake). Installs clang when missing (apt, quiet
# when present), builds build-fuzz/fuzz_TARGET, seeds build-fuzz/corpus-TARGET from
# tests/fuzz/seeds/TARGET and runs each for FUZZ_SECONDS (default 60); FUZZ_TARGETS picks
# some ("filter envelope"). Exits non-zero when an input crashes; the input is saved as
# build-fuzz/crash-* (replay: build-fuzz/fuzz_TARGET build-fuzz/crash-...).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${FUZZ_SECONDS:-60}
OUT=${FUZZ_BUILD:-build-fuzz}

bash scripts/deps.sh
if ! command -v clang >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "fuzz: installing clang" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends clang >/dev/null
fi

TARGETS=${FUZZ_TARGETS:-input filter config envelope spool wire url oauth2 merge publish query}
CFLAGS="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -D_GNU_SOURCE -Isrc"
LIBS="-ljansson -lcrypto -lz -lpthread"
mkdir -p "$OUT/proto"
protoc-c --proto_path=proto --c_out="$OUT/proto" proto/outboxd/v1/outbox_event.proto \
  proto/outboxd/v1/ingest.proto

build() { # name, extra sources and flags...
  local name=$1
  shift
  # shellcheck disable=SC2086
  clang $CFLAGS -o "$OUT/fuzz_$name" "$@" src/util/*.c src/core/*.c $LIBS
}

for t in $TARGETS; do
  case $t in
    input) build input tests/fuzz/fuzz_input.c src/intake/ingest.c ;;
    filter) build filter -DFUZZ_TARGET=1 tests/fuzz/fuzz_parsers.c ;;
    config) build config -DFUZZ_TARGET=2 tests/fuzz/fuzz_parsers.c ;;
    envelope) build envelope -DFUZZ_TARGET=3 -I"$OUT/proto" tests/fuzz/fuzz_parsers.c \
      src/kafka/envelope.c "$OUT/proto/outboxd/v1/outbox_event.pb-c.c" -lprotobuf-c ;;
    spool) build spool -DFUZZ_TARGET=4 tests/fuzz/fuzz_parsers.c src/store/spool.c ;;
    wire | url)
      n=5
      [ "$t" = url ] && n=6
      build "$t" -DFUZZ_TARGET=$n tests/fuzz/fuzz_parsers.c src/deliver/sink_http.c \
        src/deliver/http_request.c src/deliver/http_token.c src/deliver/http_proxy.c \
        src/deliver/oauth2.c src/deliver/redact.c src/deliver/sign.c -lcurl -lhttp_parser ;;
    oauth2) build oauth2 -DFUZZ_TARGET=7 tests/fuzz/fuzz_parsers.c src/deliver/oauth2.c \
      src/deliver/redact.c ;;
    merge) build merge -DFUZZ_TARGET=8 tests/fuzz/fuzz_parsers.c ;;
    publish) build publish -DFUZZ_TARGET=9 -I"$OUT/proto" tests/fuzz/fuzz_parsers.c \
      src/intake/grpc_publish.c src/intake/ingest.c "$OUT/proto/outboxd/v1/outbox_event.pb-c.c" \
      "$OUT/proto/outboxd/v1/ingest.pb-c.c" -lprotobuf-c ;;
    query)
      CC=clang cmake -S . -B "$OUT/cmake" -DCMAKE_BUILD_TYPE=Debug -DSANITIZE=ON \
        -DOUTBOXD_TESTS=OFF -DOUTBOXD_FUZZ=ON -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link" \
        >/dev/null
      cmake --build "$OUT/cmake" -j "${JOBS:-2}" --target fuzz_query >/dev/null
      cp "$OUT/cmake/fuzz_query" "$OUT/fuzz_query" ;;
    *) echo "fuzz: unknown target $t" >&2; exit 2 ;;
  esac
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
