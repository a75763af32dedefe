/* token.c: API token scopes, generation and hashing (see token.h). No I/O but the
 * random source. */
#include "core/token.h"

#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/rand.h>

static const struct {
	const char *name;
	unsigned bit;
} scope_names[] = {
	{"ingest", TOKEN_SCOPE_INGEST},
	{"read", TOKEN_SCOPE_READ},
	{"operate", TOKEN_SCOPE_OPERATE},
	{"admin", TOKEN_SCOPE_ADMIN},
};
#define N_SCOPES (sizeof(scope_names) / sizeof(scope_names[0]))

unsigned token_scope_grants(unsigned scopes)
{
	if (scopes & TOKEN_SCOPE_ADMIN)
		return TOKEN_SCOPE_ALL;
	if (scopes & TOKEN_SCOPE_OPERATE)
		scopes |= TOKEN_SCOPE_READ;
	return scopes & TOKEN_SCOPE_ALL;
}

const char *token_scope_name(unsigned scope)
{
	for (size_t i = 0; i < N_SCOPES; i++)
		if (scope_names[i].bit == scope)
			return scope_names[i].name;
	return "?";
}

static unsigned scope_bit(const char *name, size_t len)
{
	for (size_t i = 0; i < N_SCOPES; i++)
		if (strlen(scope_names[i].name) == len && memcmp(scope_names[i].name, name, len) == 0)
			return scope_names[i].bit;
	return 0;
}

int token_scopes_from_json(const json_t *v, unsigned *out, struct input_error *err)
{
	if (!json_is_array(v) || json_array_size(v) == 0)
		return input_error_set(err, 400, "invalid_argument", "scopes",
				       "scopes must be a non-empty list of ingest, read, operate, "
				       "admin");
	unsigned mask = 0;
	size_t i;
	json_t *s;
	json_array_foreach(v, i, s) {
		char field[32];
		snprintf(field, sizeof(field), "scopes[%zu]", i);
		unsigned bit = json_is_string(s) ? scope_bit(json_string_value(s),
							    json_string_length(s)) : 0;
		if (!bit)
			return input_error_set(err, 400, "invalid_argument", field,
					       "%s must be one of ingest, read, operate, admin",
					       field);
		mask |= bit;
	}
	*out = mask;
	return 0;
}

void token_scopes_to_text(unsigned scopes, char *out, size_t outlen)
{
	size_t used = 0;
	out[0] = '\0';
	for (size_t i = 0; i < N_SCOPES; i++) {
		if (!(scopes & scope_names[i].bit))
			continue;
		int n = snprintf(out + used, outlen - used, "%s%s", used ? "," : "",
				 scope_names[i].name);
		if (n < 0 || (size_t)n >= outlen - used)
			return;
		used += (size_t)n;
	}
}

int token_scopes_from_text(const char *text, unsigned *out)
{
	unsigned mask = 0;
	while (text && *text) {
		size_t len = strcspn(text, ",");
		unsigned bit = scope_bit(text, len);
		if (!bit)
			return -1;
		mask |= bit;
		text += len;
		if (*text == ',')
			text++;
	}
	if (!mask)
		return -1;
	*out = mask;
	return 0;
}

json_t *token_scopes_json(unsigned scopes)
{
	json_t *a = json_array();
	for (size_t i = 0; i < N_SCOPES; i++)
		if (scopes & scope_names[i].bit)
			json_array_append_new(a, json_string(scope_names[i].name));
	return a;
}

int token_name_valid(const char *name)
{
	size_t n = name ? strlen(name) : 0;
	if (n == 0 || n > TOKEN_NAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return 0;
	}
	return 1;
}

static void hex(const unsigned char *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

int token_generate(char out[TOKEN_LEN + 1])
{
	unsigned char raw[(TOKEN_LEN - 4) / 2];
	if (RAND_bytes(raw, sizeof(raw)) != 1)
		return -1;
	memcpy(out, "obx_", 4);
	hex(raw, sizeof(raw), out + 4);
	OPENSSL_cleanse(raw, sizeof(raw));
	return 0;
}

void token_hash(const char *token, size_t len, char out[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;
	if (EVP_Digest(token, len, md, &n, EVP_sha256(), NULL) != 1 || n != 32) {
		out[0] = '\0';
		return;
	}
	hex(md, 32, out);
}
