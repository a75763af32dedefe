/* test_spool.c: the catastrophic-failure spool against a real outage, on both
 * backends (e2e/test_spool and e2e-pg/test_spool). The outage: PostgreSQL halted; for
 * SQLite, another process holding the database's write lock longer than outboxd waits
 * for it (busy_timeout, 5 s), as a stuck producer or a backup tool could.
 *
 *  - with OUTBOXD_SPOOL set, the store goes away while events stream in: every request
 *    is answered 202 (none 503), and once it is back every acknowledged event reaches
 *    each of two subscriptions exactly once;
 *  - deliveries that finish while the store is down: their results go to the spool and
 *    are applied when it returns, so nothing is sent twice;
 *  - a spool left by an earlier run, with a damaged record at its end: the good record
 *    before it is replayed and delivered, the damaged one is reported in the log, moved
 *    to <spool>.corrupt-<time> and never delivered.
 *
 * Each subscription has its own receiver, which counts webhook-ids (the event id). */
#include "e2e.h"
#include "harness_pg.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include "store/spool.h"

#define ID_LEN 37 /* a UUID string and its NUL */

static struct receiver rcv_a, rcv_b, rcv_slow;
static struct daemon dmn;
static char *spool_dir;
static char spool_file[300];

/* ---- the outage --------------------------------------------------------------------- */

static sqlite3 *lock_holder; /* SQLite: the connection holding the write lock */

/* Takes the store away from the daemon: PostgreSQL halted, or SQLite's write lock held. */
static void store_down(void)
{
	if (harness_pg_wanted()) {
		assert_int_equal(pg_server_halt(harness_pg()), 0);
		return;
	}
	assert_int_equal(sqlite3_open_v2(e2e_db_path(&dmn), &lock_holder, SQLITE_OPEN_READWRITE,
					 NULL),
			 SQLITE_OK);
	sqlite3_busy_timeout(lock_holder, 10000); /* the daemon may be writing right now */
	assert_int_equal(sqlite3_exec(lock_holder, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
}

static void store_up(void)
{
	if (harness_pg_wanted()) {
		assert_int_equal(pg_server_start(harness_pg()), 0);
		return;
	}
	assert_int_equal(sqlite3_exec(lock_holder, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(lock_holder);
	lock_holder = NULL;
}

static int setup(void **state)
{
	const char *args[] = {"--no-bodies", "--threads", "4", NULL};

	memset(&dmn, 0, sizeof(dmn));
	memset(&rcv_slow, 0, sizeof(rcv_slow));
	assert_int_equal(receiver_start_args(&rcv_a, args), 0);
	assert_int_equal(receiver_start_args(&rcv_b, args), 0);
	assert_non_null(spool_dir = harness_tmpdir("outboxd-spool"));
	snprintf(spool_file, sizeof(spool_file), "%s/ingest.spool", spool_dir);
	return 0;
}

static int teardown(void **state)
{
	if (lock_holder) {
		sqlite3_close(lock_holder);
		lock_holder = NULL;
	}
	daemon_cleanup(&dmn);
	receiver_stop(&rcv_a);
	receiver_stop(&rcv_b);
	receiver_stop(&rcv_slow);
	if (getenv("HARNESS_KEEP"))
		fprintf(stderr, "kept %s\n", spool_dir);
	else
		harness_rmrf(spool_dir);
	free(spool_dir);
	return 0;
}

/* extra: one more "KEY=VALUE" or NULL. */
static void start_daemon_with(const char *extra)
{
	char spool_env[400];
	const char *env[] = {spool_env, "OUTBOXD_LOG_LEVEL=info", extra, NULL};

	snprintf(spool_env, sizeof(spool_env), "OUTBOXD_SPOOL=%s", spool_file);
	assert_int_equal(daemon_start(&dmn, env), 0);
}

static void start_daemon(void)
{
	start_daemon_with(NULL);
}

static long stat_of(struct receiver *r, const char *key)
{
	json_t *s = receiver_stats(r, NULL);
	long v;

	assert_non_null(s);
	v = (long)json_integer_value(json_object_get(s, key));
	json_decref(s);
	return v;
}

static long wait_unique(struct receiver *r, long want, int timeout_ms)
{
	int64_t deadline = harness_now_ms() + timeout_ms;
	long unique = 0;

	while (harness_now_ms() < deadline) {
		unique = stat_of(r, "unique_ids");
		if (unique >= want)
			break;
		usleep(100 * 1000);
	}
	return unique;
}

/* Lines of the daemon's log containing text. */
static int log_lines_with(const char *text)
{
	char path[300], line[4096];
	int n = 0;
	FILE *f = fopen(daemon_log_path(&dmn, path, sizeof(path)), "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, text) != NULL;
	fclose(f);
	return n;
}

static int logged(void *text)
{
	return log_lines_with(text) >= 1;
}

/* 1 once nothing is left that could be sent again: the store shows *(long *)want
 * deliveries PROCESSED, none waiting or leased, and the spool is empty. Right after an
 * outage the API may still answer 503 while it reconnects: not settled yet. */
static int settled(void *want)
{
	char url[256];
	struct http_resp r;
	struct stat st;
	int done = 0;

	snprintf(url, sizeof(url), "%s/v1/stats", dmn.url);
	if (http_do("GET", url, dmn.token, NULL, NULL, 0, &r) == 0 && r.status == 200) {
		json_t *by = json_object_get(r.json, "deliveries");
		done = json_integer_value(json_object_get(by, "PROCESSED")) == *(long *)want &&
		       json_integer_value(json_object_get(by, "NEW")) == 0 &&
		       json_integer_value(json_object_get(by, "FAILED_RETRYING")) == 0 &&
		       json_integer_value(json_object_get(r.json, "in_flight")) == 0 &&
		       stat(spool_file, &st) == 0 && st.st_size == 0;
	}
	http_resp_free(&r);
	return done;
}

/* ---- an outage under load ------------------------------------------------------------ */

struct ingest_loop {
	pthread_mutex_t mu;
	int stop;
	long accepted, unavailable, other;
};

/* Sends batches of 10 events until told to stop, counting the answers. */
static void *ingest_main(void *arg)
{
	struct ingest_loop *l = arg;
	char url[128];

	snprintf(url, sizeof(url), "%s/v1/events", dmn.url);
	for (int k = 0;; k++) {
		char *body = e2e_batch_body(k * 10, 10);
		struct http_resp r;

		pthread_mutex_lock(&l->mu);
		int stop = l->stop;
		pthread_mutex_unlock(&l->mu);
		if (stop) {
			free(body);
			break;
		}
		http_do("POST", url, HARNESS_INGEST_TOKEN, NULL, body, strlen(body), &r);
		pthread_mutex_lock(&l->mu);
		if (r.status == 202) {
			l->accepted += (long)json_array_size(json_object_get(r.json, "ids"));
		} else if (r.status == 503) {
			if (l->unavailable++ < 3) /* what refused it, for the log */
				fprintf(stderr, "ingest during the outage: 503 %s\n", r.body);
		} else {
			l->other++;
			fprintf(stderr, "ingest during the outage: %ld %s\n", r.status,
				r.status ? r.body : r.error);
		}
		pthread_mutex_unlock(&l->mu);
		http_resp_free(&r);
		free(body);
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

static void stop_ingest(struct ingest_loop *l, pthread_t th)
{
	pthread_mutex_lock(&l->mu);
	l->stop = 1;
	pthread_mutex_unlock(&l->mu);
	pthread_join(th, NULL);
}

struct accepted_ctx {
	struct ingest_loop *l;
	long n;
};

static int accepted_at_least(void *arg)
{
	struct accepted_ctx *c = arg;
	return accepted_so_far(c->l) >= c->n;
}

/* Waits up to timeout_ms for pred(arg) while the ingest thread runs; on a timeout stops
 * the thread (it uses l) before failing the test. */
static void await_ingesting(struct ingest_loop *l, pthread_t th, int (*pred)(void *), void *arg,
			    int timeout_ms, const char *what)
{
	if (harness_wait(pred, arg, timeout_ms) == 0)
		return;
	stop_ingest(l, th);
	fprintf(stderr, "spool outage: timed out waiting for %s (%ld acknowledged)\n", what,
		l->accepted);
	fail();
}

static void test_outage_is_spooled_and_replayed(void **state)
{
	struct ingest_loop l = {.mu = PTHREAD_MUTEX_INITIALIZER};
	char sub_a[64], sub_b[64];
	pthread_t th;

	start_daemon();
	e2e_create_sub(&dmn, sub_a, "{\"name\":\"a\",\"event_types\":[\"*\"],\"endpoint\":\"%s/a\"}",
		       rcv_a.url);
	e2e_create_sub(&dmn, sub_b, "{\"name\":\"b\",\"event_types\":[\"*\"],\"endpoint\":\"%s/b\"}",
		       rcv_b.url);

	assert_int_equal(pthread_create(&th, NULL, ingest_main, &l), 0);
	struct accepted_ctx want = {&l, 300};
	await_ingesting(&l, th, accepted_at_least, &want, 30000, "300 events before the outage");
	/* Down for 2 s at least, and until ingest has gone to the spool and 50 more events
	 * were acknowledged from there: PostgreSQL with a fast shutdown, as an operator's
	 * restart or a failover does; SQLite's lock held past the first writer's 5 s busy
	 * wait (the store reports itself unavailable after it, and the others fail at once
	 * for a while). */
	long before = accepted_so_far(&l);
	int64_t down_at = harness_now_ms();
	store_down();
	await_ingesting(&l, th, logged, "accepting ingest into the spool", 60000,
			"ingest to go to the spool");
	want.n = accepted_so_far(&l) + 50;
	await_ingesting(&l, th, accepted_at_least, &want, 30000, "50 events spooled");
	while (harness_now_ms() < down_at + 2000)
		usleep(20 * 1000);
	store_up();
	long during = accepted_so_far(&l) - before;
	want.n = accepted_so_far(&l) + 300;
	await_ingesting(&l, th, accepted_at_least, &want, 60000, "300 events after the outage");
	stop_ingest(&l, th);
	fprintf(stderr, "spool outage: %ld events acknowledged (%ld during the outage), "
			"%ld requests answered 503, %ld other answers\n",
		l.accepted, during, l.unavailable, l.other);
	assert_int_equal(l.unavailable, 0);
	assert_int_equal(l.other, 0);
	assert_true(during > 0);

	/* Every acknowledged event reaches both subscriptions, and only once. */
	assert_int_equal(wait_unique(&rcv_a, l.accepted, 60000), l.accepted);
	assert_int_equal(wait_unique(&rcv_b, l.accepted, 60000), l.accepted);
	/* every delivery recorded and none left to send: no duplicate can come later */
	long deliveries = 2 * l.accepted;
	assert_int_equal(harness_wait(settled, &deliveries, 30000), 0);
	fprintf(stderr, "spool outage: receiver a %ld unique, %ld duplicates; b %ld unique, "
			"%ld duplicates\n",
		stat_of(&rcv_a, "unique_ids"), stat_of(&rcv_a, "duplicates"),
		stat_of(&rcv_b, "unique_ids"), stat_of(&rcv_b, "duplicates"));
	assert_int_equal(stat_of(&rcv_a, "unique_ids"), l.accepted);
	assert_int_equal(stat_of(&rcv_b, "unique_ids"), l.accepted);
	assert_int_equal(stat_of(&rcv_a, "duplicates"), 0);
	assert_int_equal(stat_of(&rcv_b, "duplicates"), 0);

	/* Logged once when spooling started and once when the spool was drained. */
	assert_int_equal(log_lines_with("accepting ingest into the spool"), 1);
	assert_true(log_lines_with("spool: drained") >= 1);
	struct stat st;
	assert_int_equal(stat(spool_file, &st), 0);
	assert_int_equal(st.st_size, 0);
	assert_int_equal(daemon_stop(&dmn), 0);
}

/* ---- results written while the store is down --------------------------------------- */

static void test_results_are_spooled_during_outage(void **state)
{
	/* A thread per connection: every slow request overlaps the others. */
	const char *args[] = {"--no-bodies", NULL};
	char sub[64], ev[64];
	int64_t deadline;

	assert_int_equal(receiver_start_args(&rcv_slow, args), 0);
	assert_int_equal(receiver_script(&rcv_slow, "/slow",
					 "{\"responses\":[],\"default\":{\"status\":200,"
					 "\"delay_ms\":3000}}"), 0);
	/* A try waits for the slow answer rather than timing out (1 s by default). */
	start_daemon_with("OUTBOXD_DELIVERY_TIMEOUT=10s");
	e2e_create_sub(&dmn, sub, "{\"name\":\"slow\",\"event_types\":[\"*\"],"
				  "\"endpoint\":\"%s/slow\"}", rcv_slow.url);
	for (int i = 0; i < 40; i++)
		e2e_send(&dmn, ev, "{\"event_type\":\"slow.event\",\"payload\":{}}");
	/* Requests are in flight (claimed, waiting 3 s on the receiver) when the database
	 * stops; they finish while it is down, and their results go to the spool. */
	assert_int_equal(receiver_wait_count(&rcv_slow, "/slow", 1, 20000), 0);
	store_down();
	/* SQLite: 3 s answers, then the first writer's busy wait */
	assert_int_equal(harness_wait(logged, "writing results to the spool", 40000), 0);
	assert_int_equal(log_lines_with("writing results to the spool"), 1);
	store_up();

	/* Once the results are replayed, nothing is left pending and nothing is sent again
	 * (the leases, 2 minutes, were still held by this instance). */
	deadline = harness_now_ms() + 30000;
	for (;;) {
		/* Right after the restart the API may still answer 503 (its connection
		 * reconnects with a backoff): that is the outage, not a failure. */
		char url[256];
		struct http_resp r = {0};
		size_t done = 0;
		snprintf(url, sizeof(url), "%s/v1/deliveries?status=PROCESSED&limit=100", dmn.url);
		if (http_do("GET", url, dmn.token, NULL, NULL, 0, &r) == 0 && r.status == 200) {
			json_t *n = json_loads(r.body, 0, NULL);
			done = json_array_size(json_object_get(n, "items"));
			json_decref(n);
		} else {
			assert_true(r.status == 503 || r.status == 0);
		}
		http_resp_free(&r);
		if (done == 40)
			break;
		assert_true(harness_now_ms() < deadline);
		usleep(200 * 1000);
	}
	/* every delivery recorded and none left to send: no duplicate can come later */
	long deliveries = 40;
	assert_int_equal(harness_wait(settled, &deliveries, 30000), 0);
	fprintf(stderr, "results during the outage: %ld requests, %ld unique, %ld duplicates\n",
		stat_of(&rcv_slow, "count"), stat_of(&rcv_slow, "unique_ids"),
		stat_of(&rcv_slow, "duplicates"));
	assert_int_equal(stat_of(&rcv_slow, "unique_ids"), 40);
	assert_int_equal(stat_of(&rcv_slow, "duplicates"), 0);
	assert_true(log_lines_with("delivery results") >= 1);
	assert_int_equal(daemon_stop(&dmn), 0);
}

/* ---- a damaged spool from an earlier run --------------------------------------------- */

/* Appends one spooled event for subscription sub, with the given id, as the writer
 * would have during an outage. */
static void spool_event(struct spool *sp, const char *id, const char *sub)
{
	char subs[1][UUID_STR_LEN];
	struct store_event_in ev = {0};
	void *rec;
	size_t len;

	snprintf(ev.id, sizeof(ev.id), "%s", id);
	snprintf(subs[0], sizeof(subs[0]), "%s", sub);
	ev.event_type = "spooled.event";
	ev.source = "";
	ev.content_type = "application/json";
	ev.payload = "{\"from\":\"the spool\"}";
	ev.payload_len = strlen(ev.payload);
	ev.created_at = (int64_t)time(NULL) * 1000;
	ev.subscription_ids = (const char(*)[UUID_STR_LEN])subs;
	ev.n_subscriptions = 1;
	assert_int_equal(spool_encode_events(&ev, 1, &rec, &len), 0);
	assert_int_equal(spool_append(sp, SPOOL_REC_EVENTS, rec, len), SPOOL_OK);
	free(rec);
}

static int corrupt_files(void)
{
	DIR *d = opendir(spool_dir);
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d)))
		n += strstr(e->d_name, "ingest.spool.corrupt-") != NULL;
	if (d)
		closedir(d);
	return n;
}

static void test_corrupt_tail_is_reported_not_replayed(void **state)
{
	const char *good = "0190a000-0000-7000-8000-000000000001";
	const char *bad = "0190a000-0000-7000-8000-000000000002"; /* see the GETs below */
	char sub[64], line[128];
	struct spool *sp;
	struct stat st;

	/* A first run creates the subscription the spooled events fan out to. */
	start_daemon();
	e2e_create_sub(&dmn, sub, "{\"name\":\"a\",\"event_types\":[\"*\"],\"endpoint\":\"%s/a\"}",
		       rcv_a.url);
	assert_int_equal(daemon_stop(&dmn), 0);

	/* What it left in the spool: one good record, then one damaged in its payload. */
	assert_int_equal(spool_open(spool_file, &sp, NULL), SPOOL_OK);
	spool_event(sp, good, sub);
	off_t bad_at = (off_t)spool_size(sp);
	spool_event(sp, bad, sub);
	spool_close(sp);
	int fd = open(spool_file, O_RDWR);
	unsigned char c;
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &c, 1, bad_at + SPOOL_HEADER_LEN + 60), 1);
	c ^= 0x01;
	assert_int_equal(pwrite(fd, &c, 1, bad_at + SPOOL_HEADER_LEN + 60), 1);
	close(fd);

	start_daemon();
	/* The good record is replayed and delivered... */
	assert_int_equal(receiver_wait_count(&rcv_a, "/a", 1, 20000), 0);
	json_decref(api_call(&dmn, "GET", "/v1/events/0190a000-0000-7000-8000-000000000001",
			     NULL, 200));
	/* ...the damaged one is reported, moved aside and never sent. */
	snprintf(line, sizeof(line), "is corrupt at byte %lld (crc mismatch) after 1 good",
		 (long long)bad_at);
	assert_int_equal(log_lines_with(line), 1);
	assert_int_equal(corrupt_files(), 1);
	/* the replay is over (one delivery, processed; the spool empty) and the damaged
	 * event is not in the store: nothing can send it later */
	long deliveries = 1;
	assert_int_equal(harness_wait(settled, &deliveries, 20000), 0);
	json_decref(api_call(&dmn, "GET", "/v1/events/0190a000-0000-7000-8000-000000000002",
			     NULL, 404));
	assert_int_equal(receiver_count(&rcv_a, "/a"), 1);
	assert_int_equal(stat_of(&rcv_a, "unique_ids"), 1);
	assert_int_equal(stat(spool_file, &st), 0);
	assert_int_equal(st.st_size, 0);
	assert_int_equal(daemon_stop(&dmn), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_outage_is_spooled_and_replayed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_results_are_spooled_during_outage, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_corrupt_tail_is_reported_not_replayed, setup,
						teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
