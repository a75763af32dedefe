#!/usr/bin/env bash
# profile.sh: where outboxd's CPU goes during a bench/quick.sh run, by thread and library.
#
# Usage: [DB=sqlite|postgres] bench/profile.sh [events]          perf, sampled (default)
#        MODE=callgrind bench/profile.sh [events]                instructions per delivery
#
# perf mode samples the outboxd process at 999 Hz through a quick.sh run of N events
# (default 60,000) and prints the share of each thread (they are named: dispatch,
# writer, MHD-worker, jobs, ...) and library, then the dispatch thread's top
# symbols. callgrind mode runs N events (default 5,000; about 50x slower) under
# valgrind and prints instructions per delivery for each thread: exact and repeatable on
# a noisy machine, but batches are smaller than at full speed, so per-transaction costs
# weigh more than in a real run. Debian's libraries have no symbols for their internals;
# library-level figures are what they are.
#
# SUBS=n fans every event out to n subscriptions (bench/quick.sh); per delivery is per
# event x subscription.
# Needs perf (linux-perf) or valgrind. BUILD (default build) is passed to quick.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${MODE:-perf}
out=$(mktemp -d /tmp/outboxd-profile-XXXXXX)
trap 'rm -rf "$out"' EXIT

if [ "$MODE" = callgrind ]; then
	N=${1:-5000}
	D=$((N * ${SUBS:-1}))
	command -v valgrind >/dev/null || { echo "profile: valgrind is not installed" >&2; exit 2; }
	WRAP="valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file=$out/cg.out" \
		bash bench/quick.sh "$N" | grep -E "^(store|events|end to end)"
	total=0
	for f in "$out"/cg.out*; do
		ir=$(sed -n 's/^summary: \([0-9]*\).*/\1/p;s/^totals: \([0-9]*\).*/\1/p' "$f" | head -1)
		[ -z "$ir" ] || [ "$ir" -eq 0 ] && continue
		total=$((total + ir))
		# the thread's busiest function of outboxd names it (dispatcher_main, ...)
		# (read whole first: a pipe that head closes early kills the annotation with
		# SIGPIPE, and pipefail the script. A bare "main" matches inside other names:
		# looked for only when none matched; the API's libmicrohttpd threads show only
		# the api_* functions they call.)
		ann=$(callgrind_annotate --inclusive=yes "$f" 2>/dev/null || true)
		who=$(grep -oE '\b(dispatcher_main|writer_main|replay_main|intake_main|janitor_main|listener_main|api_[a-z_]+)\b' <<<"$ann" |
			head -1 || true)
		case $who in
		api_*) who="API (MHD)" ;;
		"") grep -qE '\bmain\b' <<<"$ann" && who=main ;;
		esac
		printf '  %-16s %9d instructions per delivery\n' "${who:-?}" $((ir / D))
	done
	printf '  %-16s %9d instructions per delivery\n' total $((total / D))
	exit 0
fi

N=${1:-60000}
command -v perf >/dev/null || { echo "profile: perf is not installed (apt-get install linux-perf)" >&2; exit 2; }
WRAP="perf record -F 999 -o $out/perf.data --" bash bench/quick.sh "$N" |
	grep -E "^(store|events|ingest|end to end)"
echo
echo "share of outboxd's CPU samples, by thread and library:"
perf report -i "$out/perf.data" --no-children --sort comm,dso -g none 2>/dev/null |
	grep -vE '^(#|$)' | awk '$1+0 >= 0.5' | head -24
echo
echo "dispatch thread, top symbols:"
perf report -i "$out/perf.data" --no-children --comm dispatch --sort dso,sym -g none 2>/dev/null |
	grep -vE '^(#|$)' | head -15
