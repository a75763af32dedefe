#!/usr/bin/env bash
# deb-deps.sh: what `make deb` and `make deb-check` need on top of scripts/deps.sh: the
# Debian packaging tools (not needed by make test).
set -euo pipefail
exec bash "$(dirname "$0")/deps.sh" \
	debhelper `# dh, debhelper-compat 13, dh_installsystemd` \
	dpkg-dev `# dpkg-buildpackage` \
	fakeroot \
	lintian \
	adduser `# the package's postinst makes the user outboxd`
