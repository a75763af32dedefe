/* test_sink.c: the registry of the sink family (deliver/sink.c): members found by name and
 * by endpoint scheme, what each supports there, every member's declaration equal to the
 * subscription rules' rows (core/sink_caps.c) both ways, and a daemon's set opened from
 * the settings (a member without its settings stays closed, its scheme finds none; the
 * Kafka member marks dead deliveries of intake topics for their dead-letter topic only
 * with kafka_dead_letter). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "core/config.h"
#include "core/sink_caps.h"
#include "deliver/sink.h"

static void test_lookup_by_name_and_scheme(void **state)
{
	(void)state;
	unsigned supports = 0;
	const struct sink_type *http = sink_type_by_name("http");
	const struct sink_type *kafka = sink_type_by_name("kafka");
	assert_non_null(http);
	assert_non_null(kafka);
	assert_null(sink_type_by_name("amqp"));
	assert_ptr_equal(sink_type_for("http://h.example/x", &supports), http);
	assert_ptr_equal(sink_type_for("HTTPS://h.example/x", NULL), http);
	assert_ptr_equal(sink_type_for("kafka://orders", &supports), kafka);
	assert_null(sink_type_for("amqp://q", &supports));
	assert_null(sink_type_for("kafka:orders", &supports)); /* a scheme ends in :// */
	assert_null(sink_type_for("httpx://h.example/", &supports));
	/* the registry lists each member once, NULL after the last: as many as the
	 * subscription rules name */
	size_t n = 0, named = 0;
	while (sink_type_at(n))
		n++;
	for (size_t i = 0; i < sink_schemes_n; i++) {
		size_t k = 0;
		while (strcmp(sink_schemes[k].member, sink_schemes[i].member) != 0)
			k++;
		named += k == i; /* the first row of its member */
	}
	assert_int_equal(n, named);
	assert_true(n <= SINKS_MAX);
	for (size_t i = 0; i < n; i++)
		for (size_t k = i + 1; k < n; k++)
			assert_string_not_equal(sink_type_at(i)->name, sink_type_at(k)->name);
}

/* What each member takes: TLS files only at https://, no auth, signature or TLS for a
 * Kafka message, the envelope only there. */
static void test_capabilities(void **state)
{
	(void)state;
	unsigned http = 0, https = 0, kafka = 0;
	sink_type_for("http://h/", &http);
	sink_type_for("https://h/", &https);
	sink_type_for("kafka://t", &kafka);
	assert_true(http & SINK_CAN_TIMEOUT && http & SINK_CAN_HEADERS && http & SINK_CAN_SIGN);
	assert_int_equal(http & SINK_CAN_AUTH_ANY, SINK_CAN_AUTH_ANY);
	assert_false(http & SINK_CAN_TLS);
	assert_true(https & SINK_CAN_TLS);
	assert_false(http & SINK_CAN_ENVELOPE);
	assert_true(kafka & SINK_CAN_TIMEOUT);
	assert_true(kafka & SINK_CAN_HEADERS);
	assert_true(kafka & SINK_CAN_ORDERING);
	assert_true(kafka & SINK_CAN_ENVELOPE);
	assert_false(kafka & (SINK_CAN_AUTH_ANY | SINK_CAN_TLS | SINK_CAN_SIGN));
	assert_int_equal(sink_cap_of_auth(AUTH_NONE), 0);
	assert_int_equal(sink_cap_of_auth(AUTH_OAUTH2), SINK_CAN_AUTH_OAUTH2);
}

/* Each member says what core/sink_caps.c says of its schemes, and each row of core's
 * table has its member: the API never promises what no member does. */
static void test_members_match_the_subscription_rules(void **state)
{
	(void)state;
	char why[256];
	for (size_t i = 0; sink_type_at(i); i++) {
		const struct sink_type *t = sink_type_at(i);
		if (sink_type_check(t, why, sizeof(why)))
			fail_msg("%s", why);
	}
	for (size_t i = 0; i < sink_schemes_n; i++) {
		char endpoint[64];
		unsigned supports = 0;
		snprintf(endpoint, sizeof(endpoint), "%s://x", sink_schemes[i].scheme);
		const struct sink_type *t = sink_type_for(endpoint, &supports);
		assert_non_null(t);
		assert_string_equal(t->name, sink_schemes[i].member);
		assert_int_equal(supports, sink_schemes[i].supports);
		assert_ptr_equal(sink_scheme_of(endpoint), &sink_schemes[i]);
	}
}

/* A member that claims more than the rules allow, or a scheme they give to another
 * member, is refused by the check that runs before anything opens. */
static void test_check_refuses_a_mismatch(void **state)
{
	(void)state;
	char why[256];
	struct sink_type t = *sink_type_by_name("kafka");
	t.schemes[0].supports |= SINK_CAN_SIGN;
	assert_int_equal(sink_type_check(&t, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "kafka://"));
	t = *sink_type_by_name("kafka");
	t.schemes[1] = (struct sink_type_scheme){"https", SINK_CAN_TIMEOUT};
	assert_int_equal(sink_type_check(&t, why, sizeof(why)), -1);
	t = *sink_type_by_name("http");
	t.schemes[1] = (struct sink_type_scheme){NULL, 0}; /* https:// left out */
	assert_int_equal(sink_type_check(&t, why, sizeof(why)), -1);
}

static void test_refusal_words(void **state)
{
	(void)state;
	char text[256];
	sink_caps_refusal(sink_scheme_named("kafka"), SINK_CAN_AUTH_BASIC, text, sizeof(text));
	assert_string_equal(text, "kafka:// endpoints take no auth; Kafka credentials and TLS go "
				  "in the kafka_config setting");
	sink_caps_refusal(sink_scheme_named("http"), SINK_CAN_TLS, text, sizeof(text));
	assert_string_equal(text, "http:// endpoints take no tls; TLS files are for https:// "
				  "endpoints");
	sink_caps_refusal(sink_scheme_named("https"), SINK_CAN_ENVELOPE, text, sizeof(text));
	assert_string_equal(text, "https:// endpoints take no payload_format envelope; use json "
				  "or binary");
	sink_schemes_list(text, sizeof(text));
	assert_string_equal(text, "http://, https:// or kafka://");
}

/* Opened from the settings: HTTP always, Kafka only with kafka_brokers. */
static void test_set_opens_configured_members(void **state)
{
	(void)state;
	char err[512];
	struct config cfg;
	struct sink_set set;
	memset(&cfg, 0, sizeof(cfg));
	cfg.max_in_flight = 4;
	cfg.connect_timeout_ms = 1000;
	assert_int_equal(sink_set_open(&set, &cfg, err, sizeof(err)), 0);
	assert_int_equal(set.n, 1);
	assert_string_equal(set.members[0]->type->name, "http");
	assert_ptr_equal(sink_set_find(&set, "https://h.example/"), set.members[0]);
	assert_null(sink_set_find(&set, "kafka://orders"));
	assert_int_equal(sink_set_ready(&set, err, sizeof(err)), 0);
	sink_set_close(&set);
	assert_int_equal(set.n, 0);

	/* a broker that does not answer yet is no reason not to open */
	cfg.kafka_brokers = "127.0.0.1:9";
	cfg.kafka_wire_format = "plain";
	assert_int_equal(sink_set_open(&set, &cfg, err, sizeof(err)), 0);
	assert_int_equal(set.n, 2);
	struct sink *k = sink_set_find(&set, "KAFKA://orders");
	assert_non_null(k);
	assert_string_equal(k->type->name, "kafka");
	/* no kafka_dead_letter: no dead delivery is marked for a dead-letter topic */
	struct store_claim from_topic = {.source = "kafka:orders"}, from_api = {.source = NULL};
	assert_int_equal(sink_set_dead_letter(&set, &from_topic), 0);
	sink_set_close(&set);
	/* with it: those of events from an intake topic are, and only those */
	cfg.kafka_dead_letter = "{topic}.dlt";
	assert_int_equal(sink_set_open(&set, &cfg, err, sizeof(err)), 0);
	assert_int_equal(sink_set_dead_letter(&set, &from_topic), 1);
	assert_int_equal(sink_set_dead_letter(&set, &from_api), 0);
	struct store_claim from_outbox = {.source = "outbox"};
	assert_int_equal(sink_set_dead_letter(&set, &from_outbox), 0);
	sink_set_close(&set);
	cfg.kafka_dead_letter = NULL;

	/* a setting the member refuses: nothing stays open */
	cfg.kafka_brokers = NULL;
	cfg.ssrf_allow = "not-a-cidr";
	assert_int_equal(sink_set_open(&set, &cfg, err, sizeof(err)), -1);
	assert_int_equal(set.n, 0);
	sink_set_close(&set);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lookup_by_name_and_scheme),
		cmocka_unit_test(test_capabilities),
		cmocka_unit_test(test_members_match_the_subscription_rules),
		cmocka_unit_test(test_check_refuses_a_mismatch),
		cmocka_unit_test(test_refusal_words),
		cmocka_unit_test(test_set_opens_configured_members),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
