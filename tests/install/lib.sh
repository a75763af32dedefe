# lib.sh: what the install checks share (sourced by tests/install/destdir.sh and
# scripts/deb-check.sh): a free local port, and waiting for an outboxd to be ready.

# Prints a TCP port on 127.0.0.1 that nothing listens on, below the ephemeral range
# (32768-60999) that outgoing connections take theirs from; returns 1 when none was found.
free_port() {
	local p
	for _ in $(seq 1 50); do
		p=$((20000 + RANDOM % 12000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

# wait_ready PORT PID: polls GET /readyz for up to 10 s while process PID lives; returns
# 0 once it answers 200, 1 otherwise.
wait_ready() {
	for _ in $(seq 1 100); do
		curl -fsS "http://127.0.0.1:$1/readyz" >/dev/null 2>&1 && return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}
