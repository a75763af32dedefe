/* path.h: whether a file named by a user lies inside a directory an operator chose —
 * symbolic links and ".." resolved first, so neither leads out of it. */
#ifndef OUTBOXD_UTIL_PATH_H
#define OUTBOXD_UTIL_PATH_H

/* 1 when path (absolute) names a readable regular file whose real location is inside
 * the real location of dir (itself or below), 0 otherwise: missing, unreadable, not a
 * regular file, or outside — the caller's answer should not tell these apart for a path
 * outside dir, or it would say what exists there. */
int path_readable_inside(const char *dir, const char *path);

#endif
