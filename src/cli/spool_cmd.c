/* spool_cmd.c: `outboxd spool inspect|replay FILE` (see spool_cmd.h).
 *
 * Must not write to the file it reads (spool_scan_file opens it read-only), and must not
 * claim deliveries or touch leases other than by applying a spooled result where the
 * lease of the instance that spooled it is still there and has expired. */
#include "cli/spool_cmd.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/model.h"
#include "store/spool.h"
#include "store/store.h"
#include "util/clock.h"

#define INGEST_CHUNK 10000 /* events per store_ingest_replay (the store's batch limit) */

void spool_cmd_usage(FILE *out)
{
	fputs("usage: outboxd spool inspect FILE [--json]\n"
	      "       outboxd spool replay FILE [--json] [serve settings: --db URL ...]\n\n"
	      "inspect  lists the records of a spool file or of a .corrupt-* copy of a damaged\n"
	      "         tail: per record its byte offset, type and count, each event's id, type\n"
	      "         and created_at, each result's delivery id and status; damaged stretches\n"
	      "         are skipped (the scan resumes at the next whole record) and listed.\n"
	      "replay   re-inserts the good records into the store of serve's settings (db):\n"
	      "         events keep their ids, so those already stored are counted as\n"
	      "         duplicates and never stored twice (running it again is harmless);\n"
	      "         results are applied where the lease of the instance that spooled them\n"
	      "         is still there and has expired, the other deliveries are delivered\n"
	      "         again. It may run while outboxd serves the same store, which then\n"
	      "         delivers the inserted events.\n\n"
	      "Neither changes or deletes FILE. Exit codes: 0 done, 1 the file cannot be read or\n"
	      "not every good record could be applied, 2 bad usage.\n",
	      out);
}

static const char *type_name(uint8_t type)
{
	return type == SPOOL_REC_EVENTS ? "events" : type == SPOOL_REC_RESULTS ? "results" : "unknown";
}

static json_t *time_json(int64_t ms)
{
	char buf[RFC3339_LEN];

	return ms ? json_string(clock_format_rfc3339(ms, buf)) : json_null();
}

/* ---- inspect ------------------------------------------------------------------------ */

struct inspect {
	int json;
	json_t *records, *damage;       /* --json: built, printed at the end */
	size_t events, results, unreadable;
};

/* The JSON of one record (also what the text output prints from). */
static json_t *record_json(uint64_t offset, uint8_t type, const void *data, size_t len)
{
	json_t *o = json_pack("{s:I, s:s, s:I}", "offset", (json_int_t)offset, "type",
			      type_name(type), "bytes", (json_int_t)len);

	if (type == SPOOL_REC_EVENTS) {
		struct store_event_in *evs;
		size_t n;
		if (spool_decode_events(data, len, &evs, &n)) {
			json_object_set_new(o, "undecodable", json_true());
			return o;
		}
		json_t *list = json_array();
		for (size_t i = 0; i < n; i++) {
			json_t *e = json_pack("{s:s, s:s?, s:s?, s:s?, s:s?, s:o, s:I, s:I}", "id",
					      evs[i].id, "event_type", evs[i].event_type, "source",
					      evs[i].source, "source_event_id",
					      evs[i].source_event_id, "partition_key",
					      evs[i].partition_key, "created_at",
					      time_json(evs[i].created_at), "payload_bytes",
					      (json_int_t)evs[i].payload_len, "subscriptions",
					      (json_int_t)evs[i].n_subscriptions);
			json_array_append_new(list, e);
		}
		json_object_set_new(o, "count", json_integer((json_int_t)n));
		json_object_set_new(o, "events", list);
		free(evs);
	} else if (type == SPOOL_REC_RESULTS) {
		struct store_result *rs;
		size_t n;
		if (spool_decode_results(data, len, &rs, &n)) {
			json_object_set_new(o, "undecodable", json_true());
			return o;
		}
		json_t *list = json_array();
		for (size_t i = 0; i < n; i++) {
			int dead = rs[i].status == DELIVERY_FAILED && !rs[i].next_attempt_at;
			json_array_append_new(
				list, json_pack("{s:s, s:s, s:b, s:i, s:I}", "delivery_id",
						rs[i].delivery_id, "status",
						delivery_status_name(rs[i].status), "dead", dead,
						"attempt_count", rs[i].attempt_count, "attempts",
						(json_int_t)rs[i].n_attempts));
		}
		json_object_set_new(o, "count", json_integer((json_int_t)n));
		json_object_set_new(o, "results", list);
		spool_results_free(rs, n);
	} else {
		json_object_set_new(o, "type_code", json_integer(type));
	}
	return o;
}

static const char *jstr(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));
	return s ? s : "-";
}

static int inspect_record_cb(void *ctx, uint64_t offset, uint8_t type, const void *data,
			     size_t len)
{
	struct inspect *in = ctx;
	json_t *o = record_json(offset, type, data, len), *x;
	size_t count = (size_t)json_integer_value(json_object_get(o, "count")), i;

	if (json_is_true(json_object_get(o, "undecodable")) ||
	    (type != SPOOL_REC_EVENTS && type != SPOOL_REC_RESULTS))
		in->unreadable++;
	else if (type == SPOOL_REC_EVENTS)
		in->events += count;
	else
		in->results += count;
	if (in->json) {
		json_array_append_new(in->records, o);
		return 0;
	}
	if (json_is_true(json_object_get(o, "undecodable"))) {
		printf("%-12llu %-8s  %zu bytes that cannot be decoded (the checksum is right: a "
		       "bug, please report it)\n", (unsigned long long)offset, type_name(type), len);
	} else if (type != SPOOL_REC_EVENTS && type != SPOOL_REC_RESULTS) {
		printf("%-12llu type %u    %zu bytes of a record type this outboxd does not know "
		       "(written by a newer version?)\n", (unsigned long long)offset, (unsigned)type,
		       len);
	} else {
		printf("%-12llu %-8s %6zu\n", (unsigned long long)offset, type_name(type), count);
	}
	json_array_foreach(json_object_get(o, "events"), i, x)
		printf("    event %s  %-28s  %s\n", jstr(x, "id"), jstr(x, "event_type"),
		       jstr(x, "created_at"));
	json_array_foreach(json_object_get(o, "results"), i, x)
		printf("    delivery %s  %s%s  (attempts %lld)\n", jstr(x, "delivery_id"),
		       jstr(x, "status"), json_is_true(json_object_get(x, "dead")) ? " dead" : "",
		       (long long)json_integer_value(json_object_get(x, "attempt_count")));
	json_decref(o);
	return 0;
}

static void inspect_damage_cb(void *ctx, const struct spool_damage *d)
{
	struct inspect *in = ctx;

	if (in->json)
		json_array_append_new(in->damage, json_pack("{s:I, s:I, s:s}", "offset",
							     (json_int_t)d->offset, "bytes",
							     (json_int_t)d->bytes, "reason",
							     d->reason));
	else
		printf("%-12llu DAMAGED  %llu bytes skipped (%s)\n",
		       (unsigned long long)d->offset, (unsigned long long)d->bytes, d->reason);
}

static int inspect(const char *path, int json)
{
	struct inspect in = {.json = json, .records = json_array(), .damage = json_array()};
	struct spool_scan_handlers on = {inspect_record_cb, inspect_damage_cb};
	struct spool_scan_summary sum;
	int rc;

	if (access(path, R_OK)) {
		fprintf(stderr, "outboxd: cannot read %s: %s\n", path, strerror(errno));
		json_decref(in.records);
		json_decref(in.damage);
		return 1;
	}
	if (!json)
		printf("%-12s %-8s %6s\n", "OFFSET", "TYPE", "COUNT");
	rc = spool_scan_file(path, &on, &in, &sum);
	if (rc != SPOOL_OK) {
		fprintf(stderr, "outboxd: cannot read %s: %s\n", path, spool_strerror(rc));
		json_decref(in.records);
		json_decref(in.damage);
		return 1;
	}
	if (json) {
		json_t *out = json_pack(
			"{s:s, s:I, s:o, s:o, s:{s:I, s:I, s:I, s:I, s:I, s:I}}", "file", path, "bytes",
			(json_int_t)sum.size, "records", in.records, "damage", in.damage, "summary",
			"records", (json_int_t)sum.records, "events", (json_int_t)in.events,
			"results", (json_int_t)in.results, "unreadable", (json_int_t)in.unreadable,
			"damaged", (json_int_t)sum.damaged, "bytes_skipped",
			(json_int_t)sum.bytes_skipped);
		char *text = json_dumps(out, JSON_INDENT(2));
		if (text)
			printf("%s\n", text);
		free(text);
		json_decref(out);
		return 0;
	}
	json_decref(in.records);
	json_decref(in.damage);
	printf("%s: %llu bytes, %zu records (%zu events, %zu delivery results%s), %zu damaged "
	       "stretches (%llu bytes)\n",
	       path, (unsigned long long)sum.size, sum.records, in.events, in.results,
	       in.unreadable ? ", some unreadable" : "", sum.damaged,
	       (unsigned long long)sum.bytes_skipped);
	return 0;
}

/* ---- replay ------------------------------------------------------------------------- */

struct replay {
	store *st;
	const char *owner;              /* this tool's own lease owner name */
	size_t records, events, inserted, duplicates;
	size_t results, applied, unreadable, damaged;
	uint64_t bytes_skipped;
	int store_rc;                   /* the store error that stopped it, or STORE_OK */
	uint64_t stopped_at;
};

/* Applies one spooled result where its delivery is still leased and the lease has
 * expired: the instance that spooled it held that lease, and nobody took the delivery
 * since. A live lease is another round under way; no lease means it was released (a
 * restart, the reaper) and delivered again. 1 when applied, 0 when not, -1 on a store
 * error (in r->store_rc). */
static int apply_result(struct replay *r, const struct store_result *res)
{
	struct store_delivery d;
	int applied = 0, rc = store_delivery_get(r->st, res->delivery_id, &d);

	if (rc == STORE_NOT_FOUND)
		return 0;
	if (rc != STORE_OK) {
		r->store_rc = rc;
		return -1;
	}
	if (d.lease_owner && d.lease_until <= clock_now_ms() &&
	    store_set_owner(r->st, d.lease_owner) == STORE_OK) {
		rc = store_record_results(r->st, res, 1);
		store_set_owner(r->st, r->owner);
		if (rc != STORE_OK) {
			r->store_rc = rc;
			store_delivery_free(&d);
			return -1;
		}
		/* The store applies it only under the same lease: read back whether it did. */
		struct store_delivery after;
		if (store_delivery_get(r->st, res->delivery_id, &after) == STORE_OK) {
			applied = (!after.lease_owner || strcmp(after.lease_owner, d.lease_owner)) &&
				  after.attempt_count == res->attempt_count &&
				  after.status == res->status;
			store_delivery_free(&after);
		}
	}
	store_delivery_free(&d);
	return applied;
}

static int replay_record_cb(void *ctx, uint64_t offset, uint8_t type, const void *data,
			    size_t len)
{
	struct replay *r = ctx;

	if (type == SPOOL_REC_EVENTS) {
		struct store_event_in *evs;
		size_t n;
		if (spool_decode_events(data, len, &evs, &n)) {
			fprintf(stderr, "outboxd: the events record at byte %llu cannot be decoded "
				"(its checksum is right: a bug, please report it); skipped\n",
				(unsigned long long)offset);
			r->unreadable++;
			return 0;
		}
		for (size_t off = 0; off < n; off += INGEST_CHUNK) {
			size_t k = n - off < INGEST_CHUNK ? n - off : INGEST_CHUNK;
			int rc = store_ingest_replay(r->st, evs + off, k);
			if (rc != STORE_OK) {
				r->store_rc = rc;
				r->stopped_at = offset;
				free(evs);
				return 1;
			}
			for (size_t i = 0; i < k; i++)
				r->duplicates += (size_t)evs[off + i].duplicate;
			r->inserted += k; /* less the duplicates, taken out at the end */
		}
		r->events += n;
		free(evs);
	} else if (type == SPOOL_REC_RESULTS) {
		struct store_result *rs;
		size_t n;
		if (spool_decode_results(data, len, &rs, &n)) {
			fprintf(stderr, "outboxd: the results record at byte %llu cannot be decoded "
				"(its checksum is right: a bug, please report it); skipped\n",
				(unsigned long long)offset);
			r->unreadable++;
			return 0;
		}
		for (size_t i = 0; i < n; i++) {
			int a = apply_result(r, &rs[i]);
			if (a < 0) {
				r->stopped_at = offset;
				spool_results_free(rs, n);
				return 1;
			}
			r->applied += (size_t)a;
		}
		r->results += n;
		spool_results_free(rs, n);
	} else {
		fprintf(stderr, "outboxd: the record at byte %llu has type %u, which this outboxd "
			"does not know (written by a newer version?); skipped: replay the file with "
			"that version\n", (unsigned long long)offset, (unsigned)type);
		r->unreadable++;
		return 0;
	}
	r->records++;
	return 0;
}

static void replay_damage_cb(void *ctx, const struct spool_damage *d)
{
	fprintf(stderr, "outboxd: %llu damaged bytes at byte %llu (%s) skipped: what they held "
		"cannot be recovered\n", (unsigned long long)d->bytes,
		(unsigned long long)d->offset, d->reason);
	(void)ctx;
}

static int replay(const char *path, const struct config *cfg, int json)
{
	struct replay r = {.store_rc = STORE_OK};
	struct spool_scan_handlers on = {replay_record_cb, replay_damage_cb};
	struct spool_scan_summary sum;
	char err[1024], owner[192], host[128] = "localhost";
	int rc, exit_code = 1;

	/* The file first: nothing is opened in the store for a file that cannot be read. */
	if (access(path, R_OK)) {
		fprintf(stderr, "outboxd: cannot read %s: %s\n", path, strerror(errno));
		return 1;
	}
	/* Opening an SQLite path creates a store there: a mistyped db would take the events
	 * where no outboxd delivers them. The store outboxd serves exists already. */
	if (cfg->db && strncmp(cfg->db, "sqlite:", 7) == 0 && access(cfg->db + 7, F_OK)) {
		fprintf(stderr, "outboxd: no store at %s (%s): give the db that outboxd serve uses "
			"(--db, OUTBOXD_DB or the config file)\n", cfg->db + 7, strerror(errno));
		return 1;
	}
	gethostname(host, sizeof(host) - 1);
	snprintf(owner, sizeof(owner), "spool-replay@%s:%d", host, (int)getpid());
	r.owner = owner;
	rc = store_open_shared(cfg->db, owner, &r.st, err, sizeof(err));
	if (rc != STORE_OK) {
		fprintf(stderr, "outboxd: cannot open the store: %s\n", err);
		return 1;
	}
	rc = spool_scan_file(path, &on, &r, &sum);
	store_close(r.st);
	r.inserted -= r.duplicates;
	if (rc == SPOOL_IO || rc == SPOOL_NOMEM) {
		fprintf(stderr, "outboxd: cannot read %s: %s\n", path, spool_strerror(rc));
		return 1;
	}
	if (r.store_rc != STORE_OK)
		fprintf(stderr, "outboxd: stopped at the record at byte %llu: the store answered: "
			"%s. What came before it is stored; run the same command again once the "
			"store is back (what is stored already is skipped)\n",
			(unsigned long long)r.stopped_at, store_strerror(r.store_rc));
	else if (!r.unreadable)
		exit_code = 0;
	if (json) {
		json_t *out = json_pack(
			"{s:s, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "file", path,
			"complete", exit_code == 0, "records", (json_int_t)r.records, "events",
			(json_int_t)r.events, "inserted", (json_int_t)r.inserted, "duplicates",
			(json_int_t)r.duplicates, "results", (json_int_t)r.results,
			"results_applied", (json_int_t)r.applied, "unreadable",
			(json_int_t)r.unreadable, "damaged", (json_int_t)sum.damaged,
			"bytes_skipped", (json_int_t)sum.bytes_skipped);
		if (r.store_rc != STORE_OK)
			json_object_set_new(out, "error", json_string(store_strerror(r.store_rc)));
		char *text = json_dumps(out, JSON_INDENT(2));
		if (text)
			printf("%s\n", text);
		free(text);
		json_decref(out);
		return exit_code;
	}
	printf("%s%s:\n"
	       "  records             %zu%s\n"
	       "  events inserted     %zu\n"
	       "  already stored      %zu (duplicates: not stored again)\n"
	       "  results applied     %zu of %zu\n"
	       "  damaged stretches   %zu (%llu bytes) skipped\n",
	       r.store_rc == STORE_OK ? "Replayed " : "Partly replayed ", path, r.records,
	       r.unreadable ? " (some could not be read: see above)" : "", r.inserted,
	       r.duplicates, r.applied, r.results, sum.damaged,
	       (unsigned long long)sum.bytes_skipped);
	if (r.results > r.applied)
		printf("%zu delivery results were not applied: their deliveries are no longer "
		       "leased by the instance that spooled them (or gone), so they are or were "
		       "delivered again (at least once).\n", r.results - r.applied);
	if (r.inserted)
		printf("A running outboxd on this store delivers the inserted events within a "
		       "second or so; otherwise the next one started does.\n");
	if (exit_code == 0)
		printf("%s was not changed. Every good record it holds is in the store now: you may "
		       "delete it (running this again would insert nothing).\n", path);
	return exit_code;
}

/* ---- the command --------------------------------------------------------------------- */

int spool_cmd_main(int argc, char **argv, spool_cmd_settings_fn load_settings)
{
	const char *path = NULL;
	int json = 0, n = 0;

	if (argc < 1 || strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0 ||
	    strcmp(argv[0], "help") == 0) {
		spool_cmd_usage(argc < 1 ? stderr : stdout);
		return argc < 1 ? 2 : 0;
	}
	int is_replay = strcmp(argv[0], "replay") == 0;
	if (!is_replay && strcmp(argv[0], "inspect") != 0) {
		fprintf(stderr, "outboxd: unknown spool command \"%s\"\n", argv[0]);
		spool_cmd_usage(stderr);
		return 2;
	}
	/* FILE is the first argument that is neither a flag nor a flag's value; the rest are
	 * --json and (replay) serve's settings. */
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			spool_cmd_usage(stdout);
			return 0;
		} else if (strcmp(argv[i], "--json") == 0) {
			json = 1;
		} else if (!path && strncmp(argv[i], "--", 2) != 0) {
			path = argv[i];
		} else {
			argv[1 + n++] = argv[i];
			if (strncmp(argv[i], "--", 2) == 0 && !strchr(argv[i], '=') && i + 1 < argc)
				argv[1 + n++] = argv[++i];
		}
	}
	if (!path) {
		fprintf(stderr, "outboxd: spool %s needs a FILE\n", argv[0]);
		spool_cmd_usage(stderr);
		return 2;
	}
	if (!is_replay) {
		if (n) {
			fprintf(stderr, "outboxd: spool inspect takes FILE and --json only (%s?)\n",
				argv[1]);
			return 2;
		}
		return inspect(path, json);
	}
	struct config cfg;
	if (load_settings(n, argv + 1, &cfg))
		return 2;
	int rc = replay(path, &cfg, json);
	config_free(&cfg);
	return rc;
}
