#!/usr/bin/env bash
# fuzz.sh: libFuzzer over what outboxd parses from the network (tests/fuzz/fuzz_input.c:
# ingest bodies and subscription documents), with AddressSanitizer and
# UndefinedBehaviorSanitizer. Installs clang when missing (apt, quiet when present),
# builds build-fuzz/fuzz_input, seeds build-fuzz/corpus from tests/fuzz/seeds and runs
# for FUZZ_SECONDS (default 60). Exits non-zero when an input crashes; the input is
# saved as build-fuzz/crash-* (replay: build-fuzz/fuzz_input build-fuzz/crash-...).
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

mkdir -p "$OUT/corpus"
cp -n tests/fuzz/seeds/* "$OUT/corpus/" 2>/dev/null || true
# The parsers and what they link: ingest (intake/) and the pure core (the subscription
# codec, patterns, the model) over util/; no store.
clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -D_GNU_SOURCE -Isrc -o "$OUT/fuzz_input" \
  tests/fuzz/fuzz_input.c src/intake/ingest.c src/util/*.c src/core/*.c \
  -ljansson -lcrypto -lz -lpthread
cd "$OUT"
exec ./fuzz_input -max_total_time="$SECONDS_TO_RUN" -max_len=8192 -print_final_stats=1 corpus
