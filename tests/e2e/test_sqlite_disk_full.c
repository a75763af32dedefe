/* test_sqlite_disk_full.c: the SQLite store's disk fills up under a stream of events,
 * then space comes back, as when an operator frees some. The store lives on a tmpfs of
 * 3 MiB mounted for the test (skipped where this process may not mount one).
 *
 *  - once the disk is full, ingest answers 503 `unavailable` with its JSON body, the
 *    daemon keeps running and answering, and the log says so once, not once per request;
 *  - once space is back, ingest answers 202 again without a restart, the log says the
 *    store takes writes again, and every event acknowledged before, during and after
 *    reaches the subscriber exactly once;
 *  - with the spool on the same full disk, its appends fail too: ingest answers 503,
 *    never a 202 for an event written nowhere, and the log says it once. */
#include "e2e.h"

#include <errno.h>
#include <sys/mount.h>
#include <unistd.h>

#define MAX_FILL 3000 /* requests before the disk must have filled up */

static struct receiver rcv;
static struct daemon dmn;
static char *mnt;   /* the tmpfs the store is on */
static int mounted;

/* A fresh 3 MiB tmpfs on mnt; 0, or -1 (said on stderr) where this process may not mount. */
static int mount_small(void)
{
	if (mount("outboxd-test", mnt, "tmpfs", MS_NOSUID | MS_NODEV, "size=3m,mode=0700")) {
		fprintf(stderr, "cannot mount a tmpfs on %s (%s): the test is skipped\n", mnt,
			strerror(errno));
		return -1;
	}
	mounted = 1;
	return 0;
}

static void unmount(void)
{
	if (mounted)
		umount2(mnt, MNT_DETACH);
	mounted = 0;
}

static int setup(void **state)
{
	(void)state;
	assert_int_equal(receiver_start(&rcv), 0);
	memset(&dmn, 0, sizeof(dmn));
	mnt = harness_tmpdir("outboxd-full");
	assert_non_null(mnt);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	daemon_cleanup(&dmn);
	receiver_stop(&rcv);
	unmount();
	rmdir(mnt);
	free(mnt);
	return 0;
}

/* POSTs one event of i with a 4 KiB payload; its status; the event id into id on 202. */
static long send_event(int i, char id[64])
{
	static char body[5000];
	char url[160];
	struct http_resp r;
	int n = snprintf(body, sizeof(body), "{\"event_type\":\"disk.full\",\"payload\":"
					     "{\"i\":%d,\"pad\":\"", i);
	memset(body + n, 'x', 4096);
	snprintf(body + n + 4096, sizeof(body) - (size_t)n - 4096, "\"}}");
	snprintf(url, sizeof(url), "%s/v1/events", dmn.url);
	assert_int_equal(http_do("POST", url, dmn.token, NULL, body, strlen(body), &r), 0);
	long status = r.status;
	if (status == 202) {
		json_t *ids = json_object_get(r.json, "ids");
		assert_int_equal(json_array_size(ids), 1);
		snprintf(id, 64, "%s", json_string_value(json_array_get(ids, 0)));
	} else {
		/* the store's refusal, as every 503 of the API says it */
		assert_int_equal(status, 503);
		json_t *err = json_object_get(r.json, "error");
		assert_string_equal(json_string_value(json_object_get(err, "code")), "unavailable");
	}
	http_resp_free(&r);
	return status;
}

/* How many lines of the daemon's log contain needle. */
static int log_lines(const char *needle)
{
	char *log = e2e_daemon_log(&dmn);
	int n = 0;
	for (const char *p = log; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	free(log);
	return n;
}

/* Mounts the tmpfs (the test is skipped where it cannot be) and starts the daemon with
 * its store there (and its spool, with_spool) and one subscription of the receiver's
 * /full. */
static void start_on_tmpfs(int with_spool)
{
	if (mount_small())
		skip();
	static char db[400], spool[400];
	char sub[64];
	snprintf(db, sizeof(db), "OUTBOXD_DB=sqlite:%s/outboxd.db", mnt);
	snprintf(spool, sizeof(spool), "OUTBOXD_SPOOL=%s/ingest.spool", mnt);
	const char *env[] = {db, with_spool ? spool : NULL, NULL};
	memset(&dmn, 0, sizeof(dmn));
	assert_int_equal(receiver_reset(&rcv), 0);
	assert_int_equal(daemon_start(&dmn, env), 0);
	e2e_create_sub(&dmn, sub, "{\"name\":\"full\",\"event_types\":[\"disk.full\"],"
				  "\"endpoint\":\"%s/full\"}", rcv.url);
}

static void stop_and_unmount(void)
{
	assert_int_equal(daemon_stop(&dmn), 0);
	daemon_cleanup(&dmn);
	unmount();
}

/* Events until the store refuses one (the disk is full); *i counts the events sent.
 * Returns those acknowledged. */
static long fill_disk(int *i)
{
	char id[64];
	long acked = 0;
	int refused = 0;
	for (; *i < MAX_FILL && !refused; (*i)++)
		if (send_event(*i, id) == 202)
			acked++;
		else
			refused = 1;
	assert_true(refused);
	assert_true(acked > 0);
	return acked;
}

/* Every acknowledged event reaches the subscriber, each once. */
static void assert_each_delivered_once(long acked)
{
	long unique = 0, dups = 0;
	for (int t = 0; t < 300; t++) {
		json_t *st = receiver_stats(&rcv, "/full");
		unique = (long)json_integer_value(json_object_get(st, "unique_ids"));
		dups = (long)json_integer_value(json_object_get(st, "duplicates"));
		json_decref(st);
		if (unique >= acked)
			break;
		usleep(100 * 1000);
	}
	assert_int_equal(unique, acked);
	assert_int_equal(dups, 0);
}

static void test_disk_full_then_space_again(void **state)
{
	(void)state;
	char id[64];
	int i = 0;
	start_on_tmpfs(0);
	long acked = fill_disk(&i);
	/* a full disk refuses most of what follows (a small write may still fit) */
	int later_refused = 0;
	for (int k = 0; k < 50; k++, i++) {
		if (send_event(i, id) == 202)
			acked++;
		else
			later_refused++;
	}
	assert_true(later_refused > 0);
	/* still up and answering, and said so once, not once per refused request */
	json_t *h = api_call(&dmn, "GET", "/healthz", NULL, 200);
	json_decref(h);
	assert_int_equal(log_lines("the store cannot be written: database or disk is full"), 1);
	assert_int_equal(log_lines("(in: COMMIT)\"}"), 0); /* the old line per statement */
	fprintf(stderr, "disk full after %ld events acknowledged; %d of the 50 after refused\n",
		acked, later_refused);

	/* Space again: ingest takes events at once, no restart. */
	assert_int_equal(mount("outboxd-test", mnt, "tmpfs", MS_REMOUNT | MS_NOSUID | MS_NODEV,
			       "size=64m"), 0);
	for (int k = 0; k < 20; k++, i++) {
		long status = 0;
		for (int t = 0; t < 50 && (status = send_event(i, id)) != 202; t++)
			usleep(100 * 1000);
		assert_int_equal(status, 202);
		acked++;
	}
	/* the end of the refusals is logged once a write succeeds with none refused for 5 s */
	sleep(6);
	assert_int_equal(send_event(i++, id), 202);
	acked++;

	assert_each_delivered_once(acked);
	assert_int_equal(log_lines("the store takes writes again"), 1);
	stop_and_unmount();
}

static void test_spool_on_the_full_disk(void **state)
{
	(void)state;
	char id[64];
	int i = 0;
	start_on_tmpfs(1);
	/* the spool could not take the refused one either: 503, not 202 */
	long acked = fill_disk(&i);
	for (int k = 0; k < 20; k++, i++)
		if (send_event(i, id) == 202)
			acked++;
	assert_int_equal(log_lines("spool: cannot append to"), 1);
	assert_int_equal(log_lines("spool: still cannot append"), 0);
	/* what was acknowledged was stored somewhere: it arrives, once each */
	assert_each_delivered_once(acked);
	stop_and_unmount();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_disk_full_then_space_again),
		cmocka_unit_test(test_spool_on_the_full_disk),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
