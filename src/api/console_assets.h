/* console_assets.h: the operator console's files, embedded in the binary at configure
 * time by CMakeLists.txt (console/ and the vendored npm files it names) as the table
 * console_assets[] of the generated console_assets.c. Served by routes_console.c. */
#ifndef OUTBOXD_API_CONSOLE_ASSETS_H
#define OUTBOXD_API_CONSOLE_ASSETS_H

struct console_asset {
	const char *path;             /* below /console/: "index.html", "vendor/htm-preact.js" */
	const char *content_type;
	const unsigned char *data;
	unsigned long len;
	const char *etag;             /* "\"<first 16 hex of the SHA-256>\"" */
};

extern const struct console_asset console_assets[];
extern const unsigned long console_assets_n;

#endif
