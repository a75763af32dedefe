/* path.c: files inside an operator's directory (see path.h). */
#include "util/path.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int path_readable_inside(const char *dir, const char *path)
{
	char real_dir[PATH_MAX], real_path[PATH_MAX];
	struct stat st;

	if (!dir || !*dir || !path || path[0] != '/' || !realpath(dir, real_dir) ||
	    !realpath(path, real_path))
		return 0;
	size_t n = strlen(real_dir);
	/* "/etc/outboxd" holds "/etc/outboxd/ca.pem", not "/etc/outboxd2/ca.pem"; "/" holds
	 * everything */
	int inside = strncmp(real_path, real_dir, n) == 0 &&
		     (real_path[n] == '/' || (n == 1 && real_dir[0] == '/'));
	return inside && stat(real_path, &st) == 0 && S_ISREG(st.st_mode) &&
	       access(real_path, R_OK) == 0;
}
