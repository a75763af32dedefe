/* utf8.c: see utf8.h. */
#include "util/utf8.h"

size_t utf8_valid_prefix(const unsigned char *t, size_t len)
{
	size_t i = 0;

	while (i < len) {
		unsigned char c = t[i];
		size_t k = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 :
			   (c & 0xf8) == 0xf0 ? 4 : 0;

		if (!k || i + k > len || (k == 2 && c < 0xc2))
			break;
		for (size_t j = 1; j < k; j++)
			if ((t[i + j] & 0xc0) != 0x80)
				return i;
		i += k;
	}
	return i;
}
