#!/usr/bin/env bash
# destdir.sh SOURCE_DIR OUTBOXD: installs the build of OUTBOXD into a DESTDIR with prefix
# /usr (as a package would), then checks what an operator gets: every file in place, the
# man page renders and names every --help flag (man_sync.sh on the installed files),
# the example configuration holds every setting and passes check-config, the installed
# binary serves with it (store paths pointed into the test directory) and stops cleanly
# on SIGTERM, systemd-analyze verify accepts the installed unit and rates its exposure
# low, and scripts/uninstall.sh removes exactly what was installed. (ctest: install/destdir)
set -euo pipefail
src=$1
bin=$2
build=$(dirname "$bin")
source "$src/tests/install/lib.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/outboxd-destdir-XXXXXX")
root=$work/root
pid=
cleanup() {
	[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
fail() {
	echo "destdir: $*" >&2
	exit 1
}

DESTDIR=$root cmake --install "$build" --prefix /usr >"$work/install.log"
sed "s|^|$root|" "$build/install_manifest.txt" >"$work/installed_files.txt"
for f in usr/bin/outboxd usr/share/man/man8/outboxd.8 etc/outboxd/outboxd.conf \
	usr/lib/systemd/system/outboxd.service usr/share/doc/outboxd/deployment.md \
	usr/share/doc/outboxd/api.md usr/share/doc/outboxd/console.md usr/share/doc/outboxd/kafka.md \
	usr/share/doc/outboxd/retries.md usr/share/doc/outboxd/console/overview.png \
	usr/share/doc/outboxd/outboxd.json; do
	[ -f "$root/$f" ] || fail "make install did not install /$f"
done
[ -x "$root/usr/bin/outboxd" ] || fail "/usr/bin/outboxd is not executable"
[ "$(stat -c %a "$root/etc/outboxd/outboxd.conf")" = 640 ] || fail "outboxd.conf is not mode 0640"

# the man page, installed, against the installed binary
bash "$src/tests/install/man_sync.sh" "$root/usr/bin/outboxd" "$root/usr/share/man/man8/outboxd.8"

# the example configuration: every setting is there, and it is valid as installed
conf=$root/etc/outboxd/outboxd.conf
for key in $("$root/usr/bin/outboxd" serve --help |
	sed -n 's/^  --[a-z0-9-]* *OUTBOXD_[A-Z0-9_]* *\([a-z0-9_]*\) = .*/\1/p'); do
	grep -qE "^#?$key =" "$conf" || fail "outboxd.conf lacks the setting $key"
done
env -u OUTBOXD_DB "$root/usr/bin/outboxd" check-config --config "$conf" >"$work/effective.txt" ||
	fail "check-config refuses the installed example configuration"
grep -qx 'db = "sqlite:/var/lib/outboxd/outboxd.db"' "$work/effective.txt" ||
	fail "the example configuration does not keep the store in /var/lib/outboxd"
grep -q 'Type=notify' "$root/usr/lib/systemd/system/outboxd.service" || fail "the unit is not Type=notify"
grep -q "ExecStart=/usr/bin/outboxd serve --config /etc/outboxd/outboxd.conf" \
	"$root/usr/lib/systemd/system/outboxd.service" || fail "the unit does not start /usr/bin/outboxd with /etc/outboxd/outboxd.conf"

# the installed binary serves with the example configuration (its store in $work/state)
port=$(free_port) || fail "no free port"
mkdir -p "$work/state"
env -u OUTBOXD_DB -u OUTBOXD_ADMIN_TOKEN "$root/usr/bin/outboxd" serve --config "$conf" \
	--db "sqlite:$work/state/outboxd.db" --data-dir "$work/state" \
	--listen "127.0.0.1:$port" >"$work/serve.log" 2>&1 &
pid=$!
wait_ready "$port" "$pid" || { cat "$work/serve.log" >&2; fail "the installed outboxd did not get ready"; }
token=$(cat "$work/state/admin.token")
code=$(curl -sS -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$port/v1/events" \
	-H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
	-d '{"event_type":"install.check","payload":{"ok":true}}')
[ "$code" = 202 ] || fail "POST /v1/events answered $code"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=
[ "$rc" = 0 ] || { cat "$work/serve.log" >&2; fail "outboxd exited $rc on SIGTERM"; }
[ -f "$work/state/outboxd.db" ] || fail "no store in the data directory"

# the unit: systemd-analyze verify (with ExecStart pointed at the installed binary, which
# is not in /usr/bin here), then its exposure (systemd-analyze security, offline; the
# threshold is on its 0-100 scale: 30 = the 3.0 it prints)
mkdir -p "$work/unit"
sed "s|/usr/bin/outboxd|$root/usr/bin/outboxd|g" "$root/usr/lib/systemd/system/outboxd.service" \
	>"$work/unit/outboxd.service"
if ! out=$(systemd-analyze verify --man=no "$work/unit/outboxd.service" 2>&1) || [ -n "$out" ]; then
	printf '%s\n' "$out" >&2
	fail "systemd-analyze verify refuses or warns about outboxd.service"
fi
systemd-analyze security --offline=yes --threshold=30 "$work/unit/outboxd.service" >"$work/security.txt" 2>&1 ||
	{ tail -3 "$work/security.txt" >&2; fail "systemd-analyze security: the unit's exposure is above 3.0"; }

# uninstall removes exactly what was installed, and the directories it made its own
bash "$src/scripts/uninstall.sh" "$work/installed_files.txt" >/dev/null
left=$(find "$root" -type f | sed "s|^$root||")
[ -z "$left" ] || fail "uninstall left: $left"
[ ! -d "$root/etc/outboxd" ] || fail "uninstall left /etc/outboxd"
echo "destdir: installed, served, verified and uninstalled $(grep -c "" "$build/install_manifest.txt") files"
