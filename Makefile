# outboxd: the two commands users need, plus their building blocks.
#   make run    install what is missing, build, start outboxd on the embedded SQLite store
#   make test   install what is missing, build with ASan+UBSan, run every test through ctest

BUILD      ?= build
TESTBUILD  ?= build-test
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
# How many tests ctest runs at once: one more than the cores. The end-to-end tests spend
# about half their time waiting on receivers, brokers and timeouts: on 2 cores, 139 tests
# took 489 s of wall time at -j2 and 375 s at -j3 (a whole make test at -j2, the build
# included, used 642 s of CPU in 583 s of wall time: the two cores sat idle nearly half
# of it). Earlier -j3 runs exposed two timing races (fixed since); TESTJOBS=2 goes back to
# one test per core.
TESTJOBS   ?= $(shell echo $$(( $(JOBS) + 1 )))

.PHONY: run test build deps clean receiver bench bench-kafka bench-grpc fuzz soak install uninstall deb \
	deb-check

deps:
	@bash scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOUTBOXD_DEFAULT_CONFIG= >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target outboxd

# The SSRF guard refuses loopback addresses by default; the quickstart's receiver runs on
# 127.0.0.1, so `make run` lets loopback through (and says so when it starts).
run: build
	@mkdir -p var
	@echo "make run: --ssrf-allow 127.0.0.0/8 lets deliveries reach local receivers (the SSRF guard refuses loopback otherwise)"
	./$(BUILD)/outboxd serve --ssrf-allow 127.0.0.0/8

# The test build's debug information is -g1 (functions and line tables: what a
# sanitizer's report names) rather than -g (local variables too): a clean build of
# everything took 60 s instead of 75 s on 2 cores. For a debugger's view of locals:
# make test TESTDEBUG=-g
TESTDEBUG ?= -g1
test: deps
	@cmake -S . -B $(TESTBUILD) -DCMAKE_BUILD_TYPE=Debug -DSANITIZE=ON -DCMAKE_C_FLAGS_DEBUG="$(TESTDEBUG)" >/dev/null
	@cmake --build $(TESTBUILD) -j $(JOBS)
	@cd $(TESTBUILD) && ctest --output-on-failure -j $(TESTJOBS)

# make install [PREFIX=/usr/local] [DESTDIR=]: the binary, outboxd(8), the example
# configuration (PREFIX/etc/outboxd/outboxd.conf, /etc for PREFIX=/usr), the systemd unit
# (PREFIX/lib/systemd/system) and the operator docs; the list of what went where is kept
# in $(BUILD)/installed_files.txt for make uninstall (same BUILD). docs/deployment.md.
PREFIX  ?= /usr/local
DESTDIR ?=
# The installed binary reads that configuration when given none (OUTBOXD_DEFAULT_CONFIG);
# the build of make run is rebuilt without it afterwards (one file recompiles).
SYSCONFDIR = $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
install: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DOUTBOXD_DEFAULT_CONFIG=$(SYSCONFDIR)/outboxd/outboxd.conf >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target outboxd
	@DESTDIR="$(DESTDIR)" cmake --install $(BUILD) --prefix "$(PREFIX)"
	@sed 's|^|$(DESTDIR)|' $(BUILD)/install_manifest.txt > $(BUILD)/installed_files.txt
	@echo "make install: $$(grep -c "" $(BUILD)/installed_files.txt) files, listed in $(BUILD)/installed_files.txt"

uninstall:
	@bash scripts/uninstall.sh $(BUILD)/installed_files.txt

# make deb: the Debian package (debian/, dpkg-buildpackage, debhelper 13) built in
# build-deb/ and checked with lintian (fails on an error). make deb-check: make deb, then
# dpkg -i of it on this machine and a check that the installed outboxd works (as root or
# with sudo; purges it again unless KEEP_INSTALLED=1). Not part of make test: it installs
# a system package. docs/deployment.md.
deb:
	@bash scripts/deb.sh

deb-check: deb
	@bash scripts/deb-check.sh

# A local HTTP receiver on port 9000 that prints what it gets (for the quickstart).
receiver: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target test_receiver
	./$(BUILD)/test_receiver --port 9000 --print

# The benchmark (docs/performance.md): installs wrk, gnuplot, PostgreSQL and the
# peers' npm packages, builds Release binaries in build-bench, runs the ratio rows in 5
# interleaved rounds and the others once, and writes bench/results/latest.{md,json,png}.
# About 15 minutes on 2 cores; refuses a busy machine (load average above 1.0).
bench:
	@bash scripts/bench-deps.sh
	@bash bench/run.sh

# The Kafka benchmark (docs/kafka.md, docs/performance.md#kafka): consumed
# envelopes/s and published events/s against HTTP ingest, on librdkafka's mock cluster.
bench-kafka:
	@bash bench/kafka.sh

# The gRPC ingest against the HTTP ingest (docs/grpc.md): events/s and outboxd's CPU per
# event for one event a call and for batches, one outboxd on SQLite, one Node client;
# bench/results/grpc.md.
bench-grpc:
	@bash bench/grpc.sh

# The chaos soak (docs/reliability.md): SOAK_MINUTES (default 10) of random SIGKILLs of
# three outboxd instances sharing one key, PostgreSQL restarts, Kafka broker restarts under
# the Kafka intake, and misbehaving subscribers, then an accounting of every acknowledged
# event (HTTP and Kafka) by webhook-id; bench/results/soak-latest.md. Fails when an
# acknowledged event was lost.
SOAK_MINUTES ?= 10
soak: deps
	@SOAK_MINUTES=$(SOAK_MINUTES) bash bench/soak.sh

# libFuzzer with ASan+UBSan over every parser a user can reach (tests/fuzz/: ingest,
# subscriptions, filters, the config file, Kafka envelopes, spool records, the lean
# client's answers and URLs, OAuth2 token answers, PATCH merges, API request targets):
# installs clang if missing (scripts/deps.sh), runs FUZZ_SECONDS (default 60) per target,
# fails on a crashing input. make test replays each target's seeds and fixed variants of
# them without libFuzzer (ctest fuzz/TARGET, tests/fuzz/replay.c).
fuzz:
	@bash scripts/fuzz.sh

clean:
	rm -rf $(BUILD) $(TESTBUILD)
