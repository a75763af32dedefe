#!/usr/bin/env bash
# deps.sh [PACKAGE...]: install the Debian packages outboxd needs to build, run and test,
# and the PACKAGEs named (scripts/deb-deps.sh names the packaging tools).
# Idempotent and quiet when everything is already there; uses sudo when not root.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libsqlite3-dev sqlite3
  libpq-dev postgresql
  libcurl4-openssl-dev
  libhttp-parser-dev  # responses of the lean HTTP/1.1 client (src/deliver/http_wire.c)
  libmicrohttpd-dev libgnutls28-dev
  libjansson-dev
  libssl-dev openssl
  zlib1g-dev
  librdkafka-dev
  libprotobuf-c-dev protobuf-c-compiler protobuf-compiler
  libgrpc-dev         # gRPC's C core: the gRPC ingest (src/intake/grpc_intake.c, grpc_listen)
  python3-protobuf    # e2e/test_otel decodes the OTLP exports with the definitions as released
  kcat
  libcmocka-dev
  libsystemd-dev      # sd_notify: Type=notify readiness, watchdog, reload (src/cli/service.c)
  systemd             # systemd-analyze verify of dist/outboxd.service (ctest install/unit)
  man-db groff-base   # man -l of man/outboxd.8 (ctest install/man)
  curl
  jq                  # make soak (bench/soak.sh) reads the API's JSON with it
  python3             # receivers from real stacks (tests/support/receivers: http.server, app server)
  nginx               # nginx in front of the app server (tests/support/harness_receivers.c)
  wrk                 # the yardstick of the real receivers (wrk_best_rate, bench/small_receiver.sh)
  chromium            # the console's browser tests (tests/browser, playwright-core)
  tinyproxy           # a real egress proxy for e2e/test_egress_proxy (started by the test)
)
# clang and libFuzzer: make fuzz asks for them (scripts/fuzz.sh); make test replays the
# fuzz targets' seeds with gcc instead (tests/fuzz/replay.c)
# Node and npm build the console (npm ci of console/package-lock.json), run its browser
# tests and the Node receiver (tests/support/receivers/node_server.js). CI machines and most developer machines have them already (often a newer Node than
# Debian's, from NodeSource): Debian's packages only when there is no node or npm at all.
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)

packages+=("$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "deps: installing ${missing[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
