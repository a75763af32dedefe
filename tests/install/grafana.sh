#!/usr/bin/env bash
# grafana.sh SOURCE_DIR: docs/grafana/outboxd.json is valid JSON, and every metric its
# queries use is one outboxd exposes on GET /metrics (src/core/metrics.c, the store
# gauges of src/api/routes_operator.c): a renamed metric fails here, not on an operator's
# empty panel. (ctest: install/grafana)
set -euo pipefail
src=$1
dash=$src/docs/grafana/outboxd.json
jq -e '.panels | length > 0' "$dash" >/dev/null || { echo "grafana: $dash has no panels"; exit 1; }
names=$(jq -r '.. | .expr? // empty' "$dash" | grep -oE 'outboxd_[a-z_]+' |
	sed -E 's/_(bucket|sum|count)$//' | sort -u)
[ -n "$names" ] || { echo "grafana: no outboxd metric in $dash"; exit 1; }
bad=0
for n in $names; do
	if ! grep -q "# TYPE $n " "$src/src/core/metrics.c" "$src/src/api/routes_operator.c"; then
		echo "grafana: $dash queries $n, which outboxd does not expose"
		bad=1
	fi
done
[ "$bad" -eq 0 ] && echo "grafana: all $(wc -w <<<"$names") metrics of the dashboard exist"
exit "$bad"
