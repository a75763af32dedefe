/* test_store_subscriptions.c: the conformance suite on configuration rows: subscriptions,
 * named API tokens, subscription configs sealed at rest, and the record of the secret key
 * the store was first started with.
 *
 * Every test runs once per backend (store_suite.h); none knows which. */
#include "store_suite.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/secretbox.h"
#include "core/sub_codec.h"
#include "core/subscriptions.h"

static void test_subscriptions(void **state)
{
	struct t *t = *state;
	struct sub_row a = {.name = "analytics", .config = "{\"endpoint\":\"https://a\"}",
			      .enabled = 1, .created_at = 1000, .updated_at = 1000};
	struct sub_row b = {.name = "billing", .config = "{}", .enabled = 0,
			      .created_at = 2000, .updated_at = 2000};
	struct sub_row got, *list = NULL;
	size_t n = 0;

	uuid_v7(a.id);
	uuid_v7(b.id);
	assert_int_equal(store_sub_create(t->st, &b), STORE_OK);
	assert_int_equal(store_sub_create(t->st, &a), STORE_OK);

	assert_int_equal(store_sub_get(t->st, a.id, &got), STORE_OK);
	assert_string_equal(got.id, a.id);
	assert_string_equal(got.name, "analytics");
	assert_string_equal(got.config, a.config);
	assert_int_equal(got.enabled, 1);
	assert_int_equal(got.created_at, 1000);
	store_sub_free(&got);

	/* Ordered by created_at. */
	assert_int_equal(store_sub_list(t->st, &list, &n), STORE_OK);
	assert_int_equal(n, 2);
	assert_string_equal(list[0].name, "analytics");
	assert_string_equal(list[1].name, "billing");
	assert_int_equal(list[1].enabled, 0);
	store_subs_free(list, n);

	/* Names are unique, on create and on rename. */
	{
		struct sub_row dup = a;

		uuid_v7(dup.id);
		assert_int_equal(store_sub_create(t->st, &dup), STORE_CONFLICT);
		assert_int_equal(store_sub_create(t->st, &a), STORE_CONFLICT);
	}
	b.name = "analytics";
	assert_int_equal(store_sub_update(t->st, &b), STORE_CONFLICT);
	b.name = "billing-v2";
	b.config = "{\"v\":2}";
	b.enabled = 1;
	b.updated_at = 3000;
	assert_int_equal(store_sub_update(t->st, &b), STORE_OK);
	assert_int_equal(store_sub_get(t->st, b.id, &got), STORE_OK);
	assert_string_equal(got.name, "billing-v2");
	assert_string_equal(got.config, "{\"v\":2}");
	assert_int_equal(got.enabled, 1);
	assert_int_equal(got.created_at, 2000);
	assert_int_equal(got.updated_at, 3000);
	store_sub_free(&got);

	assert_int_equal(store_sub_delete(t->st, a.id), STORE_OK);
	assert_int_equal(store_sub_delete(t->st, a.id), STORE_NOT_FOUND);
	assert_int_equal(store_sub_get(t->st, a.id, &got), STORE_NOT_FOUND);
	assert_int_equal(store_sub_update(t->st, &a), STORE_NOT_FOUND);
	assert_int_equal(store_sub_list(t->st, &list, &n), STORE_OK);
	assert_int_equal(n, 1);
	store_subs_free(list, n);

	/* A deleted subscription's deliveries stay for the record. */
	memcpy(t->subs[0], b.id, UUID_STR_LEN);
	{
		char ev[UUID_STR_LEN];
		struct store_delivery *d;

		ingest_one(t, "a", t->t0, 1, ev);
		assert_int_equal(store_sub_delete(t->st, b.id), STORE_OK);
		d = deliveries_of(t, ev, 1);
		assert_string_equal(d->subscription_id, b.id);
		store_deliveries_free(d, 1);
	}
}

/* Named API tokens: kept with their hash, scopes and expiry, a name once, listed oldest
 * first, their last use recorded (never moved back), revoked once. */
static void test_tokens(void **state)
{
	struct t *t = *state;
	struct store_token a = {.name = "ci", .scopes = "ingest", .prefix = "obx_aaaa",
				.actor = "admin", .created_at = 1000, .expires_at = 90000};
	struct store_token b = {.name = "grafana", .scopes = "read", .prefix = "obx_bbbb",
				.created_at = 2000};
	struct store_token *list = NULL;
	size_t n = 0;

	uuid_v7(a.id);
	uuid_v7(b.id);
	memset(a.hash, 'a', 64);
	memset(b.hash, 'b', 64);
	assert_int_equal(store_token_create(t->st, &b), STORE_OK);
	assert_int_equal(store_token_create(t->st, &a), STORE_OK);

	/* a name is unique; a short hash is refused before the backend */
	struct store_token dup = b;
	uuid_v7(dup.id);
	memset(dup.hash, 'c', 64);
	assert_int_equal(store_token_create(t->st, &dup), STORE_CONFLICT);
	dup.name = "other";
	dup.hash[10] = '\0';
	assert_int_equal(store_token_create(t->st, &dup), STORE_INVALID);

	assert_int_equal(store_token_list(t->st, &list, &n), STORE_OK);
	assert_int_equal(n, 2);
	assert_string_equal(list[0].id, a.id);
	assert_string_equal(list[0].name, "ci");
	assert_string_equal(list[0].scopes, "ingest");
	assert_string_equal(list[0].hash, a.hash);
	assert_string_equal(list[0].prefix, "obx_aaaa");
	assert_string_equal(list[0].actor, "admin");
	assert_int_equal(list[0].created_at, 1000);
	assert_int_equal(list[0].expires_at, 90000);
	assert_int_equal(list[0].last_used_at, 0);
	assert_null(list[1].actor);
	assert_int_equal(list[1].expires_at, 0);
	store_tokens_free(list, n);

	/* a last use is recorded; an older one (another instance, late) does not move it
	 * back */
	assert_int_equal(store_token_touch(t->st, a.id, 5000), STORE_OK);
	assert_int_equal(store_token_touch(t->st, a.id, 4000), STORE_OK);
	assert_int_equal(store_token_touch(t->st, a.id, 0), STORE_INVALID);
	assert_int_equal(store_token_list(t->st, &list, &n), STORE_OK);
	assert_int_equal(list[0].last_used_at, 5000);
	assert_int_equal(list[1].last_used_at, 0);
	store_tokens_free(list, n);
	dup.expires_at = -1;
	assert_int_equal(store_token_create(t->st, &dup), STORE_INVALID);

	assert_int_equal(store_token_delete(t->st, a.id), STORE_OK);
	assert_int_equal(store_token_delete(t->st, a.id), STORE_NOT_FOUND);
	assert_int_equal(store_token_touch(t->st, a.id, 6000), STORE_NOT_FOUND);
	assert_int_equal(store_token_list(t->st, &list, &n), STORE_OK);
	assert_int_equal(n, 1);
	assert_string_equal(list[0].name, "grafana");
	store_tokens_free(list, n);
}

/* Pages of subscriptions in creation order (ties by id), each with the cursor of the
 * next: every row once across the pages, a row created after the cursor's on a later page
 * and one created before it on none, the last page's cursor NULL; a foreign cursor and an
 * out-of-range limit refused; configs opened like the whole list's. */
static struct secretbox_key test_key(unsigned char fill);

static void test_subscription_pages(void **state)
{
	struct t *t = *state;
	struct secretbox_key k = test_key(7);
	struct sub_row rows[5], *page = NULL;
	char names[6][16], *next = NULL, *cursor = NULL;
	int seen[6] = {0};
	size_t n = 0;

	assert_int_equal(store_set_secret_key(t->st, &k), STORE_OK);
	for (int i = 0; i < 5; i++) {
		snprintf(names[i], sizeof(names[i]), "page-%d", i);
		/* three share a creation time: the id orders them, across pages too */
		rows[i] = (struct sub_row){.name = names[i], .config = "{\"secret\":\"whsec_p\"}",
					   .enabled = 1, .created_at = 1000 + (i < 3 ? 0 : i),
					   .updated_at = 1000};
		uuid_v7(rows[i].id);
		assert_int_equal(store_sub_create(t->st, &rows[i]), STORE_OK);
	}
	assert_int_equal(store_sub_page(t->st, NULL, NULL, 2, &page, &n, &next), STORE_OK);
	assert_int_equal(n, 2);
	assert_non_null(next);
	assert_string_equal(page[0].id, rows[0].id);
	assert_string_equal(page[1].id, rows[1].id);
	assert_string_equal(page[0].config, "{\"secret\":\"whsec_p\"}"); /* opened */
	seen[0] = seen[1] = 1;
	store_subs_free(page, n);

	/* created meanwhile: one after the cursor's row, one before it */
	struct sub_row late = {.name = "late", .config = "{}", .enabled = 1, .created_at = 9000,
			       .updated_at = 9000};
	struct sub_row early = {.name = "early", .config = "{}", .enabled = 1, .created_at = 10,
				.updated_at = 10};
	uuid_v7(late.id);
	uuid_v7(early.id);
	assert_int_equal(store_sub_create(t->st, &late), STORE_OK);
	assert_int_equal(store_sub_create(t->st, &early), STORE_OK);

	int pages = 1;
	while (next) {
		free(cursor);
		cursor = next;
		assert_int_equal(store_sub_page(t->st, cursor, NULL, 2, &page, &n, &next), STORE_OK);
		assert_true(n >= 1 && n <= 2);
		pages++;
		for (size_t i = 0; i < n; i++) {
			assert_string_not_equal(page[i].id, early.id);
			int at = strcmp(page[i].id, late.id) == 0 ? 5 : -1;
			for (int r = 0; r < 5 && at < 0; r++)
				if (strcmp(page[i].id, rows[r].id) == 0)
					at = r;
			assert_true(at >= 2);
			assert_int_equal(seen[at], 0);
			seen[at] = 1;
		}
		store_subs_free(page, n);
	}
	assert_int_equal(pages, 3); /* 2 + 2 + 2 (late last) */
	for (int i = 0; i < 6; i++)
		assert_int_equal(seen[i], 1);

	/* exactly a page's worth: no cursor after it */
	assert_int_equal(store_sub_page(t->st, NULL, NULL, 7, &page, &n, &next), STORE_OK);
	assert_int_equal(n, 7);
	assert_null(next);
	assert_string_equal(page[0].id, early.id);
	store_subs_free(page, n);

	/* by name: that one, or none */
	assert_int_equal(store_sub_page(t->st, NULL, "page-3", 100, &page, &n, &next), STORE_OK);
	assert_int_equal(n, 1);
	assert_string_equal(page[0].id, rows[3].id);
	assert_string_equal(page[0].config, "{\"secret\":\"whsec_p\"}");
	assert_null(next);
	store_subs_free(page, n);
	assert_int_equal(store_sub_page(t->st, NULL, "page-", 100, &page, &n, &next), STORE_OK);
	assert_int_equal(n, 0);
	store_subs_free(page, n);

	assert_int_equal(store_sub_page(t->st, "j:1000:x", NULL, 2, &page, &n, &next), STORE_INVALID);
	assert_int_equal(store_sub_page(t->st, "garbage", NULL, 2, &page, &n, &next), STORE_INVALID);
	assert_int_equal(store_sub_page(t->st, NULL, NULL, 0, &page, &n, &next), STORE_INVALID);
	assert_int_equal(store_sub_page(t->st, NULL, NULL, 1001, &page, &n, &next), STORE_INVALID);
	assert_null(page);
	assert_null(next);
	free(cursor);
}

/* A name with '*' or '?' is a glob over the names, letters' case ignored, in creation order
 * and paged like the whole list; '%', '_' and '\' in it are themselves (the store's LIKE
 * escapes them). */
static void expect_names(struct t *t, const char *glob, size_t limit, const char *want)
{
	struct sub_row *page = NULL;
	char *next = NULL, *cursor = NULL, got[256] = "";
	size_t n = 0;

	do {
		assert_int_equal(store_sub_page(t->st, cursor, glob, limit, &page, &n, &next),
				 STORE_OK);
		assert_true(n <= limit);
		for (size_t i = 0; i < n; i++) {
			strcat(got, page[i].name);
			strcat(got, " ");
		}
		store_subs_free(page, n);
		free(cursor);
		cursor = next;
	} while (next);
	if (strcmp(got, want) != 0)
		fail_msg("%s: got \"%s\", want \"%s\"", glob, got, want);
}

static void test_subscription_name_globs(void **state)
{
	struct t *t = *state;
	const char *names[] = {"Acme-prod", "acme-staging", "beta_1", "beta%1", "beta11",
			       "back\\slash", "zeta"};

	for (int i = 0; i < 7; i++) {
		struct sub_row row = {.name = (char *)names[i], .config = "{}", .enabled = 1,
				      .created_at = 1000 + i, .updated_at = 1000};
		uuid_v7(row.id);
		assert_int_equal(store_sub_create(t->st, &row), STORE_OK);
	}
	static const struct {
		const char *glob;
		size_t limit;
		const char *want;
	} cases[] = {
		{"acme*", 100, "Acme-prod acme-staging "},
		{"ACME-*", 1, "Acme-prod acme-staging "},
		{"*PROD", 100, "Acme-prod "},
		{"beta?1", 100, "beta_1 beta%1 beta11 "},
		{"beta_*", 100, "beta_1 "},
		{"beta%*", 2, "beta%1 "},
		{"back\\*", 100, "back\\slash "},
		{"*", 2, "Acme-prod acme-staging beta_1 beta%1 beta11 back\\slash zeta "},
		{"*e*A*", 3, "acme-staging beta_1 beta%1 beta11 zeta "},
		{"nothing*", 100, ""},
		/* without a wildcard: the exact name, case and all */
		{"beta_1", 100, "beta_1 "},
		{"acme-prod", 100, ""},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_names(t, cases[i].glob, cases[i].limit, cases[i].want);
}

/* ---- subscription configs sealed at rest (store/secrets.c) ------------------------------ */

static struct secretbox_key test_key(unsigned char fill)
{
	unsigned char raw[SECRETBOX_KEY_LEN];
	struct secretbox_key k;

	memset(raw, fill, sizeof(raw));
	secretbox_key_from_bytes(raw, &k);
	return k;
}

static void expect_config(struct t *t, const char *id, const char *config)
{
	struct sub_row got;

	assert_int_equal(store_sub_get(t->st, id, &got), STORE_OK);
	assert_string_equal(got.config, config);
	store_sub_free(&got);
}

static void test_sealed_subscriptions(void **state)
{
	struct t *t = *state;
	struct secretbox_key k1 = test_key(1), k2 = test_key(2), k3 = test_key(3);
	struct sub_row old = {.name = "old", .config = "{\"auth\":{\"password\":\"pw-1\"}}",
			      .enabled = 1, .created_at = 1000, .updated_at = 1000};
	struct sub_row new = {.name = "new", .config = "{\"secret\":\"whsec_x\"}", .enabled = 1};
	struct sub_row got, *list = NULL;
	size_t n = 0, migrated = 9, resealed = 9, skipped = 9;
	char err[1024], dsn[sizeof(t->db.dsn)];

	/* Written in clear before the store had a key (an older outboxd). */
	uuid_v7(old.id);
	assert_int_equal(store_sub_create(t->st, &old), STORE_OK);
	assert_int_equal(store_set_secret_key(t->st, &k1), STORE_OK);
	expect_config(t, old.id, old.config); /* a clear row reads as it is */
	assert_int_equal(store_secrets_prepare(t->st, &migrated, err, sizeof(err)), STORE_OK);
	assert_int_equal(migrated, 1);
	assert_int_equal(store_secrets_prepare(t->st, &migrated, err, sizeof(err)), STORE_OK);
	assert_int_equal(migrated, 0);
	/* sealing is not a change of the subscription */
	assert_int_equal(store_sub_get(t->st, old.id, &got), STORE_OK);
	assert_string_equal(got.config, old.config);
	assert_int_equal(got.updated_at, 1000);
	store_sub_free(&got);

	/* Sealed on the way in, opened on the way out. */
	uuid_v7(new.id);
	assert_int_equal(store_sub_create(t->st, &new), STORE_OK);
	new.config = "{\"secret\":\"whsec_y\"}";
	assert_int_equal(store_sub_update(t->st, &new), STORE_OK);
	expect_config(t, new.id, new.config);
	assert_int_equal(store_sub_list(t->st, &list, &n), STORE_OK);
	assert_int_equal(n, 2);
	assert_string_equal(list[0].config, old.config);
	store_subs_free(list, n);

	/* Another key opens nothing, and the start check says which row, which key. */
	assert_int_equal(store_set_secret_key(t->st, &k2), STORE_OK);
	assert_int_equal(store_sub_get(t->st, old.id, &got), STORE_ERROR);
	assert_null(got.config);
	assert_int_equal(store_sub_list(t->st, &list, &n), STORE_ERROR);
	assert_null(list);
	assert_int_equal(n, 0);
	assert_int_equal(store_secrets_prepare(t->st, &migrated, err, sizeof(err)), STORE_ERROR);
	assert_non_null(strstr(err, old.id));
	assert_non_null(strstr(err, k1.id));
	assert_non_null(strstr(err, k2.id));
	assert_null(strstr(err, "pw-1"));

	/* Rotation k1 -> k2, then again, as after an interruption: nothing left to do. */
	assert_int_equal(store_set_secret_key(t->st, &k1), STORE_OK);
	assert_int_equal(store_secrets_rotate(t->st, &k2, &resealed, &skipped, err, sizeof(err)),
			 STORE_OK);
	assert_int_equal(resealed, 2);
	assert_int_equal(skipped, 0);
	assert_int_equal(store_secrets_rotate(t->st, &k2, &resealed, &skipped, err, sizeof(err)),
			 STORE_OK);
	assert_int_equal(resealed, 0);
	assert_int_equal(skipped, 2);
	/* From a key that sealed nothing here: refused before any row changes. */
	assert_int_equal(store_set_secret_key(t->st, &k3), STORE_OK);
	assert_int_equal(store_secrets_rotate(t->st, &k1, &resealed, &skipped, err, sizeof(err)),
			 STORE_ERROR);
	assert_non_null(strstr(err, k2.id));
	assert_int_equal(resealed, 0);
	assert_int_equal(store_set_secret_key(t->st, &k2), STORE_OK);
	expect_config(t, old.id, old.config);
	expect_config(t, new.id, new.config);

	/* What is stored is sealed: a store without the key cannot read it. */
	snprintf(dsn, sizeof(dsn), "%s", t->db.dsn);
	store_close(t->st);
	assert_int_equal(store_open(dsn, "test-owner", &t->st, err, sizeof(err)), STORE_OK);
	assert_int_equal(store_sub_get(t->st, old.id, &got), STORE_ERROR);
	assert_int_equal(store_sub_get(t->st, new.id, &got), STORE_ERROR);
}

/* A subscription row as the API writes it: name, one pattern, an endpoint. */
static struct sub_row sub_doc(const char *name, const char *endpoint, char *buf, size_t len)
{
	struct sub_row row = {.name = (char *)name, .enabled = 1, .created_at = 1000,
			      .updated_at = 1000};
	snprintf(buf, len, "{\"name\":\"%s\",\"event_types\":[\"%s.*\"],\"endpoint\":"
		 "\"%s\",\"auth\":{\"type\":\"bearer\",\"token\":\"tok-%s\"}}", name, name,
		 endpoint, name);
	row.config = buf;
	uuid_v7(row.id);
	return row;
}

/* The set loaded now, with its subscriptions a, b, c (NULL for one not there). */
static struct sub_set *load(struct t *t, struct sub_registry *reg,
			    const struct retry_policy *defaults, const char *ids[3],
			    const struct subscription *got[3])
{
	assert_int_equal(store_subs_load(t->st, reg, defaults), STORE_OK);
	struct sub_set *set = sub_registry_acquire(reg);
	for (int i = 0; i < 3; i++)
		got[i] = sub_set_find(set, ids[i]);
	return set;
}

/* A reload keeps the decoded subscriptions whose rows did not change (each change made
 * through the API reloads them all), and decodes again those that did, or all of them
 * when the defaults differ. Sealed rows too: a new seal of the same text is a change. */
static void test_reload_keeps_unchanged_rows(void **state)
{
	struct t *t = *state;
	struct secretbox_key k1 = test_key(1);
	struct sub_registry reg;
	struct retry_policy defaults, other;
	char ca[512], cb[512], cc[512], cb2[512];
	struct sub_row a = sub_doc("a", "http://a.example/", ca, sizeof(ca));
	struct sub_row b = sub_doc("b", "http://b.example/", cb, sizeof(cb));
	struct sub_row c = sub_doc("c", "http://c.example/", cc, sizeof(cc));
	const char *ids[3] = {a.id, b.id, c.id};
	const struct subscription *s1[3], *s2[3], *s3[3], *s4[3], *s5[3];

	retry_policy_defaults(&defaults);
	other = defaults;
	other.timeout_ms += 1000;
	sub_registry_init(&reg);
	assert_int_equal(store_set_secret_key(t->st, &k1), STORE_OK);
	assert_int_equal(store_sub_create(t->st, &a), STORE_OK);
	assert_int_equal(store_sub_create(t->st, &b), STORE_OK);
	assert_int_equal(store_sub_create(t->st, &c), STORE_OK);
	struct sub_set *set1 = load(t, &reg, &defaults, ids, s1);
	for (int i = 0; i < 3; i++)
		assert_non_null(s1[i]);
	assert_string_equal(s1[1]->endpoint, "http://b.example/");
	assert_string_equal(s1[1]->auth_secret, "tok-b");

	/* b changes: a and c are the same subscriptions, b is decoded again */
	char bid[UUID_STR_LEN];
	memcpy(bid, b.id, UUID_STR_LEN);
	b = sub_doc("b", "http://b2.example/", cb2, sizeof(cb2));
	memcpy(b.id, bid, UUID_STR_LEN);
	b.updated_at = 2000;
	assert_int_equal(store_sub_update(t->st, &b), STORE_OK);
	struct sub_set *set2 = load(t, &reg, &defaults, ids, s2);
	assert_ptr_equal(s2[0], s1[0]);
	assert_ptr_equal(s2[2], s1[2]);
	assert_ptr_not_equal(s2[1], s1[1]);
	assert_string_equal(s2[1]->endpoint, "http://b2.example/");
	assert_int_equal(s2[1]->updated_at, 2000);
	/* the set they came from is gone; the kept ones live on in the new set */
	sub_registry_release(&reg, set1);
	assert_string_equal(s2[0]->endpoint, "http://a.example/");

	/* a written again as it was (sealed anew, same time and text): decoded again;
	 * c disabled: decoded again, with its new state; b deleted: gone */
	assert_int_equal(store_sub_update(t->st, &a), STORE_OK);
	c.enabled = 0;
	assert_int_equal(store_sub_update(t->st, &c), STORE_OK);
	assert_int_equal(store_sub_delete(t->st, b.id), STORE_OK);
	struct sub_set *set3 = load(t, &reg, &defaults, ids, s3);
	assert_ptr_not_equal(s3[0], s2[0]);
	assert_string_equal(s3[0]->endpoint, "http://a.example/");
	assert_null(s3[1]);
	assert_ptr_not_equal(s3[2], s2[2]);
	assert_int_equal(s3[2]->enabled, 0);
	sub_registry_release(&reg, set2);

	/* nothing changed: every one kept */
	struct sub_set *set4 = load(t, &reg, &defaults, ids, s4);
	assert_ptr_equal(s4[0], s3[0]);
	assert_ptr_equal(s4[2], s3[2]);
	/* other defaults: every one decoded again, with them */
	struct sub_set *set5 = load(t, &reg, &other, ids, s5);
	assert_ptr_not_equal(s5[0], s4[0]);
	assert_ptr_not_equal(s5[2], s4[2]);
	assert_int_equal(s5[0]->retry.timeout_ms, other.timeout_ms);
	sub_registry_release(&reg, set3);
	sub_registry_release(&reg, set4);
	sub_registry_release(&reg, set5);
	sub_registry_destroy(&reg);
}

/* The store records the key of its first start; another key is refused before anything
 * changes, and a rotation moves the record along. */
static void test_store_records_its_key(void **state)
{
	struct t *t = *state;
	struct secretbox_key k1 = test_key(1), k2 = test_key(2);
	struct sub_row clear = {.name = "clear", .config = "{\"secret\":\"whsec_c\"}", .enabled = 1};
	struct store_meta_value v;
	size_t migrated = 9, resealed = 9, skipped = 9;
	char err[1024];

	/* a row from before the store had a key (an older outboxd) */
	uuid_v7(clear.id);
	assert_int_equal(store_sub_create(t->st, &clear), STORE_OK);

	/* the facts themselves: set once, then only from what they are */
	assert_int_equal(store_meta_get(t->st, "test_fact", &v), STORE_NOT_FOUND);
	assert_int_equal(store_meta_swap(t->st, "test_fact", NULL, "a", &v), STORE_OK);
	assert_int_equal(store_meta_swap(t->st, "test_fact", NULL, "b", &v), STORE_CONFLICT);
	assert_string_equal(v.value, "a");
	assert_int_equal(store_meta_swap(t->st, "test_fact", "x", "b", &v), STORE_CONFLICT);
	assert_string_equal(v.value, "a");
	assert_int_equal(store_meta_swap(t->st, "test_fact", "a", "b", NULL), STORE_OK);
	assert_int_equal(store_meta_get(t->st, "test_fact", &v), STORE_OK);
	assert_string_equal(v.value, "b");

	/* the first start records its key (here another instance, a moment earlier) */
	assert_int_equal(store_meta_swap(t->st, STORE_META_SEALING_KEY, NULL, k1.id, NULL),
			 STORE_OK);

	/* another key is refused, naming both, before the clear row is sealed under it */
	assert_int_equal(store_set_secret_key(t->st, &k2), STORE_OK);
	assert_int_equal(store_secrets_prepare(t->st, &migrated, err, sizeof(err)), STORE_CONFLICT);
	assert_int_equal(migrated, 0);
	assert_non_null(strstr(err, k1.id));
	assert_non_null(strstr(err, k2.id));
	expect_config(t, clear.id, clear.config);
	assert_int_equal(store_set_secret_key(t->st, &k1), STORE_OK);
	assert_int_equal(store_secrets_prepare(t->st, &migrated, err, sizeof(err)), STORE_OK);
	assert_int_equal(migrated, 1);
	assert_int_equal(store_meta_get(t->st, STORE_META_SEALING_KEY, &v), STORE_OK);
	assert_string_equal(v.value, k1.id);

	/* a rotation moves the record; the old key is refused afterwards */
	assert_int_equal(store_secrets_rotate(t->st, &k2, &resealed, &skipped, err, sizeof(err)),
			 STORE_OK);
	assert_int_equal(store_meta_get(t->st, STORE_META_SEALING_KEY, &v), STORE_OK);
	assert_string_equal(v.value, k2.id);
	assert_int_equal(store_secrets_prepare(t->st, &migrated, err, sizeof(err)), STORE_ERROR);
	assert_int_equal(store_set_secret_key(t->st, &k2), STORE_OK);
	assert_int_equal(store_secrets_prepare(t->st, &migrated, err, sizeof(err)), STORE_OK);
	/* run again (as after an interruption): the record is the new key already */
	assert_int_equal(store_set_secret_key(t->st, &k1), STORE_OK);
	assert_int_equal(store_secrets_rotate(t->st, &k2, &resealed, &skipped, err, sizeof(err)),
			 STORE_OK);
	assert_int_equal(skipped, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_subscriptions),
		T(test_subscription_pages),
		T(test_subscription_name_globs),
		T(test_tokens),
		T(test_sealed_subscriptions),
		T(test_store_records_its_key),
		T(test_reload_keeps_unchanged_rows),
	};

	return store_suite_run(tests, sizeof(tests) / sizeof(tests[0]));
}
