/* replay.c: runs a fuzz target of this folder without libFuzzer, for make test: every
 * file of a seed directory as it is, then variants of each made by a fixed sequence of
 * mutations (bits flipped, bytes set to a parser's favourite characters, stretches cut,
 * repeated or moved), so that the same inputs run every time. Linked with one target
 * (its LLVMFuzzerTestOneInput, and LLVMFuzzerInitialize when it has one) in the
 * AddressSanitizer build of the tests: a target that stops building, crashes, leaks or
 * trips UndefinedBehaviorSanitizer on such inputs fails ctest fuzz/TARGET. Coverage-guided
 * search is `make fuzz` (scripts/fuzz.sh: clang and libFuzzer); this only shows the
 * target still runs.
 *
 *   fuzz_replay_TARGET SEED_DIR [VARIANTS_PER_SEED]   (default 16) */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

#define LONGEST_INPUT 8192 /* make fuzz's -max_len */

static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* The input in a buffer of exactly its size, so that a read past its end is caught. */
static void run(const uint8_t *data, size_t size)
{
	uint8_t *copy = malloc(size ? size : 1);

	if (!copy)
		abort();
	memcpy(copy, data, size);
	LLVMFuzzerTestOneInput(copy, size);
	free(copy);
}

/* One mutation of buf (len bytes, room for LONGEST_INPUT) in place; returns the new length. */
static size_t mutate(uint8_t *buf, size_t len)
{
	static const uint8_t favourite[] = {0, 0xff, 0x80, '"', '\\', '{', '}', '[', ']', ',',
					    ':', '%', '&', '=', '?', '/', '\r', '\n', ' ', '0', '9',
					    '-', '.', 'e', 'u'};
	size_t at = len ? next() % len : 0, n = len ? 1 + next() % (len - at) : 0;

	switch (next() % 6) {
	case 0: /* a bit flipped */
		if (len)
			buf[at] ^= (uint8_t)(1u << (next() % 8));
		break;
	case 1: /* a byte set to one parsers treat apart */
		if (len)
			buf[at] = favourite[next() % sizeof(favourite)];
		break;
	case 2: /* a stretch cut out */
		memmove(buf + at, buf + at + n, len - at - n);
		len -= n;
		break;
	case 3: /* the input cut short */
		len = at;
		break;
	case 4: /* a stretch repeated */
		if (len + n > LONGEST_INPUT)
			n = LONGEST_INPUT - len;
		memmove(buf + at + n, buf + at, len - at);
		len += n;
		break;
	default: { /* a stretch copied over another place */
		size_t to = len ? next() % len : 0;

		if (n > len - to)
			n = len - to;
		memmove(buf + to, buf + at, n);
		break;
	}
	}
	return len;
}

/* The seed at path, cut to LONGEST_INPUT like make fuzz's inputs (free it). */
static uint8_t *read_seed(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	char *text = f ? file_read_stream(f, size) : NULL;

	if (f)
		fclose(f);
	if (text && *size > LONGEST_INPUT)
		*size = LONGEST_INPUT;
	return (uint8_t *)text;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

int main(int argc, char **argv)
{
	struct dirent **names;
	long variants = argc > 2 ? strtol(argv[2], NULL, 10) : 16, inputs = 0;
	int n;

	if (argc < 2) {
		fprintf(stderr, "usage: %s SEED_DIR [VARIANTS_PER_SEED]\n", argv[0]);
		return 2;
	}
	if (LLVMFuzzerInitialize)
		LLVMFuzzerInitialize(&argc, &argv);
	n = scandir(argv[1], &names, NULL, by_name);
	if (n < 0) {
		perror(argv[1]);
		return 2;
	}
	for (int i = 0; i < n; i++) {
		char path[4096];
		size_t size, len;
		uint8_t *seed, work[LONGEST_INPUT];

		if (names[i]->d_name[0] == '.') {
			free(names[i]);
			continue;
		}
		snprintf(path, sizeof(path), "%s/%s", argv[1], names[i]->d_name);
		free(names[i]);
		seed = read_seed(path, &size);
		if (!seed) {
			perror(path);
			return 2;
		}
		run(seed, size);
		inputs++;
		for (long v = 0; v < variants; v++) {
			memcpy(work, seed, size);
			len = size;
			for (uint64_t k = 1 + next() % 4; k > 0; k--) /* one to four mutations */
				len = mutate(work, len);
			run(work, len);
			inputs++;
		}
		free(seed);
	}
	free(names);
	if (inputs == 0) {
		fprintf(stderr, "%s: no seeds in %s\n", argv[0], argv[1]);
		return 1;
	}
	printf("%s: %ld inputs, none crashed\n", argv[0], inputs);
	return 0;
}
