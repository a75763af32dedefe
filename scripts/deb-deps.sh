#!/usr/bin/env bash
# deb-deps.sh: what `make deb` and `make deb-check` need on top of scripts/deps.sh: the
# Debian packaging tools. Idempotent and quiet when everything is there; sudo when not root.
set -euo pipefail
bash "$(dirname "$0")/deps.sh"
packages=(
  debhelper          # dh, debhelper-compat 13, dh_installsystemd
  dpkg-dev           # dpkg-buildpackage
  fakeroot
  lintian
  adduser            # the package's postinst makes the user outboxd
)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "deb-deps: installing ${missing[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
