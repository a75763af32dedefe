/* file.c: a whole stream read into memory (file.h). */
#include "util/file.h"

#include <stdlib.h>

char *file_read_stream(FILE *f, size_t *len)
{
	char *text = NULL, chunk[4096];
	size_t size = 0, n;
	FILE *mem = open_memstream(&text, &size);
	if (!mem)
		return NULL;
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		fwrite(chunk, 1, n, mem);
	int bad = ferror(f) || fclose(mem) != 0;
	if (bad) {
		free(text);
		return NULL;
	}
	if (len)
		*len = size;
	return text;
}
