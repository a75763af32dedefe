#!/usr/bin/env bash
# check-layers.sh: the include rules of src/, checked over every .c and .h under it,
# nested folders included (store/sqlite/, store/postgres/). Run by `make test` (ctest:
# layering); docs/ARCHITECTURE.md states the same rules in prose. Fails naming the file,
# what it includes and the rule it breaks.
#
# 1. Includes point down. Layers, bottom up:
#      0 util      buffers, time, uuid, logging
#      1 core      pure logic: model, outcome rules, breaker, filter, subscription codec
#      2 store     the storage interface, its backends, the one writer, the spool
#      3 kafka     what the Kafka intake and sink share (envelope codec, client settings)
#      3 otel      the OpenTelemetry exporter (OTLP/HTTP) the dispatcher reports to
#      4 deliver, intake, janitor   the engines: sinks and dispatcher, ways in, periodic maintenance
#      5 api, cli  the HTTP API and the command line
#      main.c, serve.c, serve.h   the commands and the daemon's wiring: may include any layer
#    A file includes headers of its own folder and of lower layers, never of a sibling
#    (another folder of its level) or of a higher layer. A folder not in the table, or a
#    file directly under src/ other than those three, fails until it is given a layer here.
# 2. The store's backends stay apart: store/sqlite/ and store/postgres/ never include
#    each other, and a backend's headers are included only by its own files (the rest of
#    outboxd reaches a backend through store/store.h and store/backend.h).
# 3. A library's headers reach only the glue files listed for it in LIBRARIES below,
#    directly or through a project header (a header that includes <curl/curl.h> hands
#    libcurl to every file that includes it, and each of those must be listed too). So
#    route handlers, retry logic and the rest keep taking plain structs. A listed file
#    that no longer exists fails too, so the lists stay true.
set -euo pipefail
set -f # patterns below are matched with [[ == ]], never expanded against files
cd "$(dirname "$0")/../src"

# name | the #include names that are this library (bash patterns; "..." for a quoted
# include) | the files that may reach them (bash patterns, paths under src/)
LIBRARIES=(
	"libcurl|<curl/*>|deliver/sink_http_int.h deliver/sink_http.c deliver/http_request.c deliver/http_token.c deliver/http_proxy.c deliver/http_wire.c kafka/registry.c otel/otlp.c cli/cli.c cli/client.c serve.c"
	"libmicrohttpd|<microhttpd.h>|api/http.c"
	"SQLite|<sqlite3.h>|store/sqlite/*"
	"libpq|<libpq-fe.h> <libpq/*> <postgresql/*>|store/postgres/*"
	"librdkafka|<librdkafka/*>|kafka/client_rdkafka.h kafka/client.c kafka/message.h kafka/message.c kafka/dead_letter.c intake/kafka_intake_int.h intake/kafka_intake.c intake/kafka_batch.c deliver/sink_kafka.c"
	"protobuf-c|<protobuf-c/*> \"outboxd/v1/*\" \"opentelemetry/proto/*\"|kafka/envelope.c intake/grpc_publish.c otel/otlp_int.h otel/otlp_encode.c otel/otlp_json.c otel/otlp_metrics.c"
	"OpenSSL|<openssl/*>|util/base64.c util/uuid.c util/pem.c core/secretbox.c core/sub_codec.c core/token.c core/whsec.c store/secrets.c store/copy.c kafka/envelope.c deliver/sign.c deliver/sink_http.c deliver/http_request.c deliver/http_token.c deliver/http_wire.c deliver/http_tls.c deliver/http_head.c deliver/oauth2.c deliver/redact.c api/router.c api/routes_tokens.c serve.c"
	"libgrpc|<grpc/*>|intake/grpc_intake.c"
	"libsystemd|<systemd/*>|cli/service.c"
	"http_parser|<http_parser.h>|deliver/http_wire.c"
	"zlib|<zlib.h>|store/spool.c otel/otlp_encode.c"
	"GnuTLS|<gnutls/*>|"
)

declare -A LEVEL=([util]=0 [core]=1 [store]=2 [kafka]=3 [otel]=3 [deliver]=4 [intake]=4
	[janitor]=4 [api]=5 [cli]=5 [main.c]=6 [serve.c]=6 [serve.h]=6)

# Sets backend to sqlite or postgres for a path inside that backend's folder, else "".
backend_of() {
	case "$1" in
	store/sqlite/*) backend=sqlite ;; store/postgres/*) backend=postgres ;; *) backend="" ;;
	esac
}

mapfile -t files < <(find . -type f \( -name '*.c' -o -name '*.h' \) | sed 's|^\./||' | sort)

# The rules split once: a here-string per include and rule cost seconds of forks.
LIB_NAME=() LIB_PATS=() LIB_ALLOWED=()
for rule in "${LIBRARIES[@]}"; do
	IFS='|' read -r name pats allowed <<<"$rule"
	LIB_NAME+=("$name")
	LIB_PATS+=("$pats")
	LIB_ALLOWED+=("$allowed")
done

# Every file's #include targets (<...> or "..."), one grep for all files: lines[f] holds
# them newline-separated.
declare -A lines
for f in "${files[@]}"; do lines[$f]=""; done
while IFS= read -r hit; do
	f=${hit%%:*}
	inc=${hit#*:}
	lines[$f]+="$inc"$'\n'
done < <(grep -HE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]' "${files[@]}" |
	sed -n 's/^\([^:]*\):[[:space:]]*#[[:space:]]*include[[:space:]]*\([<"][^>"]*[>"]\).*/\1:\2/p')

bad=0
fail() {
	echo "layering: $*"
	bad=1
}

declare -A direct incs
for f in "${files[@]}"; do
	direct[$f]=""
	incs[$f]=""
	while IFS= read -r inc; do
		[ -n "$inc" ] || continue
		# the library this include belongs to, if any
		for i in "${!LIB_NAME[@]}"; do
			for p in ${LIB_PATS[i]}; do
				# shellcheck disable=SC2053
				if [[ $inc == $p ]]; then
					direct[$f]+="${LIB_NAME[i]}=$inc "
					continue 3
				fi
			done
		done
		case $inc in
		\"*/*\")
			h=${inc#\"}
			h=${h%\"}
			[ -f "$h" ] && incs[$f]+="$h "
			;;
		esac
	done <<<"${lines[$f]}"
done

# ---- 1 and 2: the layers, and the backends ----------------------------------------------
for f in "${files[@]}"; do
	case $f in
	*/*) from=${f%%/*} ;;
	*) from=$f ;;
	esac
	lf=${LEVEL[$from]-unknown}
	if [ "$lf" = unknown ]; then
		if [[ $f == */* ]]; then
			fail "$f: folder $from has no layer (add it to scripts/check-layers.sh)"
		else
			fail "$f: a file directly under src/ has no layer (only main.c and serve.c wire; move it into a layer's folder)"
		fi
		continue
	fi
	backend_of "$f"
	fb=$backend
	while IFS= read -r line; do
		[[ $line =~ ^\"[a-z_]+/ ]] || continue
		inc=${line#*\"}
		inc=${inc%%\"*}
		to=${inc%%/*}
		[ "$to" = outboxd ] || [ "$to" = opentelemetry ] && continue # generated protobuf-c code: rule 3
		backend_of "$inc"
		tb=$backend
		if [ -n "$tb" ] && [ "$tb" != "$fb" ]; then
			if [ -n "$fb" ]; then
				fail "$f includes \"$inc\": one store backend ($fb) includes the other ($tb); what both need belongs in store/backend.h"
			else
				fail "$f includes \"$inc\": a store backend's headers are its own ($tb); go through store/store.h or store/backend.h"
			fi
		fi
		[ "$to" = "$from" ] && continue
		lt=${LEVEL[$to]-unknown}
		if [ "$lt" = unknown ] || [ "$to" = main.c ]; then
			fail "$f includes \"$inc\": $to is not a layer"
		elif [ "$lt" -ge "$lf" ]; then
			if [ "$lt" -eq "$lf" ]; then why="a sibling layer"; else why="a higher layer"; fi
			fail "$f (layer $lf, $from) includes \"$inc\" from $why ($to, layer $lt): includes point down"
		fi
	done <<<"${lines[$f]}"
done

# ---- 3: the libraries' glue files ----------------------------------------------------------
# reach[f]: " name=include ..." of every library f reaches; via[f|name]: the chain of
# project headers it comes through ("" when f includes it itself).
declare -A reach via seen
visit() {
	local f=$1 h entry name
	[ -n "${seen[$f]+x}" ] && return
	seen[$f]=1
	local got=" "
	for entry in ${direct[$f]}; do
		name=${entry%%=*}
		[[ $got == *" $name="* ]] && continue
		got+="$entry "
		via["$f|$name"]=""
	done
	for h in ${incs[$f]}; do
		visit "$h"
		for entry in ${reach[$h]-}; do
			name=${entry%%=*}
			[[ $got == *" $name="* ]] && continue
			got+="$entry "
			via["$f|$name"]="$h${via[$h|$name]:+ -> ${via[$h|$name]}}"
		done
	done
	reach[$f]=$got
}

for i in "${!LIB_NAME[@]}"; do
	name=${LIB_NAME[i]}
	allowed=${LIB_ALLOWED[i]}
	for a in $allowed; do
		[[ $a == *\** ]] && continue
		[ -f "$a" ] || fail "$a is listed for $name in scripts/check-layers.sh but does not exist: take it off the list"
	done
done

for f in "${files[@]}"; do
	visit "$f"
	for entry in ${reach[$f]}; do
		name=${entry%%=*}
		inc=${entry#*=}
		allowed=""
		for i in "${!LIB_NAME[@]}"; do
			[ "${LIB_NAME[i]}" = "$name" ] && allowed=${LIB_ALLOWED[i]}
		done
		ok=0
		for a in $allowed; do
			# shellcheck disable=SC2053
			[[ $f == $a ]] && ok=1
		done
		[ "$ok" -eq 1 ] && continue
		chain=${via[$f|$name]}
		how="includes $inc"
		[ -n "$chain" ] && how="reaches $inc through $chain"
		fail "$f $how, but only ${allowed:-no file} may use $name (only a library's glue files see its types; list a new glue file in scripts/check-layers.sh and docs/ARCHITECTURE.md)"
	done
done

if [ "$bad" -ne 0 ]; then
	echo "layering: rules in scripts/check-layers.sh and docs/ARCHITECTURE.md (Layers)"
	exit 1
fi
echo "layering: ${#files[@]} files under src/: includes point down, the store backends stay apart, libraries only in their glue files"
