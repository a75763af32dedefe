#!/usr/bin/env bash
# uninstall.sh MANIFEST: removes exactly the files `make install` installed (MANIFEST lists
# them with DESTDIR, one a line), then the directories of outboxd's own that this left
# empty (etc/outboxd, share/doc/outboxd), then MANIFEST. Never removes the store
# (/var/lib/outboxd) or anything it did not install. (make uninstall)
set -euo pipefail
manifest=$1
if [ ! -f "$manifest" ]; then
	echo "uninstall: $manifest not found: nothing was installed from this build (make install first)" >&2
	exit 1
fi
n=0
while IFS= read -r f || [ -n "$f" ]; do
	[ -n "$f" ] || continue
	if [ -e "$f" ] || [ -L "$f" ]; then
		rm -f -- "$f"
		n=$((n + 1))
	fi
	d=$(dirname -- "$f")
	if [ "$(basename -- "$d")" = outboxd ]; then
		rmdir --ignore-fail-on-non-empty -- "$d" 2>/dev/null || true
	fi
done <"$manifest"
rm -f -- "$manifest"
echo "uninstall: removed $n files"
