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
