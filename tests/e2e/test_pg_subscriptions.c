/* test_pg_subscriptions.c: what several instances on one PostgreSQL database must agree on
 * before they acknowledge an event (PostgreSQL only; ctest runs it as
 * e2e-pg/test_pg_subscriptions).
 *
 *  - one key per store: three instances started at the same instant, each with a key it
 *    generates itself, cannot all serve: the store keeps the key of the first, the others
 *    exit 2 naming both key ids;
 *  - a subscription created or changed through one instance is used by another within the
 *    stated bound (1 s): every event sent there afterwards reaches it; the instance that
 *    made the change uses it as soon as it answers;
 *  - many changes back to back through two instances (each applies its own in place while
 *    it reads the other's): afterwards every instance has every subscription as it is;
 *  - a subscription row an instance cannot open (changed outside outboxd) makes ingest
 *    answer 503 subscriptions_unavailable and /readyz 503 on every instance, so nothing is
 *    acknowledged without its deliveries; once the row is gone, ingest works again.
 *
 * The subscriber is the C test receiver; the row is broken with libpq, as an operator's
 * hand would. */
#include "e2e.h"
#include "harness_pg.h"

#include <libpq-fe.h>
#include <pthread.h>

#define INSTANCES 3
#define BOUND_MS 1000 /* docs/operations.md: a change reaches every instance within this */

static struct receiver rcv;
static struct daemon dmn[INSTANCES];
static char db_dsn[300];

static int setup(void **state)
{
	if (!harness_pg_wanted())
		return 0;
	memset(dmn, 0, sizeof(dmn));
	assert_int_equal(receiver_start(&rcv), 0);
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

static void sql(const char *text)
{
	PGconn *conn = PQconnectdb(db_dsn);
	assert_int_equal(PQstatus(conn), CONNECTION_OK);
	PGresult *r = PQexec(conn, text);
	if (PQresultStatus(r) != PGRES_COMMAND_OK)
		fail_msg("%s: %s", text, PQerrorMessage(conn));
	PQclear(r);
	PQfinish(conn);
}

struct start_arg {
	struct daemon *d;
	const char *const *env;
	int rc;
};

static void *start_one(void *arg)
{
	struct start_arg *a = arg;
	a->rc = daemon_start(a->d, a->env);
	return NULL;
}

/* Three instances on one new store, started together, each generating its own key: one
 * serves, the others refuse with exit 2 and say which key the store has. */
static void test_one_key_per_store(void **state)
{
	if (!harness_pg_wanted())
		skip();
	char db[400];
	snprintf(db, sizeof(db), "OUTBOXD_DB=%s", db_dsn);
	const char *env[] = {db, "OUTBOXD_SECRET_KEY", NULL}; /* no key: each generates one */
	struct start_arg args[INSTANCES];
	pthread_t threads[INSTANCES];

	for (int i = 0; i < INSTANCES; i++) {
		args[i] = (struct start_arg){&dmn[i], env, 0};
		assert_int_equal(pthread_create(&threads[i], NULL, start_one, &args[i]), 0);
	}
	int serving = 0, refused = 0;
	for (int i = 0; i < INSTANCES; i++) {
		pthread_join(threads[i], NULL);
		if (args[i].rc == 0) {
			serving++;
			continue;
		}
		assert_int_equal(dmn[i].exit_code, 2);
		char path[300], cmd[400], out[512];
		snprintf(cmd, sizeof(cmd), "grep -c 'recorded at its first start' %s",
			 daemon_log_path(&dmn[i], path, sizeof(path)));
		assert_int_equal(e2e_run(cmd, out, sizeof(out)), 0);
		/* the key it had made is gone again: a restart would refuse the same way */
		snprintf(path, sizeof(path), "%s/secret.key", dmn[i].dir);
		assert_int_not_equal(access(path, F_OK), 0);
		refused++;
	}
	assert_int_equal(serving, 1);
	assert_int_equal(refused, INSTANCES - 1);
}

/* Starts the instances on db_dsn with one shared key. */
static void start_cluster(void)
{
	char db[400];
	const char *env[] = {db, E2E_SHARED_SECRET_KEY, "OUTBOXD_LOG_LEVEL=info", NULL};
	snprintf(db, sizeof(db), "OUTBOXD_DB=%s", db_dsn);
	for (int i = 0; i < INSTANCES; i++)
		assert_int_equal(daemon_start(&dmn[i], env), 0);
}

/* Sends n events of type t to instance i, each acknowledged with 202. */
static void send_n(int i, const char *type, int n)
{
	char body[256];
	for (int k = 0; k < n; k++) {
		snprintf(body, sizeof(body), "{\"event_type\":\"%s\",\"payload\":{\"k\":%d}}", type,
			 k);
		json_decref(api_call(&dmn[i], "POST", "/v1/events", body, 202));
	}
}

/* A subscription created, then changed, through instance 0 is used by the others once the
 * bound has passed: every event they acknowledge reaches it. */
static void test_changes_reach_every_instance(void **state)
{
	if (!harness_pg_wanted())
		skip();
	char sub[64], body[512], path[128];
	start_cluster();

	e2e_create_sub(&dmn[0], sub, "{\"name\":\"new\",\"event_types\":[\"sync.*\"],"
				     "\"endpoint\":\"%s/first\"}", rcv.url);
	usleep(BOUND_MS * 1000);
	send_n(1, "sync.a", 10);
	send_n(2, "sync.a", 10);
	assert_int_equal(receiver_wait_count(&rcv, "/first", 20, 30000), 0);

	snprintf(body, sizeof(body), "{\"endpoint\":\"%s/second\"}", rcv.url);
	snprintf(path, sizeof(path), "/v1/subscriptions/%s", sub);
	json_decref(api_call(&dmn[0], "PATCH", path, body, 200));
	send_n(0, "sync.b", 10); /* the instance that changed it: at once */
	usleep(BOUND_MS * 1000);
	send_n(1, "sync.b", 10);
	send_n(2, "sync.b", 10);
	assert_int_equal(receiver_wait_count(&rcv, "/second", 30, 30000), 0);
	usleep(300 * 1000);
	assert_int_equal(receiver_count(&rcv, "/first"), 20); /* none went to the old URL */
}

#define MANY 24

/* MANY subscriptions created back to back, alternately through instances 0 and 1, then
 * every other one deleted the same way, then the rest renamed to a new endpoint: each
 * instance reads the other's changes (NOTIFY) while it applies its own in place. Once the
 * bound has passed, an event of each type sent to each instance reaches exactly the
 * subscriptions that exist, at their current endpoint. */
static void test_many_changes_through_two_instances(void **state)
{
	if (!harness_pg_wanted())
		skip();
	char sub[MANY][64], body[512], path[128], type[32];
	start_cluster();

	for (int k = 0; k < MANY; k++)
		e2e_create_sub(&dmn[k % 2], sub[k], "{\"name\":\"many-%d\",\"event_types\":"
			       "[\"many.%d\"],\"endpoint\":\"%s/old/%d\"}", k, k, rcv.url, k);
	for (int k = 0; k < MANY; k += 2) {
		snprintf(path, sizeof(path), "/v1/subscriptions/%s", sub[k]);
		json_decref(api_call(&dmn[(k / 2) % 2], "DELETE", path, NULL, 204));
	}
	for (int k = 1; k < MANY; k += 2) {
		snprintf(path, sizeof(path), "/v1/subscriptions/%s", sub[k]);
		snprintf(body, sizeof(body), "{\"endpoint\":\"%s/new/%d\"}", rcv.url, k);
		json_decref(api_call(&dmn[(k / 2) % 2], "PATCH", path, body, 200));
	}
	usleep(BOUND_MS * 1000);
	for (int i = 0; i < INSTANCES; i++)
		for (int k = 0; k < MANY; k++) {
			snprintf(type, sizeof(type), "many.%d", k);
			send_n(i, type, 1);
		}
	for (int k = 1; k < MANY; k += 2) {
		snprintf(path, sizeof(path), "/new/%d", k);
		if (receiver_wait_count(&rcv, path, INSTANCES, 30000))
			fail_msg("subscription many-%d: %ld of %d events at %s", k,
				 receiver_count(&rcv, path), INSTANCES, path);
	}
	usleep(300 * 1000);
	for (int k = 0; k < MANY; k++) {
		snprintf(path, sizeof(path), "/old/%d", k);
		if (receiver_count(&rcv, path))
			fail_msg("%ld events went to %s, deleted or moved before they were sent",
				 receiver_count(&rcv, path), path);
		snprintf(path, sizeof(path), "/new/%d", k);
		if (receiver_count(&rcv, path) != (k % 2 ? INSTANCES : 0))
			fail_msg("%s: %ld events, not %d", path, receiver_count(&rcv, path),
				 k % 2 ? INSTANCES : 0);
	}
}

struct status_ctx {
	struct daemon *d;
	const char *path;
	long want;
	const char *code; /* the error code wanted with it, NULL: any */
};

static int answers(void *arg)
{
	struct status_ctx *c = arg;
	struct http_resp r;
	char url[256];
	int post = strcmp(c->path, "/v1/events") == 0;
	snprintf(url, sizeof(url), "%s%s", c->d->url, c->path);
	const char *body = "{\"event_type\":\"sync.probe\",\"payload\":{}}";
	if (http_do(post ? "POST" : "GET", url, c->d->token, post ? body : NULL,
		    post ? "application/json" : NULL, post ? strlen(body) : 0, &r))
		return 0;
	int ok = r.status == c->want && (!c->code || (r.body && strstr(r.body, c->code)));
	http_resp_free(&r);
	return ok;
}

static void wait_answer(struct daemon *d, const char *path, long want, const char *code)
{
	struct status_ctx c = {d, path, want, code};
	if (harness_wait(answers, &c, 15000))
		fail_msg("%s of %s never answered %ld %s", path, d->url, want, code ? code : "");
}

/* A row no instance can open: ingest is refused everywhere (nothing acknowledged that
 * would miss its deliveries), /readyz says why; deleting the row restores both. */
static void test_unreadable_subscription_stops_ingest(void **state)
{
	if (!harness_pg_wanted())
		skip();
	char sub[64];
	start_cluster();
	e2e_create_sub(&dmn[0], sub, "{\"name\":\"ok\",\"event_types\":[\"sync.*\"],"
				     "\"endpoint\":\"%s/ok\"}", rcv.url);
	usleep(BOUND_MS * 1000);
	send_n(1, "sync.a", 5);

	/* sealed under a key nobody has (as a row from an instance with another key was) */
	sql("INSERT INTO outboxd.subscriptions(id, name, config, enabled, created_at,"
	    " updated_at) VALUES ('01a20000-0000-7000-8000-00000000beef', 'broken',"
	    " 'obx1:0badc0de:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', true, 0, 0)");
	for (int i = 0; i < INSTANCES; i++) {
		wait_answer(&dmn[i], "/readyz", 503, "subscriptions_unavailable");
		json_t *e = api_call(&dmn[i], "POST", "/v1/events",
				     "{\"event_type\":\"sync.refused\",\"payload\":{}}", 503);
		assert_string_equal(json_string_value(json_object_get(json_object_get(e, "error"),
								      "code")),
				    "subscriptions_unavailable");
		json_decref(e);
	}
	sql("DELETE FROM outboxd.subscriptions WHERE name = 'broken'");
	for (int i = 0; i < INSTANCES; i++) {
		wait_answer(&dmn[i], "/readyz", 200, NULL);
		send_n(i, "sync.c", 5);
	}
	/* every event acknowledged, before and after, reached the subscription once */
	long acked = 5 + 5 * INSTANCES;
	assert_int_equal(receiver_wait_count(&rcv, "/ok", acked, 30000), 0);
	usleep(300 * 1000);
	json_t *st = receiver_stats(&rcv, "/ok");
	assert_int_equal(json_integer_value(json_object_get(st, "unique_ids")), acked);
	json_decref(st);
	/* and the refused ones were not stored */
	json_t *l = e2e_get(&dmn[0], "/v1/deliveries?event_type=sync.refused");
	assert_int_equal(json_array_size(json_object_get(l, "items")), 0);
	json_decref(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_one_key_per_store, setup, teardown),
		cmocka_unit_test_setup_teardown(test_changes_reach_every_instance, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_changes_through_two_instances, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_unreadable_subscription_stops_ingest, setup,
						teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
