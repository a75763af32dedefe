/* test_pg_cluster.c: several outboxd instances on one PostgreSQL database (PostgreSQL
 * only; ctest runs it as e2e-pg/test_pg_cluster).
 *
 *  - three instances share 20,000 events: every one delivered, none twice, and each
 *    instance made a share of the attempts (outboxd.attempts.instance);
 *  - one of three is killed with SIGKILL mid-run: every event is still delivered, and
 *    duplicates stay within what that instance had in flight (printed);
 *  - PostgreSQL restarts mid-run: ingest answers 503 while it is down, every event
 *    acknowledged with 202 is delivered, and the same outboxd processes carry on, each
 *    logging the outage once.
 *
 * The receiver counts webhook-ids (the event id, the same on every attempt). */
#include "e2e.h"
#include "harness_pg.h"

#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>

#define INSTANCES 3
#define IN_FLIGHT 64
#define ID_LEN 37 /* a UUID string and its NUL */

static struct receiver rcv;
static struct daemon dmn[INSTANCES];
static char db_dsn[300];

static int setup(void **state)
{
	/* A thread pool answers fast; a thread per connection lets scripted delays overlap
	 * (the kill test keeps many requests waiting on purpose). */
	const char *pool[] = {"--no-bodies", "--threads", "4", "--timestamps", NULL};
	const char *per_connection[] = {"--no-bodies", "--timestamps", NULL};

	if (!harness_pg_wanted())
		return 0;
	memset(dmn, 0, sizeof(dmn));
	assert_int_equal(receiver_start_args(&rcv, *state ? per_connection : pool), 0);
	assert_int_equal(harness_pg_fresh_db(db_dsn, sizeof(db_dsn)), 0);
	return 0;
}

static int teardown(void **state)
{
	for (int i = 0; i < INSTANCES; i++) {
		dmn[i].db[0] = '\0'; /* the database is shared: leave it to the server's end */
		daemon_cleanup(&dmn[i]);
	}
	receiver_stop(&rcv);
	return 0;
}

/* Starts the instances on db_dsn with extra settings (NULL-terminated, may be NULL). */
static void start_cluster(const char *const *extra)
{
	char db[400];
	const char *env[16] = {db, "OUTBOXD_LOG_LEVEL=info", E2E_SHARED_SECRET_KEY, NULL};
	size_t n = 3;

	snprintf(db, sizeof(db), "OUTBOXD_DB=%s", db_dsn);
	for (size_t i = 0; extra && extra[i] && n < 15; i++)
		env[n++] = extra[i];
	env[n] = NULL;
	for (int i = 0; i < INSTANCES; i++)
		assert_int_equal(daemon_start(&dmn[i], env), 0);
}

/* Probe events sent by subscribe_all: a slow start can take more than one round, and
 * every probe is delivered in the end, so each is a successful attempt. */
static long probes_sent;

/* A subscription to everything at path, created on instance 0; then one probe event per
 * instance, so each has shown it fans out to the subscription before the load starts.
 * The receiver is reset afterwards. */
static void subscribe_all(const char *path)
{
	char sub[64];

	probes_sent = 0; /* each test has a fresh database */
	e2e_create_sub(&dmn[0], sub, "{\"name\":\"sink\",\"event_types\":[\"*\"],"
				     "\"endpoint\":\"%s%s\"}", rcv.url, path);
	for (int attempt = 0; attempt < 50; attempt++) {
		assert_int_equal(receiver_reset(&rcv), 0);
		for (int i = 0; i < INSTANCES; i++, probes_sent++)
			json_decref(api_call(&dmn[i], "POST", "/v1/events",
					     "{\"event_type\":\"probe\",\"payload\":{}}", 202));
		if (receiver_wait_count(&rcv, NULL, INSTANCES, 5000) == 0) {
			usleep(200 * 1000);
			if (receiver_count(&rcv, NULL) == INSTANCES)
				break;
		}
	}
	assert_int_equal(receiver_count(&rcv, NULL), INSTANCES);
	/* Probes of an earlier try that were only slow (a loaded machine) may still come:
	 * the load starts once a whole second has passed without one, so they are not
	 * counted as load. */
	for (int quiet = 0; quiet < 20; quiet++) {
		assert_int_equal(receiver_reset(&rcv), 0);
		usleep(1000 * 1000);
		if (receiver_count(&rcv, NULL) == 0)
			break;
	}
	assert_int_equal(receiver_reset(&rcv), 0);
}

/* Sends total events in batches, round-robin over the instances in alive (NULL: all). */
static void send_events(int total, int batch, const int *alive)
{
	for (int sent = 0, k = 0; sent < total; sent += batch, k++) {
		int to = k % INSTANCES;
		char *body = e2e_batch_body(sent, batch);

		if (alive)
			while (!alive[to])
				to = (to + 1) % INSTANCES;
		json_decref(api_call(&dmn[to], "POST", "/v1/events", body, 202));
		free(body);
	}
}

static json_t *stats(void)
{
	json_t *s = receiver_stats(&rcv, NULL);

	assert_non_null(s);
	return s;
}

static long stat_of(json_t *s, const char *key)
{
	return (long)json_integer_value(json_object_get(s, key));
}

/* Waits until the receiver has seen want distinct webhook-ids. */
static long wait_unique(long want, int timeout_ms)
{
	int64_t deadline = harness_now_ms() + timeout_ms;
	long unique = 0;

	while (harness_now_ms() < deadline) {
		json_t *s = stats();

		unique = stat_of(s, "unique_ids");
		json_decref(s);
		if (unique >= want)
			break;
		usleep(100 * 1000);
	}
	return unique;
}

/* Once the store shows nothing pending any more (no NEW, no FAILED). */
static void wait_settled(struct daemon *d)
{
	for (int i = 0; i < 200; i++) {
		json_t *n = e2e_get(d, "/v1/deliveries?status=NEW&limit=1");
		json_t *f = e2e_get(d, "/v1/deliveries?status=FAILED&limit=1");
		size_t left = json_array_size(json_object_get(n, "items")) +
			      json_array_size(json_object_get(f, "items"));

		json_decref(n);
		json_decref(f);
		if (left == 0)
			return;
		usleep(100 * 1000);
	}
	fail_msg("deliveries still pending");
}

/* Delivered (PROCESSED) deliveries whose successful attempt each instance made. */
static void share_per_instance(long per[INSTANCES], long *other)
{
	PGconn *conn = PQconnectdb(db_dsn);
	PGresult *r;

	assert_int_equal(PQstatus(conn), CONNECTION_OK);
	r = PQexec(conn, "SELECT instance, count(*) FROM outboxd.attempts"
			 " WHERE code BETWEEN 200 AND 299 GROUP BY instance");
	assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
	*other = 0;
	for (int i = 0; i < INSTANCES; i++)
		per[i] = 0;
	for (int row = 0; row < PQntuples(r); row++) {
		const char *owner = PQgetvalue(r, row, 0);
		const char *colon = strrchr(owner, ':');
		long n = strtol(PQgetvalue(r, row, 1), NULL, 10);
		int matched = 0;

		for (int i = 0; colon && i < INSTANCES; i++) {
			if (atoi(colon + 1) == (int)dmn[i].pid) {
				per[i] += n;
				matched = 1;
			}
		}
		if (!matched)
			*other += n;
	}
	PQclear(r);
	PQfinish(conn);
}

/* ---- three instances, 20,000 events ------------------------------------------------------- */

static void test_three_instances_share_the_work(void **state)
{
	enum { EVENTS = 20000 };
	const char *extra[] = {"OUTBOXD_MAX_IN_FLIGHT=64", NULL};
	long per[INSTANCES], other, total = 0;
	int64_t t0;

	if (!harness_pg_wanted())
		skip();
	start_cluster(extra);
	subscribe_all("/sink");
	t0 = harness_now_ms();
	send_events(EVENTS, 500, NULL);
	assert_int_equal(wait_unique(EVENTS, 120000), EVENTS);
	wait_settled(&dmn[0]);
	json_t *s = stats();
	fprintf(stderr, "cluster: %d events through 3 instances in %.1f s: %ld requests, "
			"%ld distinct, %ld duplicates\n", EVENTS, (harness_now_ms() - t0) / 1000.0,
		stat_of(s, "count"), stat_of(s, "unique_ids"), stat_of(s, "duplicates"));
	assert_int_equal(stat_of(s, "unique_ids"), EVENTS);
	assert_int_equal(stat_of(s, "duplicates"), 0);
	assert_int_equal(stat_of(s, "count"), EVENTS);
	json_decref(s);

	share_per_instance(per, &other);
	for (int i = 0; i < INSTANCES; i++) {
		fprintf(stderr, "cluster: instance %d (pid %d) delivered %ld\n", i, (int)dmn[i].pid,
			per[i]);
		total += per[i];
	}
	assert_int_equal(other, 0);
	assert_int_equal(total, EVENTS + probes_sent); /* and the probes */
	for (int i = 0; i < INSTANCES; i++)
		assert_true(per[i] >= EVENTS / 50); /* each did a real share, at least 2% */
	for (int i = 0; i < INSTANCES; i++)
		assert_int_equal(daemon_stop(&dmn[i]), 0);
}

/* ---- kill -9 of one instance --------------------------------------------------------------- */

static void test_kill9_one_of_three(void **state)
{
	enum { EVENTS = 2000 };
	/* Leases short enough that the dead instance's work returns within seconds. */
	const char *extra[] = {"OUTBOXD_MAX_IN_FLIGHT=64", "OUTBOXD_LEASE=3s",
			       "OUTBOXD_REAP_INTERVAL=500ms", "OUTBOXD_DELIVERY_TIMEOUT=5s", NULL};
	const int alive[INSTANCES] = {1, 0, 1};

	if (!harness_pg_wanted())
		skip();
	start_cluster(extra);
	subscribe_all("/slow");
	/* Slow answers keep every instance's slots full when the kill comes. */
	assert_int_equal(receiver_script(&rcv, "/slow",
					 "{\"default\":{\"status\":200,\"delay_ms\":100}}"), 0);
	send_events(EVENTS, 250, alive);
	assert_int_equal(receiver_wait_count(&rcv, NULL, EVENTS / 10, 60000), 0);
	daemon_kill9(&dmn[1]);
	long at_kill = receiver_count(&rcv, NULL);

	assert_int_equal(wait_unique(EVENTS, 60000), EVENTS);
	wait_settled(&dmn[0]);
	json_t *s = stats();
	long dups = stat_of(s, "duplicates");

	fprintf(stderr, "kill -9 of 1 of 3 instances: %ld received before the kill, all %d "
			"delivered, %ld duplicates (bound: %d in flight in the killed one)\n",
		at_kill, EVENTS, dups, IN_FLIGHT);
	assert_int_equal(stat_of(s, "unique_ids"), EVENTS);
	assert_true(dups <= IN_FLIGHT);
	json_decref(s);
	assert_int_equal(daemon_stop(&dmn[0]), 0);
	assert_int_equal(daemon_stop(&dmn[2]), 0);
}

/* ---- PostgreSQL restarts -------------------------------------------------------------------- */

struct ingest_loop {
	pthread_mutex_t mu;
	int stop;
	long accepted, unavailable, other;
	char (*ids)[ID_LEN];
	size_t n_ids, cap;
};

/* Sends batches of 20 events round-robin until told to stop, keeping the id of every
 * event acknowledged with 202 and counting 503s. */
static void *ingest_main(void *arg)
{
	struct ingest_loop *l = arg;
	int k = 0;

	for (;;) {
		char url[128], *body = e2e_batch_body(k * 20, 20);
		struct http_resp r;

		pthread_mutex_lock(&l->mu);
		int stop = l->stop;
		pthread_mutex_unlock(&l->mu);
		if (stop) {
			free(body);
			break;
		}
		snprintf(url, sizeof(url), "%s/v1/events", dmn[k % INSTANCES].url);
		http_do("POST", url, HARNESS_INGEST_TOKEN, NULL, body, strlen(body), &r);
		pthread_mutex_lock(&l->mu);
		if (r.status == 202) {
			json_t *ids = json_object_get(r.json, "ids");

			for (size_t i = 0; i < json_array_size(ids); i++) {
				if (l->n_ids == l->cap) {
					l->cap = l->cap ? l->cap * 2 : 1024;
					l->ids = realloc(l->ids, l->cap * ID_LEN);
				}
				snprintf(l->ids[l->n_ids++], ID_LEN, "%s",
					 json_string_value(json_array_get(ids, i)));
			}
			l->accepted += (long)json_array_size(ids);
		} else if (r.status == 503) {
			l->unavailable++;
		} else {
			l->other++;
			fprintf(stderr, "ingest during the outage: %ld %s\n", r.status,
				r.status ? r.body : r.error);
		}
		pthread_mutex_unlock(&l->mu);
		http_resp_free(&r);
		free(body);
		k++;
		usleep(10 * 1000);
	}
	return NULL;
}

static long accepted_so_far(struct ingest_loop *l)
{
	pthread_mutex_lock(&l->mu);
	long n = l->accepted;
	pthread_mutex_unlock(&l->mu);
	return n;
}

static int id_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* Lines of the daemon's log containing text. */
static int log_lines_with(struct daemon *d, const char *text)
{
	char path[300], line[4096];
	int n = 0;
	FILE *f = fopen(daemon_log_path(d, path, sizeof(path)), "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, text) != NULL;
	fclose(f);
	return n;
}

static void test_database_restart_mid_run(void **state)
{
	struct ingest_loop l = {.mu = PTHREAD_MUTEX_INITIALIZER};
	const char *extra[] = {"OUTBOXD_MAX_IN_FLIGHT=64", NULL};
	pid_t pids[INSTANCES];
	char (*received)[ID_LEN] = NULL;
	size_t n_received = 0, cap = 0, missing = 0;
	pthread_t th;

	if (!harness_pg_wanted())
		skip();
	start_cluster(extra);
	subscribe_all("/sink");
	for (int i = 0; i < INSTANCES; i++)
		pids[i] = dmn[i].pid;

	assert_int_equal(pthread_create(&th, NULL, ingest_main, &l), 0);
	while (accepted_so_far(&l) < 1000)
		usleep(20 * 1000);
	/* Down for 2 s: fast shutdown, as an operator's restart or a failover does. */
	assert_int_equal(pg_server_restart(harness_pg(), 2000), 0);
	long after_restart = accepted_so_far(&l);
	while (accepted_so_far(&l) < after_restart + 1000)
		usleep(20 * 1000);
	pthread_mutex_lock(&l.mu);
	l.stop = 1;
	pthread_mutex_unlock(&l.mu);
	pthread_join(th, NULL);
	fprintf(stderr, "database restart: %ld events acknowledged, %ld requests answered 503, "
			"%ld other answers\n", l.accepted, l.unavailable, l.other);
	assert_true(l.unavailable >= 1);
	assert_int_equal(l.other, 0);

	/* Every acknowledged event arrives (others may too: a 503 whose commit had in fact
	 * succeeded is the client's to retry, with source_event_id for idempotency). */
	assert_true(wait_unique(l.accepted, 60000) >= l.accepted);
	{
		char url[128];
		struct http_resp r;

		snprintf(url, sizeof(url), "%s/_control/timestamps", rcv.url);
		assert_int_equal(http_do("GET", url, NULL, NULL, NULL, 0, &r), 0);
		for (char *line = r.body; line && *line;) {
			char *end = strchr(line, '\n');

			if (n_received == cap) {
				cap = cap ? cap * 2 : 4096;
				received = realloc(received, cap * ID_LEN);
			}
			snprintf(received[n_received], ID_LEN, "%.*s",
				 (int)strcspn(line, " \n"), line);
			n_received++;
			line = end ? end + 1 : NULL;
		}
		http_resp_free(&r);
	}
	qsort(received, n_received, ID_LEN, id_cmp);
	for (size_t i = 0; i < l.n_ids; i++)
		missing += !bsearch(l.ids[i], received, n_received, ID_LEN, id_cmp);
	assert_int_equal(missing, 0);

	/* The same processes, ready again, each having logged the outage once. */
	for (int i = 0; i < INSTANCES; i++) {
		char url[128];
		struct http_resp r;

		assert_int_equal(dmn[i].pid, pids[i]);
		assert_int_equal(kill(dmn[i].pid, 0), 0);
		snprintf(url, sizeof(url), "%s/readyz", dmn[i].url);
		assert_int_equal(http_do("GET", url, NULL, NULL, NULL, 0, &r), 0);
		assert_int_equal(r.status, 200);
		http_resp_free(&r);
		assert_int_equal(log_lines_with(&dmn[i], "postgres: database unavailable"), 1);
		assert_int_equal(log_lines_with(&dmn[i], "postgres: database reachable again"), 1);
	}
	wait_settled(&dmn[0]);
	for (int i = 0; i < INSTANCES; i++)
		assert_int_equal(daemon_stop(&dmn[i]), 0);
	free(received);
	free(l.ids);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_three_instances_share_the_work, setup, teardown),
		{"test_kill9_one_of_three", test_kill9_one_of_three, setup, teardown,
		 (void *)"slow receiver"},
		cmocka_unit_test_setup_teardown(test_database_restart_mid_run, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
