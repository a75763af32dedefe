/* uuid.c: UUIDv7 (RFC 9562 §5.7) with a per-process monotonic counter (§6.2, method 1).
 *
 * Layout: 48-bit unix ms | ver 7 | 12-bit counter (rand_a) | var 10 | 62 random bits.
 * The (timestamp, counter) pair only ever grows: in the same ms, or when the wall clock
 * steps back, the counter is bumped; when it overflows, the timestamp is advanced by one
 * ms. The counter is reseeded randomly with its top bit clear on every new ms, which
 * leaves at least 2048 ids per ms before that happens. Randomness comes from OpenSSL
 * (drawn in pools, see uuid_random);
 * without it there is no safe id to hand out, so its failure aborts. */
#include "util/uuid.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/rand.h>

#include "util/clock.h"
#include "util/log.h"

#define COUNTER_MAX 0xfff
#define COUNTER_SEED_MASK 0x7ff /* top bit clear: room to count before overflow */
#define TIMESTAMP_MASK 0xffffffffffffULL

static pthread_mutex_t uuid_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t last_ms;
static unsigned last_counter;

/* Random bytes are drawn from OpenSSL a pool at a time per thread: one RAND_bytes call
 * (which checks the pid with a system call each time) per 409 ids instead of per id —
 * it showed up in the ingest profile. The pool is refilled after a fork too. */
#define POOL_BYTES 4090

static __thread unsigned char pool[POOL_BYTES];
static __thread size_t pool_left;
static __thread unsigned pool_gen;
static unsigned fork_gen;   /* bumped in a forked child: its pools must not repeat */
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void after_fork_child(void)
{
	fork_gen++;
}

static void register_fork_handler(void)
{
	pthread_atfork(NULL, NULL, after_fork_child);
}

static void uuid_random(unsigned char *out, int len)
{
	pthread_once(&fork_once, register_fork_handler);
	unsigned gen = __atomic_load_n(&fork_gen, __ATOMIC_RELAXED);
	if (pool_left < (size_t)len || pool_gen != gen) {
		if (RAND_bytes(pool, POOL_BYTES) != 1) {
			char msg[256];

			ERR_error_string_n(ERR_get_error(), msg, sizeof(msg));
			log_error("uuid: RAND_bytes failed: %s", msg);
			abort();
		}
		pool_left = POOL_BYTES;
		pool_gen = gen;
	}
	memcpy(out, pool + POOL_BYTES - pool_left, (size_t)len);
	OPENSSL_cleanse(pool + POOL_BYTES - pool_left, (size_t)len);
	pool_left -= (size_t)len;
}

void uuid_v7(char out[37])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char rnd[10]; /* 8 for rand_b, 2 for a counter seed */
	unsigned char b[16];
	int64_t now = clock_now_ms();
	uint64_t ts;
	unsigned counter;
	size_t o = 0;

	uuid_random(rnd, (int)sizeof(rnd));

	pthread_mutex_lock(&uuid_lock);
	if (now > 0 && (uint64_t)now > last_ms) {
		last_ms = (uint64_t)now;
		last_counter = (((unsigned)rnd[8] << 8) | rnd[9]) & COUNTER_SEED_MASK;
	} else if (last_counter < COUNTER_MAX) {
		last_counter++;
	} else {
		last_ms++;
		last_counter = (((unsigned)rnd[8] << 8) | rnd[9]) & COUNTER_SEED_MASK;
	}
	ts = last_ms & TIMESTAMP_MASK;
	counter = last_counter;
	pthread_mutex_unlock(&uuid_lock);

	for (int i = 0; i < 6; i++)
		b[i] = (unsigned char)(ts >> (40 - 8 * i));
	b[6] = (unsigned char)(0x70 | (counter >> 8));
	b[7] = (unsigned char)(counter & 0xff);
	b[8] = (unsigned char)(0x80 | (rnd[0] & 0x3f));
	for (int i = 9; i < 16; i++)
		b[i] = rnd[i - 8];

	for (int i = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			out[o++] = '-';
		out[o++] = hex[b[i] >> 4];
		out[o++] = hex[b[i] & 0xf];
	}
	out[o] = '\0';
}

static bool is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

bool uuid_valid(const char *text)
{
	if (!text)
		return false;
	for (int i = 0; i < 36; i++) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (text[i] != '-')
				return false;
		} else if (!is_hex(text[i])) {
			return false; /* also stops at an early NUL */
		}
	}
	return text[36] == '\0';
}
