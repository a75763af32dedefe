/* test_ordering.c: per-key ordering as a subscriber sees it.
 *
 * A subscription with "ordering": "partition_key" gets 2,000 events over 50 keys while
 * its receiver fails one request in five at random: every key arrives complete and in
 * ingest order (no delivery of a key is even attempted before the one before it got its
 * 2xx). Meanwhile one key waits behind a dead delivery — its later deliveries are not sent,
 * show "blocked", and do not hold up the other keys — until the dead one is replayed, when
 * the whole key follows in order. With "ordering_on_dead": "skip" a dead delivery is passed
 * over. On PostgreSQL, three instances share the work and one is killed with SIGKILL
 * mid-run: every key still arrives complete and in order. */
#include "e2e.h"
#include "harness_pg.h"

#define KEYS 50
#define PER_KEY 40
#define STUCK_LATER 20
#define INSTANCES 3

static struct receiver rcv;
static struct daemon dmn[INSTANCES];
static char db_dsn[300];

static int setup(void **state)
{
	assert_int_equal(receiver_start(&rcv), 0);
	memset(dmn, 0, sizeof(dmn));
	db_dsn[0] = '\0';
	return 0;
}

static int teardown(void **state)
{
	for (int i = 0; i < INSTANCES; i++) {
		if (db_dsn[0])
			dmn[i].db[0] = '\0'; /* shared database: left to the server's end */
		daemon_cleanup(&dmn[i]);
	}
	receiver_stop(&rcv);
	return 0;
}

/* The sweep that parks blocked deliveries runs with the lease reaper. */
static const char *const fast_env[] = {"OUTBOXD_REAP_INTERVAL=300ms", NULL};

static void create_ordered(const char *name, const char *path, const char *on_dead)
{
	char sub[64];
	e2e_create_sub(&dmn[0], sub, "{\"name\":\"%s\",\"event_types\":[\"%s.*\"],"
				     "\"endpoint\":\"%s%s\",\"ordering\":\"partition_key\","
				     "\"ordering_on_dead\":\"%s\",\"retry\":{\"immediate\":1,"
				     "\"interval\":\"100ms\",\"max_retries\":0,\"permanent\":[410]}}",
		       name, name, rcv.url, path, on_dead);
}

/* Sends events of type TYPE.e with payload {"key":K,"seq":S}, for keys[i] / seqs[i]. */
static void send_keyed(struct daemon *d, const char *type, char (*keys)[16], const int *seqs,
		       size_t n)
{
	size_t cap = n * 160 + 32, off = 0;
	char *body = malloc(cap);
	assert_non_null(body);
	off += (size_t)snprintf(body + off, cap - off, "{\"events\":[");
	for (size_t i = 0; i < n; i++)
		off += (size_t)snprintf(body + off, cap - off,
					"%s{\"event_type\":\"%s.e\",\"partition_key\":\"%s\","
					"\"payload\":{\"key\":\"%s\",\"seq\":%d}}",
					i ? "," : "", type, keys[i], keys[i], seqs[i]);
	snprintf(body + off, cap - off, "]}");
	json_decref(api_call(d, "POST", "/v1/events", body, 202));
	free(body);
}

/* What the receiver got on path, per key: seqs in arrival order and their statuses. */
struct key_log {
	char key[16];
	int seq[512];
	int status[512];
	int n;
};

static int collect(const char *path, struct key_log *logs, int max_keys)
{
	json_t *reqs = receiver_requests(&rcv, path);
	json_t *r;
	size_t i;
	int n_keys = 0;
	assert_non_null(reqs);
	json_array_foreach(reqs, i, r) {
		json_t *body = json_loads(json_string_value(json_object_get(r, "body")), 0, NULL);
		const char *key = json_string_value(json_object_get(body, "key"));
		int seq = (int)json_integer_value(json_object_get(body, "seq"));
		int status = (int)json_integer_value(json_object_get(r, "status"));
		assert_non_null(key);
		int k;
		for (k = 0; k < n_keys && strcmp(logs[k].key, key) != 0; k++)
			;
		if (k == n_keys) {
			assert_true(n_keys < max_keys);
			memset(&logs[k], 0, sizeof(logs[k]));
			snprintf(logs[k].key, sizeof(logs[k].key), "%s", key);
			n_keys++;
		}
		assert_true(logs[k].n < 512);
		logs[k].seq[logs[k].n] = seq;
		logs[k].status[logs[k].n++] = status;
		json_decref(body);
	}
	json_decref(reqs);
	return n_keys;
}

/* Successful receipts of key in logs (-1 when the key was never seen). */
static int successes(const struct key_log *logs, int n_keys, const char *key)
{
	for (int k = 0; k < n_keys; k++) {
		if (strcmp(logs[k].key, key) != 0)
			continue;
		int ok = 0;
		for (int i = 0; i < logs[k].n; i++)
			ok += logs[k].status[i] >= 200 && logs[k].status[i] < 300;
		return ok;
	}
	return -1;
}

/* Every key's attempts are in order: seqs never go back, a seq is only left after its
 * 2xx, and each of 0..expect-1 got a 2xx. A repeat of the seq delivered last is a
 * re-delivery after a crash between the 2xx and its record (at-least-once): allowed only
 * with allow_repeats, and counted. */
static int repeats;

static void assert_in_order(const struct key_log *l, int expect, int allow_repeats)
{
	int want = 0;
	for (int i = 0; i < l->n; i++) {
		int ok = l->status[i] >= 200 && l->status[i] < 300;
		if (allow_repeats && want > 0 && l->seq[i] == want - 1) {
			repeats++;
			continue;
		}
		if (l->seq[i] != want) {
			fprintf(stderr, "key %s: got seq %d while %d was not delivered yet\n", l->key,
				l->seq[i], want);
			fail();
		}
		if (ok)
			want++;
	}
	if (want != expect)
		fprintf(stderr, "key %s: %d of %d delivered\n", l->key, want, expect);
	assert_int_equal(want, expect);
}

struct wait_ctx {
	const char *path;
	const char *const *keys;
	int n_keys;
	int per_key;
};

static struct key_log logs[KEYS + 4];

static int all_delivered(void *arg)
{
	struct wait_ctx *w = arg;
	int n = collect(w->path, logs, KEYS + 4);
	for (int k = 0; k < w->n_keys; k++)
		if (successes(logs, n, w->keys[k]) < w->per_key)
			return 0;
	return 1;
}

/* A FIFO of n answers for path, one in five a 500 (a fixed seed: the same run each time),
 * then 200s. */
static void script_random_failures(const char *path, int n, unsigned seed)
{
	size_t cap = (size_t)n * 20 + 64, off = 0;
	char *s = malloc(cap);
	assert_non_null(s);
	off += (size_t)snprintf(s, cap, "{\"responses\":[");
	for (int i = 0; i < n; i++)
		off += (size_t)snprintf(s + off, cap - off, "%s{\"status\":%d}", i ? "," : "",
					rand_r(&seed) % 5 == 0 ? 500 : 200);
	snprintf(s + off, cap - off, "],\"default\":{\"status\":200}}");
	assert_int_equal(receiver_script(&rcv, path, s), 0);
	free(s);
}

/* The 2,000 events over 50 keys (and STUCK_LATER more of key "stuck"), in batches of 100
 * spread over the instances given. */
static void send_load(const char *type, int instances)
{
	static char keys[100][16];
	static int seqs[100];
	int next[KEYS] = {0}, stuck = 1, batch = 0;
	size_t n = 0;
	for (int i = 0; i < KEYS * PER_KEY; i++) {
		int k = (i * 7 + i / KEYS) % KEYS; /* interleaved, not round-robin */
		while (next[k] >= PER_KEY)
			k = (k + 1) % KEYS;
		snprintf(keys[n], sizeof(keys[n]), "k%02d", k);
		seqs[n++] = next[k]++;
		if (i % 100 == 50 && stuck <= STUCK_LATER) {
			snprintf(keys[n], sizeof(keys[n]), "stuck");
			seqs[n++] = stuck++;
		}
		if (n >= 99) {
			send_keyed(&dmn[batch++ % instances], type, keys, seqs, n);
			n = 0;
		}
	}
	if (n)
		send_keyed(&dmn[batch % instances], type, keys, seqs, n);
	assert_int_equal(stuck, STUCK_LATER + 1);
}

/* The dead "stuck" seq 0 delivery: sent first, answered 410 (permanent). */
static void dead_head(const char *type, const char *path, char out[64])
{
	char keys[1][16] = {"stuck"};
	int seq = 0;
	assert_int_equal(receiver_script(&rcv, path, "{\"responses\":[{\"status\":410}],"
						     "\"default\":{\"status\":200}}"), 0);
	send_keyed(&dmn[0], type, keys, &seq, 1);
	json_t *page = NULL;
	int64_t deadline = harness_now_ms() + 20000;
	for (;;) {
		json_decref(page);
		page = e2e_get(&dmn[0], "/v1/dlq?event_type=%s.e", type);
		if (json_array_size(json_object_get(page, "items")) == 1 ||
		    harness_now_ms() >= deadline)
			break;
		usleep(50 * 1000);
	}
	assert_int_equal(json_array_size(json_object_get(page, "items")), 1);
	json_t *d = json_array_get(json_object_get(page, "items"), 0);
	snprintf(out, 64, "%s", json_string_value(json_object_get(d, "id")));
	json_decref(page);
}

static const char *const *key_names(void)
{
	static char names[KEYS][16];
	static const char *ptrs[KEYS];
	for (int k = 0; k < KEYS; k++) {
		snprintf(names[k], sizeof(names[k]), "k%02d", k);
		ptrs[k] = names[k];
	}
	return ptrs;
}

static void check_keys(const char *path, int expect_stuck, int allow_repeats)
{
	int n = collect(path, logs, KEYS + 4);
	const char *const *names = key_names();
	for (int k = 0; k < KEYS; k++) {
		int found = 0;
		for (int i = 0; i < n; i++)
			if (strcmp(logs[i].key, names[k]) == 0) {
				assert_in_order(&logs[i], PER_KEY, allow_repeats);
				found = 1;
			}
		assert_true(found);
	}
	for (int i = 0; i < n; i++)
		if (strcmp(logs[i].key, "stuck") == 0) {
			if (expect_stuck < 0) {
				/* blocked: the dead head's one 410 and nothing after it */
				assert_int_equal(logs[i].n, 1);
				assert_int_equal(logs[i].seq[0], 0);
				assert_int_equal(logs[i].status[0], 410);
			} else {
				/* the 410, then every seq from 0 on in order */
				struct key_log rest = logs[i];
				memmove(rest.seq, rest.seq + 1, (size_t)(rest.n - 1) * sizeof(int));
				memmove(rest.status, rest.status + 1, (size_t)(rest.n - 1) * sizeof(int));
				rest.n--;
				assert_in_order(&rest, expect_stuck, allow_repeats);
			}
		}
}

static void run_ordered(int instances)
{
	char dead[64];
	const char *const *names = key_names();
	create_ordered("ord", "/ordered", "block");
	/* every instance fans out to the new subscription before the load (PostgreSQL
	 * instances learn of it through NOTIFY) */
	for (int i = 1; i < instances; i++) {
		char ev[64], ids[1][64];
		size_t n = 0;
		for (int t = 0; t < 100 && n == 0; t++) {
			json_t *r = api_call(&dmn[i], "POST", "/v1/events",
					     "{\"event_type\":\"ord.probe\",\"payload\":{\"key\":"
					     "\"probe\",\"seq\":0}}", 202);
			snprintf(ev, sizeof(ev), "%s",
				 json_string_value(json_array_get(json_object_get(r, "ids"), 0)));
			json_decref(r);
			n = e2e_deliveries_of(&dmn[i], ev, ids, 1);
			if (!n)
				usleep(50 * 1000);
		}
		assert_int_equal(n, 1);
		/* delivered before the receiver's script changes: the 410 below is the head's */
		json_decref(e2e_wait_status(&dmn[i], ids[0], "PROCESSED", 20000));
	}
	dead_head("ord", "/ordered", dead);
	script_random_failures("/ordered", 3000, 15);
	int64_t t0 = harness_now_ms();
	send_load("ord", instances);

	if (instances > 1) {
		/* kill -9 one instance while the keys are half way: once 1,200 of the 2,000
		 * requests and more (failures are tried again) have arrived */
		assert_int_equal(receiver_wait_count(&rcv, "/ordered", 1200, 60000), 0);
		daemon_kill9(&dmn[1]);
	}
	struct wait_ctx w = {"/ordered", names, KEYS, PER_KEY};
	assert_int_equal(harness_wait(all_delivered, &w, 120000), 0);
	fprintf(stderr, "ordering: %d keys x %d events delivered in order in %lld ms "
			"(%d instance%s)\n", KEYS, PER_KEY, (long long)(harness_now_ms() - t0),
		instances, instances > 1 ? "s, one killed" : "");
	repeats = 0;
	check_keys("/ordered", -1, instances > 1);

	/* the stuck key's later deliveries wait, shown as blocked once the sweep ran */
	json_t *page = NULL;
	int blocked = 0;
	for (int i = 0; i < 100 && blocked < STUCK_LATER; i++) {
		json_decref(page);
		page = e2e_get(&dmn[0], "/v1/deliveries?status=NEW&limit=100");
		json_t *d;
		size_t j;
		blocked = 0;
		json_array_foreach(json_object_get(page, "items"), j, d)
			blocked += json_is_true(json_object_get(d, "blocked"));
		if (blocked < STUCK_LATER)
			usleep(100 * 1000);
	}
	json_decref(page);
	assert_int_equal(blocked, STUCK_LATER);

	/* replaying the dead one lets the whole key through, in order (the random failures
	 * end first: a replay is one manual round, and a failed one goes back to the DLQ) */
	assert_int_equal(receiver_script(&rcv, "/ordered", "{\"default\":{\"status\":200}}"), 0);
	char body[128];
	snprintf(body, sizeof(body), "{\"ids\":[\"%s\"]}", dead);
	json_decref(api_call(&dmn[0], "POST", "/v1/dlq/replay", body, 200));
	const char *stuck[] = {"stuck"};
	struct wait_ctx ws = {"/ordered", stuck, 1, STUCK_LATER + 1};
	if (harness_wait(all_delivered, &ws, 120000) != 0) {
		/* what is left, for the log */
		json_t *left = e2e_get(&dmn[0], "/v1/deliveries?status=NEW&limit=100");
		char *text = json_dumps(left, JSON_INDENT(1));
		fprintf(stderr, "not delivered after the replay:\n%s\n", text ? text : "");
		free(text);
		json_decref(left);
		left = e2e_get(&dmn[0], "/v1/deliveries?status=FAILED&limit=100");
		text = json_dumps(left, JSON_INDENT(1));
		fprintf(stderr, "failed:\n%s\n", text ? text : "");
		free(text);
		json_decref(left);
		fail();
	}
	check_keys("/ordered", STUCK_LATER + 1, instances > 1);
	if (instances > 1)
		fprintf(stderr, "ordering: %d deliveries sent again after the kill, each right "
				"after itself (at-least-once), none out of order\n", repeats);
}

static void test_ordered_under_failures(void **state)
{
	assert_int_equal(daemon_start(&dmn[0], fast_env), 0);
	run_ordered(1);
}

static void test_skip_dead(void **state)
{
	assert_int_equal(daemon_start(&dmn[0], fast_env), 0);
	create_ordered("skp", "/skip", "skip");
	char dead[64];
	dead_head("skp", "/skip", dead);
	char keys[3][16] = {"stuck", "stuck", "stuck"};
	int seqs[3] = {1, 2, 3};
	send_keyed(&dmn[0], "skp", keys, seqs, 3);
	const char *stuck[] = {"stuck"};
	struct wait_ctx w = {"/skip", stuck, 1, 3};
	assert_int_equal(harness_wait(all_delivered, &w, 20000), 0);
	int n = collect("/skip", logs, 4);
	assert_int_equal(n, 1);
	assert_int_equal(logs[0].n, 4);
	for (int i = 0; i < 4; i++)
		assert_int_equal(logs[0].seq[i], i);
}

/* PostgreSQL: three instances on one database, one killed with SIGKILL mid-run. */
static void test_cluster_with_kill(void **state)
{
	if (!harness_pg_wanted())
		skip();
	char db[400];
	assert_int_equal(harness_pg_fresh_db(db_dsn, sizeof(db_dsn)), 0);
	snprintf(db, sizeof(db), "OUTBOXD_DB=%s", db_dsn);
	const char *env[] = {db, "OUTBOXD_REAP_INTERVAL=300ms", "OUTBOXD_LEASE=3s",
			     E2E_SHARED_SECRET_KEY, NULL};
	for (int i = 0; i < INSTANCES; i++)
		assert_int_equal(daemon_start(&dmn[i], env), 0);
	/* every instance knows the subscription before the load */
	run_ordered(INSTANCES);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_ordered_under_failures, setup, teardown),
		cmocka_unit_test_setup_teardown(test_skip_dead, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_with_kill, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
