/* pacing.c: the claim pacing rules (pacing.h). */
#include "core/pacing.h"

void pacing_answered(struct pacing *p, const struct pacing_config *c, int64_t now_us, bool ok,
		     size_t asked, size_t got)
{
	if (!ok) {
		p->next_claim_us = now_us + c->store_down_us;
	} else if (got >= asked) {
		p->next_claim_us = now_us;
	} else {
		p->next_claim_us = now_us + c->idle_poll_us;
		p->short_claim_us = now_us;
	}
}

void pacing_due_hint(struct pacing *p, int64_t now_us, int64_t wait_ms)
{
	int64_t at = now_us + (wait_ms > 0 ? wait_ms : 0) * 1000;
	if (at < p->next_claim_us)
		p->next_claim_us = at;
}

void pacing_woken(struct pacing *p, const struct pacing_config *c, int64_t now_us)
{
	int64_t at = p->short_claim_us + c->gap_us;
	if (at < now_us)
		at = now_us;
	if (at < p->next_claim_us)
		p->next_claim_us = at;
}

struct pacing_decision pacing_decide(const struct pacing *p, const struct pacing_config *c,
				     const struct pacing_turn *t, int64_t now_us)
{
	struct pacing_decision d = {0, false, -1};
	int room = c->max_in_flight - t->active - (int)t->asked;
	int want = room < c->batch ? room : c->batch;
	d.worth = !t->saturated &&
		  (t->active == 0 || want == c->batch || room >= c->max_in_flight / 4);
	if (t->claim_max && (size_t)want > t->claim_max)
		want = (int)t->claim_max;
	if (t->stopping || t->asked || want <= 0 || (!d.worth && !(t->saturated && t->retry_due)))
		return d;
	if (now_us >= p->next_claim_us || t->retry_due) {
		d.claim = (size_t)want;
		d.wait_us = 0;
	} else {
		d.wait_us = p->next_claim_us - now_us;
	}
	return d;
}

void claim_yield_observe(struct claim_yield *y, int64_t now_us, int64_t waited_us)
{
	y->small_us = now_us;
	if (waited_us > YIELD_TARGET_US) {
		int64_t g = y->gap_us * 2;
		y->gap_us = g < YIELD_GAP_MIN_US ? YIELD_GAP_MIN_US
						 : g > YIELD_GAP_MAX_US ? YIELD_GAP_MAX_US : g;
	} else {
		y->gap_us -= y->gap_us / 8;
		if (y->gap_us < YIELD_GAP_MIN_US / 4)
			y->gap_us = 0;
	}
}

int64_t claim_yield_gap(struct claim_yield *y, int64_t now_us)
{
	if (y->gap_us && now_us - y->small_us >= YIELD_IDLE_US)
		y->gap_us = 0;
	return y->gap_us;
}
