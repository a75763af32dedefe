/* alloc_count.h: counts the heap allocations (malloc, calloc, realloc that moves, strdup,
 * and those of the libraries called) that one thread makes between alloc_count_begin and
 * alloc_count_end, through AddressSanitizer's allocator hooks: for tests that hold a hot
 * path to its allocation budget (make test builds with ASan). In a build without ASan
 * alloc_count_available() is 0 and such a test skips.
 *
 * Header-only: each test binary installs the hooks once, the first time it asks. */
#ifndef OUTBOXD_TESTS_ALLOC_COUNT_H
#define OUTBOXD_TESTS_ALLOC_COUNT_H

#include <stddef.h>

#if defined(__SANITIZE_ADDRESS__)
/* From the sanitizers' allocator interface (libasan exports it; GCC does not ship the
 * header that declares it, sanitizer/allocator_interface.h). Nonzero when installed. */
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
					      void (*free_hook)(const volatile void *));

static _Thread_local int alloc_counting;
static _Thread_local long alloc_counted;

static void alloc_count_malloc_hook(const volatile void *ptr, size_t size)
{
	(void)ptr;
	(void)size;
	if (alloc_counting)
		alloc_counted++;
}

static void alloc_count_free_hook(const volatile void *ptr)
{
	(void)ptr;
}

static inline int alloc_count_available(void)
{
	static int installed; /* 1 installed, -1 refused */
	if (!installed)
		installed = __sanitizer_install_malloc_and_free_hooks(alloc_count_malloc_hook,
								      alloc_count_free_hook) ? 1 : -1;
	return installed == 1;
}

/* Counting on, for the calling thread. */
static inline void alloc_count_begin(void)
{
	alloc_counting = 1;
}

/* Counting off; the allocations the thread made since the first begin (the count goes on
 * across begin/end pairs until alloc_count_reset). */
static inline long alloc_count_end(void)
{
	alloc_counting = 0;
	return alloc_counted;
}

static inline void alloc_count_reset(void)
{
	alloc_counted = 0;
}
#else
static inline int alloc_count_available(void)
{
	return 0;
}
static inline void alloc_count_begin(void)
{
}
static inline long alloc_count_end(void)
{
	return 0;
}
static inline void alloc_count_reset(void)
{
}
#endif

#endif
