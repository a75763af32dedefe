#!/usr/bin/env bash
# deb.sh (make deb): builds the Debian package with the standard tooling
# (dpkg-buildpackage over debian/, debhelper 13, cmake) from a clean copy of the tree's
# files in build-deb/, so nothing is written outside it, then runs lintian on the result
# and fails on any error. Artifacts: build-deb/outboxd_VERSION_ARCH.deb (and the source
# package, .changes, .buildinfo); lintian's report in build-deb/lintian.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deb-deps.sh

version=$(dpkg-parsechangelog -S Version)
out=build-deb
rm -rf "$out"
mkdir -p "$out/outboxd-$version"
# the files git knows of (committed or not), none of the build trees
git ls-files -z --cached --others --exclude-standard | grep -zv '^build' |
	tar --null -T - -cf - | tar -xf - -C "$out/outboxd-$version"

echo "deb: dpkg-buildpackage in $out/outboxd-$version" >&2
(cd "$out/outboxd-$version" &&
	DEB_BUILD_OPTIONS="parallel=${JOBS:-2}" dpkg-buildpackage -us -uc >../build.log 2>&1) ||
	{ tail -40 "$out/build.log" >&2; echo "deb: dpkg-buildpackage failed (log: $out/build.log)" >&2; exit 1; }

changes=$(ls "$out"/outboxd_"$version"_*.changes)
rc=0
lintian --fail-on error --display-info "$changes" >"$out/lintian.txt" 2>&1 || rc=$?
errors=$(grep -c '^E: ' "$out/lintian.txt" || true)
warnings=$(grep -c '^W: ' "$out/lintian.txt" || true)
echo "deb: lintian: $errors errors, $warnings warnings ($out/lintian.txt)"
if [ "$rc" -ne 0 ] || [ "$errors" -ne 0 ]; then
	cat "$out/lintian.txt" >&2
	echo "deb: lintian fails the package" >&2
	exit 1
fi
ls -1 "$out"/*.deb
