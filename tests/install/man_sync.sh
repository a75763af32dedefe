#!/usr/bin/env bash
# man_sync.sh OUTBOXD MANPAGE: the man page renders (man -l) and names everything the
# binary's help texts name: every command, every --flag, every OUTBOXD_* variable and
# every configuration key of `outboxd --help`, `outboxd serve --help`, the operator
# groups' --help and each of their commands' (`outboxd dlq replay --help`), and the --help
# of rotate-key, check-config and migrate. Fails listing what is missing.
# (ctest: install/man_sync)
set -euo pipefail
bin=$1
page=$2
# Some forty runs of --help: in the sanitizer build of make test, LeakSanitizer's scan at
# each exit is a third of their time; leaks are for the tests that run these commands.
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0

rendered=$(LC_ALL=C MANWIDTH=250 man --warnings -l "$page" 2>"${TMPDIR:-/tmp}/man_sync.$$.err" | col -b)
if [ -s "${TMPDIR:-/tmp}/man_sync.$$.err" ]; then
	echo "man_sync: man -l $page warns:"
	cat "${TMPDIR:-/tmp}/man_sync.$$.err"
	rm -f "${TMPDIR:-/tmp}/man_sync.$$.err"
	exit 1
fi
rm -f "${TMPDIR:-/tmp}/man_sync.$$.err"
[ -n "$rendered" ] || { echo "man_sync: man -l $page rendered nothing"; exit 1; }

help=$("$bin" --help)
# the commands: "  name   summary" lines of `outboxd --help`
commands=$(printf '%s\n' "$help" | sed -n 's/^  \([a-z][a-z-]*\) .*/\1/p')
[ "$(printf '%s\n' "$commands" | wc -l)" -ge 10 ] || { echo "man_sync: found too few commands in --help"; exit 1; }
texts="$help"
serve_help=$("$bin" serve --help)
texts+=$'\n'$serve_help
for c in $commands; do
	case $c in
	serve | version) ;;
	*)
		group_help=$("$bin" "$c" --help)
		texts+=$'\n'$group_help
		# an operator group lists its commands as "  GROUP COMMAND ...": their options
		# are in each command's own --help
		for sub in $(printf '%s\n' "$group_help" | sed -n "s/^  $c \([a-z][a-z-]*\).*/\1/p"); do
			texts+=$'\n'$("$bin" "$c" "$sub" --help)
		done
		;;
	esac
done

# Matched in the shell ([[ =~ ]] over the whole page, where a line's start follows a
# newline): a grep per name was most of this script's time.
missing=()
for c in $commands; do
	[[ $rendered =~ (^|[^a-z-])$c([^a-z-]|$) ]] || missing+=("command $c")
done
for f in $(grep -oE -- '--[a-z][a-z0-9-]*' <<<"$texts" | sort -u); do
	[[ $rendered == *"$f"* ]] || missing+=("flag $f")
done
for v in $(grep -oE 'OUTBOXD_[A-Z0-9_]+' <<<"$texts" | sort -u); do
	[[ $rendered =~ (^|[^A-Z_])$v([^A-Z0-9_]|$) ]] || missing+=("variable $v")
done
for k in $(printf '%s\n' "$serve_help" | sed -n 's/^  --[a-z0-9-]* *OUTBOXD_[A-Z0-9_]* *\([a-z0-9_]*\) = .*/\1/p'); do
	[[ $rendered =~ (^|[^a-z_])$k([^a-z0-9_]|$) ]] || missing+=("setting $k")
done
nflags=$(grep -oE -- '--[a-z][a-z0-9-]*' <<<"$texts" | sort -u | wc -l)
if [ ${#missing[@]} -ne 0 ]; then
	echo "man_sync: $page lacks what outboxd's --help names:"
	printf '  %s\n' "${missing[@]}"
	exit 1
fi
echo "man_sync: $page names all $(wc -w <<<"$commands") commands and $nflags flags of --help"
