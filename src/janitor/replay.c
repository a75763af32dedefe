/* replay.c: the paced replay job runner (see replay.h). */
#include "janitor/replay.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/filter.h"
#include "util/clock.h"
#include "util/log.h"

#define PAGE_MAX 1000

/* The pacing slot of a job (created on first sight). */
static int pace_slot(struct replay_runner *r, const char *id, int64_t now)
{
	int free_slot = -1;
	for (int i = 0; i < REPLAY_MAX_JOBS; i++) {
		if (strcmp(r->pace[i].id, id) == 0)
			return i;
		if (free_slot < 0 && !r->pace[i].id[0])
			free_slot = i;
	}
	if (free_slot < 0)
		return -1;
	snprintf(r->pace[free_slot].id, UUID_STR_LEN, "%s", id);
	r->pace[free_slot].last_ms = now;
	r->pace[free_slot].credit = 1; /* start at once */
	return free_slot;
}

static void finish(struct replay_runner *r, struct store_job *j, const char *state,
		   const char *error)
{
	snprintf(j->state, sizeof(j->state), "%s", state);
	free(j->error);
	j->error = error ? strdup(error) : NULL;
	j->updated_at = clock_now_ms();
	store_job_update(r->st, j);
	for (int i = 0; i < REPLAY_MAX_JOBS; i++)
		if (strcmp(r->pace[i].id, j->id) == 0)
			r->pace[i].id[0] = '\0';
	log_info("replay job %s %s: %lld of %lld replayed", j->id, state, (long long)j->done,
		 (long long)j->matched);
	json_t *p = json_pack("{s:s, s:s, s:I, s:I, s:s?, s:s?}", "job_id", j->id, "state", state,
			      "matched", (json_int_t)j->matched, "replayed", (json_int_t)j->done,
			      "actor", j->actor, "error", error);
	ops_event_emit(&r->ops, "replay_job.finished", "", p);
}

/* Replays up to want deliveries of job j. Returns how many, or -1 on a store error. */
static long run_job(struct replay_runner *r, struct store_job *j, size_t want)
{
	struct delivery_filter f = {0};
	struct filter_buf fb;
	struct input_error err;
	struct store_delivery *items = NULL;
	char *next = NULL;
	size_t n = 0, replayed = 0;

	json_t *filter = json_loads(j->filter, 0, NULL);
	if (!filter) {
		finish(r, j, "failed", "stored filter is not JSON");
		return 0;
	}
	int dead = json_is_true(json_object_get(filter, "dead"));
	int64_t before = json_integer_value(json_object_get(filter, "before_ms"));
	json_object_del(filter, "dead");
	json_object_del(filter, "before_ms");
	/* A failing_since duration counts back from when the job was started. */
	if (filter_parse_json(filter, r->reg, "filter.", before ? before : clock_now_ms(), &f,
			      &fb, &err)) {
		/* e.g. the subscription named in it was deleted since */
		finish(r, j, "failed", err.message);
		json_decref(filter);
		return 0;
	}
	f.dead_only = dead;
	if (before && (!f.to_ms || f.to_ms > before))
		f.to_ms = before;
	f.cursor = j->cursor;
	f.limit = want;
	int rc = store_deliveries_list(r->st, &f, &items, &n, &next);
	json_decref(filter);
	if (rc) {
		free(next);
		return -1;
	}
	if (n) {
		char (*ids)[UUID_STR_LEN] = calloc(n, sizeof(*ids));
		if (!ids) {
			store_deliveries_free(items, n);
			free(next);
			return -1;
		}
		for (size_t i = 0; i < n; i++)
			memcpy(ids[i], items[i].id, UUID_STR_LEN);
		rc = store_replay(r->st, (const char(*)[UUID_STR_LEN])ids, n, j->force, NULL, &replayed);
		free(ids);
		if (rc) {
			store_deliveries_free(items, n);
			free(next);
			return -1;
		}
		/* The cursor moves past the last row listed, replayed or not. */
		const struct store_delivery *last = &items[n - 1];
		char cursor[96];
		snprintf(cursor, sizeof(cursor), "ca:%lld:%s", (long long)last->created_at, last->id);
		free(j->cursor);
		j->cursor = next ? next : strdup(cursor);
		next = NULL;
	}
	store_deliveries_free(items, n);
	free(next);
	j->done += (int64_t)replayed;
	if (n < want) {
		finish(r, j, "done", NULL);
	} else {
		j->updated_at = clock_now_ms();
		if (store_job_update(r->st, j) == STORE_NOT_FOUND)
			log_info("replay job %s stopped: it was cancelled", j->id);
	}
	return (long)replayed;
}

long replay_tick(struct replay_runner *r, int64_t now_mono_ms, int *active)
{
	struct store_job *jobs = NULL;
	size_t n = 0;
	long total = 0;

	*active = 0;
	if (store_jobs_running(r->st, &jobs, &n) != STORE_OK)
		return -1;
	for (size_t i = 0; i < n; i++) {
		struct store_job *j = &jobs[i];
		int slot = pace_slot(r, j->id, now_mono_ms);
		(*active)++;
		if (slot < 0)
			continue; /* more running jobs than slots: the rest wait their turn */
		double elapsed = (double)(now_mono_ms - r->pace[slot].last_ms) / 1000.0;
		r->pace[slot].last_ms = now_mono_ms;
		double credit = r->pace[slot].credit + elapsed * j->rate;
		if (credit > j->rate)
			credit = j->rate; /* at most one second's worth at once */
		size_t want = (size_t)credit;
		if (want > PAGE_MAX)
			want = PAGE_MAX;
		if (want == 0) {
			r->pace[slot].credit = credit;
			continue;
		}
		long done = run_job(r, j, want);
		if (done < 0) {
			total = total ? total : -1;
			break;
		}
		r->pace[slot].credit = credit - (double)want;
		total += done;
	}
	store_jobs_free(jobs, n);
	return total;
}
