#!/usr/bin/env bash
# deb-check.sh (make deb-check, after make deb): installs build-deb/outboxd_*.deb on this
# machine with dpkg -i and checks that it gives a working outboxd: the user, the
# configuration's owner and mode, the store directory, the unit accepted by
# systemd-analyze verify, man outboxd, check-config of the packaged configuration (and
# with no flags: the installed binary reads it by default), root's migrate refused on the
# service's store while the service user's works, and
# the packaged service's command line serving (as user outboxd, on the packaged
# configuration and /var/lib/outboxd) until SIGTERM. Then purges the package again and
# removes the store it made, unless KEEP_INSTALLED=1; a machine that had outboxd
# installed before is refused rather than changed.
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/install/lib.sh
# dpkg -i needs root: run the whole check as root
[ "$(id -u)" -eq 0 ] || exec sudo bash "$0" "$@"
deb=$(ls build-deb/outboxd_*_"$(dpkg --print-architecture)".deb 2>/dev/null | head -1)
[ -n "$deb" ] || { echo "deb-check: no package in build-deb/ (make deb first)" >&2; exit 1; }
fail() {
	echo "deb-check: $*" >&2
	exit 1
}
if dpkg-query -W -f='${Status}' outboxd 2>/dev/null | grep -q 'install ok installed'; then
	fail "outboxd is installed on this machine already; not touching it"
fi
store_existed=0
[ -e /var/lib/outboxd ] && store_existed=1
pid=
cleanup() {
	[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
	if [ "${KEEP_INSTALLED:-0}" != 1 ]; then
		dpkg --purge outboxd >/dev/null 2>&1 || true
		[ "$store_existed" = 1 ] || rm -rf /var/lib/outboxd
	fi
}
trap cleanup EXIT

echo "deb-check: dpkg -i $deb"
dpkg -i "$deb"
dpkg-query -W -f='${Status} ${Version}\n' outboxd | grep -q 'install ok installed' ||
	fail "dpkg does not list outboxd as installed"

getent passwd outboxd >/dev/null || fail "no user outboxd"
[ "$(stat -c '%U:%G %a' /etc/outboxd/outboxd.conf)" = "root:outboxd 640" ] ||
	fail "/etc/outboxd/outboxd.conf is $(stat -c '%U:%G %a' /etc/outboxd/outboxd.conf), not root:outboxd 640"
[ "$(stat -c '%U %a' /var/lib/outboxd)" = "outboxd 700" ] ||
	fail "/var/lib/outboxd is $(stat -c '%U %a' /var/lib/outboxd), not outboxd 700"
out=$(systemd-analyze verify /lib/systemd/system/outboxd.service 2>&1) && [ -z "$out" ] ||
	{ printf '%s\n' "$out" >&2; fail "systemd-analyze verify refuses the installed unit"; }
man -w outboxd >/dev/null || fail "man outboxd finds no page"
LC_ALL=C MANWIDTH=100 man outboxd 2>/dev/null | grep -q 'check-config' || fail "man outboxd does not render"
bash tests/install/man_sync.sh /usr/bin/outboxd "$(man -w outboxd)"
# as the unit's User=outboxd (setpriv execs: $! is outboxd itself)
run_as() { setpriv --reuid=outboxd --regid=outboxd --init-groups -- "$@"; }
run_as /usr/bin/outboxd check-config --config /etc/outboxd/outboxd.conf >/dev/null ||
	fail "check-config refuses the packaged configuration"
# with no flags, from any directory, the installed binary reads the packaged configuration
here=$(mktemp -d)
cd "$here"
out=$(run_as /usr/bin/outboxd check-config) || fail "check-config with no flags fails"
grep -q 'config file /etc/outboxd/outboxd.conf' <<<"$out" ||
	fail "check-config with no flags does not read /etc/outboxd/outboxd.conf"
grep -q '^db = "sqlite:/var/lib/outboxd/outboxd.db"' <<<"$out" ||
	fail "check-config with no flags does not use the packaged store"
# root's migrate cannot leave a store the service cannot open: refused, naming the user
rc=0
out=$(/usr/bin/outboxd migrate 2>&1) || rc=$?
[ "$rc" = 2 ] && grep -q 'sudo -u outboxd outboxd migrate' <<<"$out" ||
	fail "root's outboxd migrate was not refused (exit $rc): $out"
[ ! -e /var/lib/outboxd/outboxd.db ] || [ "$(stat -c %U /var/lib/outboxd/outboxd.db)" = outboxd ] ||
	fail "root's outboxd migrate left a store owned by $(stat -c %U /var/lib/outboxd/outboxd.db)"
[ -z "$(ls -A "$here")" ] || fail "a command with no flags wrote into the current directory: $(ls -A "$here")"
# the service user's migrate, with no flags, makes the store it will serve
run_as /usr/bin/outboxd migrate >/dev/null || fail "outboxd migrate as outboxd fails"
[ "$(stat -c %U /var/lib/outboxd/outboxd.db)" = outboxd ] || fail "migrate's store is not owned by outboxd"
cd - >/dev/null
rmdir "$here"

# what the unit runs, as the unit runs it (the listen port moved off 8080 for the check)
port=$(free_port) || fail "no free port"
exec_start=$(sed -n 's/^ExecStart=//p' /lib/systemd/system/outboxd.service)
log=$(mktemp)
cd /var/lib/outboxd # the unit's WorkingDirectory
setpriv --reuid=outboxd --regid=outboxd --init-groups -- $exec_start --listen "127.0.0.1:$port" \
	>"$log" 2>&1 &
pid=$!
cd - >/dev/null
wait_ready "$port" "$pid" || { cat "$log" >&2; fail "the packaged outboxd did not get ready"; }
token=$(cat /var/lib/outboxd/admin.token)
code=$(curl -sS -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$port/v1/events" \
	-H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
	-d '{"event_type":"deb.check","payload":{}}')
[ "$code" = 202 ] || fail "POST /v1/events answered $code"
OUTBOXD_URL="http://127.0.0.1:$port" OUTBOXD_TOKEN=$token /usr/bin/outboxd stats >/dev/null ||
	fail "outboxd stats does not work against the packaged outboxd"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=
[ "$rc" = 0 ] || { cat "$log" >&2; fail "the packaged outboxd exited $rc on SIGTERM"; }
test -f /var/lib/outboxd/outboxd.db || fail "no store in /var/lib/outboxd"
[ "$(stat -c %U /var/lib/outboxd/outboxd.db)" = outboxd ] || fail "the store is not owned by outboxd"
rm -f "$log"

# removal keeps the store
dpkg -r outboxd >/dev/null
test -f /var/lib/outboxd/outboxd.db || fail "dpkg -r removed the store"
[ ! -e /usr/bin/outboxd ] || fail "dpkg -r left /usr/bin/outboxd"
echo "deb-check: $deb installs a working outboxd (user, conffile 0640, /var/lib/outboxd, unit verified, man page, /etc/outboxd/outboxd.conf read with no flags, root's migrate refused, migrate and serve as outboxd, removal keeps the store)"
if [ "${KEEP_INSTALLED:-0}" = 1 ]; then
	dpkg -i "$deb" >/dev/null
	echo "deb-check: left installed (KEEP_INSTALLED=1)"
fi
