#!/usr/bin/env bash
# check-layers.sh: fails when a file under src/ includes a header from a layer above its
# own, or from a sibling folder of the same layer. Run by `make test` (ctest: layering).
#
# Layers, bottom up (docs/ARCHITECTURE.md):
#   0 util      buffers, time, uuid, logging
#   1 core      pure logic: model, outcome rules, breaker, filter, subscription codec
#   2 store     the storage interface, its backends, the one writer, the spool
#   3 kafka     what the Kafka intake and sink share (envelope codec, client settings)
#   3 otel      the OpenTelemetry exporter (OTLP/HTTP) the dispatcher reports to
#   4 deliver, intake, jobs   the engines: sinks and dispatcher, ways in, background jobs
#   5 api, cli  the HTTP API and the command line
#   main.c      wiring: may include anything
# The generated protobuf-c headers belong to one folder each: outboxd/v1/... (the Kafka
# envelope) to kafka, opentelemetry/proto/... (OTLP) to otel.
set -euo pipefail
cd "$(dirname "$0")/../src"

level() {
	case "$1" in
	util) echo 0 ;; core) echo 1 ;; store) echo 2 ;; kafka | otel) echo 3 ;;
	deliver | intake | jobs) echo 4 ;; api | cli) echo 5 ;;
	outboxd | opentelemetry) echo 3 ;; # generated protobuf-c code
	*) echo "unknown" ;;
	esac
}

bad=0
for f in */*.c */*.h; do
	from=${f%%/*}
	lf=$(level "$from")
	if [ "$lf" = unknown ]; then
		echo "layering: $f: folder $from has no layer (add it to scripts/check-layers.sh)"
		bad=1
		continue
	fi
	while IFS= read -r line; do
		to=${line#*\"}
		to=${to%%/*}
		[ "$to" = "$from" ] && continue
		[ "$to" = outboxd ] && [ "$from" = kafka ] && continue
		[ "$to" = opentelemetry ] && [ "$from" = otel ] && continue
		lt=$(level "$to")
		if [ "$lt" = unknown ]; then
			echo "layering: $f includes \"${line#*\"}: $to is not a layer"
			bad=1
		elif [ "$lt" -ge "$lf" ]; then
			if [ "$lt" -eq "$lf" ]; then why="a sibling layer"; else why="a higher layer"; fi
			echo "layering: $f (layer $lf, $from) includes ${line#\#include } from $why ($to, layer $lt)"
			bad=1
		fi
	done < <(grep -E '^#include "[a-z_]+/' "$f" | sed 's/[[:space:]]*$//')
done
if [ "$bad" -ne 0 ]; then
	echo "layering: includes must point down: util < core < store < kafka|otel < deliver|intake|jobs < api|cli"
	exit 1
fi
echo "layering: every include under src/ points down"
