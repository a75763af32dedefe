/* test_redact.c: deliver/redact.c, the one redaction of causes and log lines — each
 * credential of a subscription in each encoding it travels in (as given, percent-encoded,
 * '+' for spaces, JSON-escaped, the base64 of Basic credentials, OAuth2's Basic value),
 * secret headers, overlapping occurrences, a credential cut off at the end of a text,
 * and a buffer too small for the mask. Pure: no sockets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "deliver/oauth2.h"
#include "deliver/redact.h"

/* text redacted with r, into a static buffer of size bytes. */
static const char *redacted(const struct redact_set *r, const char *text, size_t size)
{
	static char out[4096];
	assert_true(size <= sizeof(out));
	redact_copy(r, text, strlen(text), out, size);
	return out;
}

static void test_encodings_of_a_secret(void **state)
{
	struct redact_set r;
	redact_init(&r);
	/* a space, reserved characters, a quote, a backslash, a slash and a non-ASCII letter */
	assert_int_equal(redact_add_secret(&r, "q v&l=\"u\\e/\xc3\xbc"), 0);
	static const char *const shown[] = {
		"raw q v&l=\"u\\e/\xc3\xbc end",
		"url q%20v%26l%3D%22u%5Ce%2F%C3%BC end",
		"lower q%20v%26l%3d%22u%5ce%2f%c3%bc end",
		"form q+v%26l%3D%22u%5Ce%2F%C3%BC end",
		"json q v&l=\\\"u\\\\e/\xc3\xbc end",
		"python q v&l=\\\"u\\\\e/\\u00fc end",
		"slash q v&l=\\\"u\\\\e\\/\\u00fc end",
	};
	for (size_t i = 0; i < sizeof(shown) / sizeof(shown[0]); i++) {
		const char *out = redacted(&r, shown[i], 512);
		char want[64];
		snprintf(want, sizeof(want), "%.*s ******** end", (int)strcspn(shown[i], " "),
			 shown[i]);
		assert_string_equal(out, want);
	}
	/* every occurrence, and nothing else touched */
	assert_string_equal(redacted(&r, "a q v&l=\"u\\e/\xc3\xbc b q%20v%26l%3D%22u%5Ce%2F%C3%BC c",
				     512), "a ******** b ******** c");
	assert_string_equal(redacted(&r, "nothing here", 512), "nothing here");
	redact_clear(&r);
	assert_int_equal(r.n, 0);
}

static void test_subscription_credentials(void **state)
{
	struct header_kv headers[] = {{"X-Key", "hdr-s3cret", 1}, {"X-Team", "growth", 0}};
	struct subscription s = {.auth_type = AUTH_BASIC, .auth_user = "ann",
				 .auth_secret = "b4sic-pw!", .headers = headers, .n_headers = 2};
	struct redact_set r;
	redact_init(&r);
	assert_int_equal(redact_add_subscription(&r, &s), 0);
	/* base64("ann:b4sic-pw!") */
	assert_string_equal(redacted(&r, "authorization: Basic YW5uOmI0c2ljLXB3IQ==\r\n"
					 "x-key: hdr-s3cret\r\nx-team: growth", 512),
			    "authorization: Basic ********\r\nx-key: ********\r\nx-team: growth");
	assert_string_equal(redacted(&r, "pw=b4sic-pw%21", 512), "pw=********");
	redact_clear(&r);

	/* OAuth2: client_secret and password in the form, the Basic value of the request */
	struct subscription o = {.auth_type = AUTH_OAUTH2};
	o.oauth2 = (struct oauth2_params){.grant = OAUTH2_PASSWORD, .client_auth = OAUTH2_AUTH_BASIC,
					  .token_url = "https://idp/t", .client_id = "my client",
					  .client_secret = "cl!ent s3cret", .username = "u",
					  .password = "p@ss w0rd"};
	char basic[512];
	assert_int_equal(oauth2_basic_header_value(&o.oauth2, basic, sizeof(basic)), 0);
	assert_int_equal(redact_add_subscription(&r, &o), 0);
	char text[1024];
	snprintf(text, sizeof(text), "POST /t\r\nauthorization: %s\r\n\r\n"
				     "grant_type=password&username=u&password=p%%40ss%%20w0rd", basic);
	assert_string_equal(redacted(&r, text, 512),
			    "POST /t\r\nauthorization: Basic ********\r\n\r\n"
			    "grant_type=password&username=u&password=********");
	assert_string_equal(redacted(&r, "client_secret=cl%21ent+s3cret", 512),
			    "client_secret=********");
	redact_clear(&r);
}

static void test_overlaps_and_cut_off(void **state)
{
	struct redact_set r;
	redact_init(&r);
	assert_int_equal(redact_add_secret(&r, "s3cret"), 0);
	assert_int_equal(redact_add_secret(&r, "my-s3cret-long"), 0);
	/* the longer one whole, not "my-********-long" */
	assert_string_equal(redacted(&r, "[my-s3cret-long] [s3cret]", 512), "[********] [********]");
	/* overlapping occurrences: one mask over both, no end of either left */
	assert_int_equal(redact_add_secret(&r, "xxab"), 0);
	assert_int_equal(redact_add_secret(&r, "absecret!"), 0);
	assert_string_equal(redacted(&r, "<xxabsecret!>", 512), "<********>");
	/* a text that ends inside a credential: its start goes too (4 characters or more) */
	assert_string_equal(redacted(&r, "cut here: my-s3cr", 512), "cut here: ********");
	assert_string_equal(redacted(&r, "cut here: s3cr", 512), "cut here: ********");
	assert_string_equal(redacted(&r, "ends in: s3c", 512), "ends in: s3c");
	/* cut by the buffer: 16 bytes hold "abc: " and no mask after it, nor the secret */
	const char *out = redacted(&r, "abc: my-s3cret-long and more", 16);
	assert_null(strstr(out, "s3c"));
	assert_true(strlen(out) < 16);
	/* in place, growing the text up to its buffer */
	char buf[32] = "x s3cret y";
	redact_apply(&r, buf, sizeof(buf));
	assert_string_equal(buf, "x ******** y");
	redact_clear(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_encodings_of_a_secret),
		cmocka_unit_test(test_subscription_credentials),
		cmocka_unit_test(test_overlaps_and_cut_off),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
