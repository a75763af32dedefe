/* test_spool_replay.c: the operator's side of the spool (spooled work re-inserted by
 * hand after the fault is fixed: `outboxd spool inspect|replay`), on both backends.
 *
 *  - a spool file left by a stopped instance (written here with spool_append, as the
 *    writer does during an outage) is listed by `outboxd spool inspect` (text and
 *    --json), and `outboxd spool replay FILE` re-inserts it into the store of a running
 *    daemon, which delivers every event once; a second replay inserts nothing (all
 *    duplicates) and nothing is delivered twice; the file is never changed;
 *  - a file damaged in its middle: inspect lists the good records before and after the
 *    damage and the damaged stretch; replay inserts exactly those, the damaged event is
 *    never stored;
 *  - spooled results are applied where the lease of the instance that spooled them is
 *    still there and has expired, never over a live lease;
 *  - a daemon started on a spool with a damaged tail shows the damage in GET /v1/stats
 *    and /metrics, and the `.corrupt-*` file it moved aside can be inspected. */
#include "e2e.h"
#include "harness_pg.h"

#include <fcntl.h>
#include <sys/stat.h>

#include "store/spool.h"
#include "store/store.h"

static struct receiver rcv;
static struct daemon dmn;
static char *work_dir;
static char spool_file[300];
static char sub_id[64];

static int setup(void **state)
{
	memset(&dmn, 0, sizeof(dmn));
	assert_int_equal(receiver_start(&rcv), 0);
	assert_non_null(work_dir = harness_tmpdir("outboxd-spool-replay"));
	snprintf(spool_file, sizeof(spool_file), "%s/old-machine.spool", work_dir);
	return 0;
}

static int teardown(void **state)
{
	daemon_cleanup(&dmn);
	receiver_stop(&rcv);
	if (getenv("HARNESS_KEEP"))
		fprintf(stderr, "kept %s\n", work_dir);
	else
		harness_rmrf(work_dir);
	free(work_dir);
	return 0;
}

static void start_daemon(const char *spool)
{
	char spool_env[400];
	const char *env[] = {spool_env, NULL};

	snprintf(spool_env, sizeof(spool_env), "OUTBOXD_SPOOL=%s", spool ? spool : "");
	assert_int_equal(daemon_start(&dmn, spool ? env : NULL), 0);
}

static void create_sub(void)
{
	e2e_create_sub(&dmn, sub_id,
		       "{\"name\":\"a\",\"event_types\":[\"*\"],\"endpoint\":\"%s/a\"}", rcv.url);
}

/* An event id of this test: the suffix makes it unique and easy to find. */
static void event_id(char out[UUID_STR_LEN], int n)
{
	snprintf(out, UUID_STR_LEN, "0190b000-0000-7000-8000-%012d", n);
}

/* Appends one events record holding events first..first+count-1, for sub_id. */
static void spool_events(struct spool *sp, int first, int count)
{
	char subs[1][UUID_STR_LEN];
	struct store_event_in ev[8];
	void *rec;
	size_t len;

	assert_true(count <= 8);
	snprintf(subs[0], sizeof(subs[0]), "%.36s", sub_id);
	memset(ev, 0, sizeof(ev));
	for (int i = 0; i < count; i++) {
		event_id(ev[i].id, first + i);
		ev[i].event_type = "spooled.event";
		ev[i].source = "";
		ev[i].content_type = "application/json";
		ev[i].payload = "{\"from\":\"a dead machine\"}";
		ev[i].payload_len = strlen(ev[i].payload);
		ev[i].created_at = (int64_t)time(NULL) * 1000;
		ev[i].subscription_ids = (const char(*)[UUID_STR_LEN])subs;
		ev[i].n_subscriptions = 1;
	}
	assert_int_equal(spool_encode_events(ev, (size_t)count, &rec, &len), 0);
	assert_int_equal(spool_append(sp, SPOOL_REC_EVENTS, rec, len), SPOOL_OK);
	free(rec);
}

/* A results record for a delivery this store never had: it cannot be applied. */
static void spool_unknown_result(struct spool *sp)
{
	struct store_result r = {0};
	void *rec;
	size_t len;

	r.delivery_id = "0190b000-0000-7000-8000-ffffffffffff";
	r.status = DELIVERY_PROCESSED;
	r.attempt_count = 1;
	r.processed_at = (int64_t)time(NULL) * 1000;
	assert_int_equal(spool_encode_results(&r, 1, &rec, &len), 0);
	assert_int_equal(spool_append(sp, SPOOL_REC_RESULTS, rec, len), SPOOL_OK);
	free(rec);
}

/* Runs `outboxd spool ARGS` against dmn's store; stdout and stderr into out. */
static int spool_cmd(char *out, size_t len, const char *args)
{
	char cmd[2048];

	snprintf(cmd, sizeof(cmd), "OUTBOXD_DB='%s' OUTBOXD_DATA_DIR='%s' %s spool %s 2>&1",
		 dmn.db, dmn.dir, getenv("OUTBOXD_BIN"), args);
	return e2e_run(cmd, out, len);
}

static off_t size_of(const char *path)
{
	struct stat st;
	return stat(path, &st) ? -1 : st.st_size;
}

static void assert_contains(const char *text, const char *needle)
{
	if (!strstr(text, needle))
		fail_msg("expected \"%s\" in:\n%s", needle, text);
}

static void test_inspect_and_replay_into_running_daemon(void **state)
{
	char out[16384], args[512], id[UUID_STR_LEN];
	struct spool *sp;

	start_daemon(NULL);
	create_sub();
	/* What the dead machine left: two ingest groups and a result. */
	assert_int_equal(spool_open(spool_file, &sp, NULL), SPOOL_OK);
	spool_events(sp, 1, 2);
	spool_unknown_result(sp);
	spool_events(sp, 3, 1);
	spool_close(sp);
	off_t size = size_of(spool_file);

	snprintf(args, sizeof(args), "inspect %s", spool_file);
	assert_int_equal(spool_cmd(out, sizeof(out), args), 0);
	for (int i = 1; i <= 3; i++) {
		event_id(id, i);
		assert_contains(out, id);
	}
	assert_contains(out, "spooled.event");
	assert_contains(out, "0190b000-0000-7000-8000-ffffffffffff  PROCESSED");
	assert_contains(out, "3 records (3 events, 1 delivery results), 0 damaged");

	snprintf(args, sizeof(args), "inspect --json %s", spool_file);
	assert_int_equal(spool_cmd(out, sizeof(out), args), 0);
	json_t *j = json_loads(out, 0, NULL);
	assert_non_null(j);
	json_t *sum = json_object_get(j, "summary");
	assert_int_equal(json_integer_value(json_object_get(sum, "records")), 3);
	assert_int_equal(json_integer_value(json_object_get(sum, "events")), 3);
	assert_int_equal(json_integer_value(json_object_get(sum, "damaged")), 0);
	json_t *first = json_array_get(json_object_get(j, "records"), 0);
	assert_string_equal(json_string_value(json_object_get(first, "type")), "events");
	assert_int_equal(json_integer_value(json_object_get(first, "offset")), 0);
	event_id(id, 2);
	assert_string_equal(json_string_value(json_object_get(
				    json_array_get(json_object_get(first, "events"), 1), "id")),
			    id);
	json_decref(j);

	/* Into the running daemon's store: it delivers each event once. */
	snprintf(args, sizeof(args), "replay %s", spool_file);
	assert_int_equal(spool_cmd(out, sizeof(out), args), 0);
	assert_contains(out, "events inserted     3\n");
	assert_contains(out, "already stored      0");
	assert_contains(out, "results applied     0 of 1");
	assert_contains(out, "you may delete it");
	assert_int_equal(receiver_wait_count(&rcv, "/a", 3, 20000), 0);
	for (int i = 1; i <= 3; i++) {
		event_id(id, i);
		json_decref(e2e_get(&dmn, "/v1/events/%s", id));
	}

	/* Again: nothing new, nothing sent twice, the file as it was. */
	assert_int_equal(spool_cmd(out, sizeof(out), args), 0);
	assert_contains(out, "events inserted     0\n");
	assert_contains(out, "already stored      3");
	usleep(2500 * 1000); /* more than the daemon's idle claim poll (1 s) */
	assert_int_equal(receiver_count(&rcv, "/a"), 3);
	assert_int_equal(size_of(spool_file), size);
	assert_int_equal(daemon_stop(&dmn), 0);
}

static void test_damaged_file_is_inspected_and_replayed_around_the_damage(void **state)
{
	char out[16384], args[512], id[UUID_STR_LEN];
	struct spool *sp;

	start_daemon(NULL);
	create_sub();
	assert_int_equal(spool_open(spool_file, &sp, NULL), SPOOL_OK);
	spool_events(sp, 11, 1);
	off_t bad = (off_t)spool_size(sp);
	spool_events(sp, 12, 1);
	off_t after = (off_t)spool_size(sp);
	spool_events(sp, 13, 1);
	spool_close(sp);
	/* Bytes flipped in the middle record's payload. */
	int fd = open(spool_file, O_RDWR);
	unsigned char junk[4] = {0xde, 0xad, 0xbe, 0xef};
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, junk, sizeof(junk), bad + SPOOL_HEADER_LEN + 40), 4);
	close(fd);

	snprintf(args, sizeof(args), "inspect %s", spool_file);
	assert_int_equal(spool_cmd(out, sizeof(out), args), 0);
	event_id(id, 11);
	assert_contains(out, id);
	event_id(id, 13);
	assert_contains(out, id);
	event_id(id, 12);
	assert_null(strstr(out, id));
	char line[128];
	snprintf(line, sizeof(line), "%-12lld DAMAGED  %lld bytes skipped (crc mismatch)",
		 (long long)bad, (long long)(after - bad));
	assert_contains(out, line);
	assert_contains(out, "2 records (2 events, 0 delivery results), 1 damaged");

	snprintf(args, sizeof(args), "replay %s", spool_file);
	assert_int_equal(spool_cmd(out, sizeof(out), args), 0);
	assert_contains(out, "events inserted     2\n");
	assert_contains(out, "damaged stretches   1");
	assert_int_equal(receiver_wait_count(&rcv, "/a", 2, 20000), 0);
	json_decref(e2e_get(&dmn, "/v1/events/0190b000-0000-7000-8000-000000000013"));
	json_decref(api_call(&dmn, "GET", "/v1/events/0190b000-0000-7000-8000-000000000012",
			     NULL, 404));
	usleep(1500 * 1000);
	assert_int_equal(receiver_count(&rcv, "/a"), 2);

	/* A store that is not there (a mistyped db) is not created: exit 1, nothing stored. */
	snprintf(args, sizeof(args), "replay %s --db sqlite:%s/typo.db", spool_file, work_dir);
	assert_int_equal(spool_cmd(out, sizeof(out), args), 1);
	assert_contains(out, "typo.db (No such file or directory): give the db that outboxd");
	snprintf(args, sizeof(args), "%s/typo.db", work_dir);
	assert_int_equal(size_of(args), -1);

	/* A file that is not there: a clear error, exit 1. */
	snprintf(args, sizeof(args), "inspect %s/absent.spool", work_dir);
	assert_int_equal(spool_cmd(out, sizeof(out), args), 1);
	assert_contains(out, "absent.spool: No such file or directory");
	assert_int_equal(daemon_stop(&dmn), 0);
}

static void test_stats_and_metrics_show_spool_damage(void **state)
{
	char out[16384], args[4200];
	struct spool *sp;

	/* A first run for the subscription; then its spool gets a good and a bad record. */
	start_daemon(spool_file);
	create_sub();
	json_t *st = e2e_get(&dmn, "/v1/stats");
	json_t *spool = json_object_get(st, "spool");
	assert_true(json_is_true(json_object_get(spool, "enabled")));
	assert_int_equal(json_integer_value(json_object_get(json_object_get(spool, "corrupt"),
							    "count")), 0);
	assert_true(json_is_null(json_object_get(json_object_get(spool, "corrupt"), "last")));
	json_decref(st);
	assert_int_equal(daemon_stop(&dmn), 0);

	assert_int_equal(spool_open(spool_file, &sp, NULL), SPOOL_OK);
	spool_events(sp, 21, 1);
	off_t bad = (off_t)spool_size(sp);
	spool_events(sp, 22, 1);
	spool_close(sp);
	off_t end = size_of(spool_file);
	int fd = open(spool_file, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "XXXX", 4, bad + SPOOL_HEADER_LEN + 40), 4);
	close(fd);

	start_daemon(spool_file);
	assert_int_equal(receiver_wait_count(&rcv, "/a", 1, 20000), 0);
	st = e2e_get(&dmn, "/v1/stats");
	spool = json_object_get(st, "spool");
	json_t *corrupt = json_object_get(spool, "corrupt");
	json_t *last = json_object_get(corrupt, "last");
	assert_string_equal(json_string_value(json_object_get(spool, "path")), spool_file);
	assert_int_equal(json_integer_value(json_object_get(corrupt, "count")), 1);
	assert_int_equal(json_integer_value(json_object_get(last, "offset")), bad);
	assert_int_equal(json_integer_value(json_object_get(last, "bytes")), end - bad);
	assert_string_equal(json_string_value(json_object_get(last, "reason")), "crc mismatch");
	assert_true(json_is_string(json_object_get(last, "at")));
	const char *moved = json_string_value(json_object_get(last, "moved_to"));
	assert_non_null(moved);
	assert_non_null(strstr(moved, "old-machine.spool.corrupt-"));

	/* The moved-aside tail: one damaged stretch, nothing to re-insert. */
	snprintf(args, sizeof(args), "inspect %s", moved);
	assert_int_equal(spool_cmd(out, sizeof(out), args), 0);
	assert_contains(out, "0 records (0 events, 0 delivery results), 1 damaged");
	json_decref(st);

	struct http_resp r;
	char url[128];
	snprintf(url, sizeof(url), "%s/metrics", dmn.url);
	assert_int_equal(http_do("GET", url, dmn.token, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "\noutboxd_spool_corrupt_total 1\n"));
	assert_non_null(strstr(r.body, "\noutboxd_spool_bytes 0\n")); /* replayed meanwhile */
	assert_non_null(strstr(r.body, "\noutboxd_spool_last_corrupt_timestamp_seconds 1"));
	http_resp_free(&r);
	assert_int_equal(daemon_stop(&dmn), 0);
}

/* Stores one event for sub_id as the dead instance would have, and claims its delivery
 * under that instance's name with a lease of lease_ms; the delivery id into out. */
static void leased_delivery(store *st, int n, int64_t lease_ms, char out[UUID_STR_LEN])
{
	char subs[1][UUID_STR_LEN];
	struct store_event_in ev = {0};
	struct store_claim *claims = NULL;
	size_t got = 0;

	snprintf(subs[0], sizeof(subs[0]), "%.36s", sub_id);
	event_id(ev.id, n);
	ev.event_type = "leased.event";
	ev.source = "";
	ev.content_type = "application/json";
	ev.payload = "{}";
	ev.payload_len = 2;
	ev.created_at = (int64_t)time(NULL) * 1000 - 60000;
	ev.subscription_ids = (const char(*)[UUID_STR_LEN])subs;
	ev.n_subscriptions = 1;
	assert_int_equal(store_ingest(st, &ev, 1), STORE_OK);
	assert_int_equal(store_claim_due(st, (int64_t)time(NULL) * 1000, lease_ms, 1, &claims, &got),
			 STORE_OK);
	assert_int_equal(got, 1);
	memcpy(out, claims[0].delivery_id, UUID_STR_LEN);
	store_claims_free(claims, got);
}

static void test_results_applied_only_under_an_expired_lease(void **state)
{
	char out[8192], args[512], err[256], expired[UUID_STR_LEN], live[UUID_STR_LEN];
	struct store_delivery d;
	struct store_result r[2];
	struct store_attempt a = {.n = 1, .kind = ATTEMPT_IMMEDIATE, .duration_ms = 12, .code = 200,
				  .message = "OK"};
	struct spool *sp;
	store *st;
	void *rec;
	size_t len;

	start_daemon(NULL);
	create_sub();
	assert_int_equal(daemon_stop(&dmn), 0);
	/* The dead instance: one delivery whose lease has run out, one still leased. */
	assert_int_equal(store_open(dmn.db, "dead-host:42", &st, err, sizeof(err)), STORE_OK);
	leased_delivery(st, 31, 1, expired);
	leased_delivery(st, 32, 3600 * 1000, live);
	store_close(st);
	usleep(20 * 1000);

	/* It had finished both rounds when the store went away: the results are spooled. */
	memset(r, 0, sizeof(r));
	for (int i = 0; i < 2; i++) {
		r[i].delivery_id = i ? live : expired;
		r[i].status = DELIVERY_PROCESSED;
		r[i].attempt_count = 1;
		r[i].processed_at = (int64_t)time(NULL) * 1000;
		r[i].attempts = &a;
		r[i].n_attempts = 1;
	}
	a.started_at = (int64_t)time(NULL) * 1000;
	assert_int_equal(spool_open(spool_file, &sp, NULL), SPOOL_OK);
	assert_int_equal(spool_encode_results(r, 2, &rec, &len), 0);
	assert_int_equal(spool_append(sp, SPOOL_REC_RESULTS, rec, len), SPOOL_OK);
	free(rec);
	spool_close(sp);

	snprintf(args, sizeof(args), "replay %s", spool_file);
	assert_int_equal(spool_cmd(out, sizeof(out), args), 0);
	assert_contains(out, "results applied     1 of 2");
	assert_contains(out, "1 delivery results were not applied");

	assert_int_equal(store_open(dmn.db, "checker:1", &st, err, sizeof(err)), STORE_OK);
	assert_int_equal(store_delivery_get(st, expired, &d), STORE_OK);
	assert_int_equal(d.status, DELIVERY_PROCESSED);
	assert_int_equal(d.attempt_count, 1);
	assert_null(d.lease_owner);
	store_delivery_free(&d);
	assert_int_equal(store_delivery_get(st, live, &d), STORE_OK);
	assert_int_equal(d.status, DELIVERY_NEW);
	assert_string_equal(d.lease_owner, "dead-host:42");
	store_delivery_free(&d);
	store_close(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_inspect_and_replay_into_running_daemon, setup,
						teardown),
		cmocka_unit_test_setup_teardown(
			test_damaged_file_is_inspected_and_replayed_around_the_damage, setup,
			teardown),
		cmocka_unit_test_setup_teardown(test_stats_and_metrics_show_spool_damage, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_results_applied_only_under_an_expired_lease,
						setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
