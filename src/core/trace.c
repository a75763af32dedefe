/* trace.c: W3C traceparent validation and child spans (see trace.h). */
#include "core/trace.h"

#include <string.h>

#include "util/fmt.h"

static bool hex_run(const char *s, size_t n, bool *all_zero)
{
	*all_zero = true;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return false;
		if (c != '0')
			*all_zero = false;
	}
	return true;
}

bool trace_valid(const char *t)
{
	bool zero_trace, zero_parent, unused;
	if (!t || strlen(t) != 55 || strncmp(t, "00-", 3) != 0 || t[35] != '-' || t[52] != '-')
		return false;
	return hex_run(t + 3, 32, &zero_trace) && !zero_trace && hex_run(t + 36, 16, &zero_parent) &&
	       !zero_parent && hex_run(t + 53, 2, &unused);
}

void trace_child(const char *parent, const char *event_id, uint64_t span,
		 char out[TRACEPARENT_LEN])
{
	char trace[32], flags[2] = {'0', '1'};
	if (trace_valid(parent)) {
		memcpy(trace, parent + 3, 32);
		memcpy(flags, parent + 53, 2);
	} else {
		int k = 0;
		for (const char *p = event_id; *p && k < 32; p++)
			if (*p != '-')
				trace[k++] = *p;
		while (k < 32)
			trace[k++] = '0';
		trace[0] = trace[0] == '0' && !memcmp(trace, "00000000000000000000000000000000", 32)
				   ? '1' : trace[0];
	}
	/* "00-" trace "-" span "-" flags: 55 characters */
	memcpy(out, "00-", 3);
	memcpy(out + 3, trace, 32);
	out[35] = '-';
	fmt_hex64(span ? span : 1, out + 36);
	out[52] = '-';
	memcpy(out + 53, flags, 2);
	out[55] = '\0';
}
