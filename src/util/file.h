/* file.h: a whole stream read into memory (a configuration file, a payload file, stdin). */
#ifndef OUTBOXD_UTIL_FILE_H
#define OUTBOXD_UTIL_FILE_H

#include <stddef.h>
#include <stdio.h>

/* Everything left in f, NUL-terminated, in a new buffer (free it); *len (when not NULL)
 * its length. NULL when out of memory or f fails to read. f stays open. */
char *file_read_stream(FILE *f, size_t *len);

#endif
