/* fake_slice.c - time slicing between contexts (FAKEGPU_SLICE_US, FAKEGPU_SWITCH_US), as a real
 * GPU without MPS runs them: each process queues its own work, the engine runs one context for up
 * to a slice, then the next with work, and a switch is busy time no process owns. The timeline is
 * played forward lazily under the state file's lock (struct fk_state). */

#include <stdint.h>

#include "fake.h"

int fk_sliced(const struct fk_state *s)
{
	return __atomic_load_n(&s->slice_ns, __ATOMIC_RELAXED) != 0;
}

/* Appends what ran (slot: a pid slot, or -1 for a context switch) to the ring, extending the
 * newest entry when it is the same context's and ends where this starts. */
static void ran_locked(struct fk_state *s, int slot, uint64_t start, uint64_t d)
{
	int32_t pid = slot < 0 ? 0 : s->pids[slot].pid;
	uint32_t us = slot < 0 ? UINT32_MAX : (uint32_t)slot;
	struct fk_kern *last = s->nkern ? &s->ring[(s->nkern - 1) % FK_RING] : NULL;
	if (last && last->slot == us && last->pid == pid && last->end == start) {
		last->end += d;
	} else {
		struct fk_kern *k = &s->ring[s->nkern % FK_RING];
		k->start = start;
		k->end = start + d;
		k->pid = pid;
		k->slot = us;
		s->nkern++;
	}
	s->sched_all += d; /* a switch keeps the engine busy too */
	if (slot >= 0)
		s->pids[slot].sched_ns += d;
}

/* The next pid slot with queued work after the current one, -1 if none. */
static int next_context(const struct fk_state *s)
{
	for (int i = 1; i <= FK_PIDS; i++) {
		int j = ((s->cur < 0 ? 0 : s->cur) + i) % FK_PIDS;
		if (s->queued[j])
			return j;
	}
	return -1;
}

/* Plays the time-sliced engine forward to now. */
void fk_slice_run_locked(struct fk_state *s, uint64_t now)
{
	if (s->ran_to == 0 || s->ran_to > now + 1000000000ull)
		s->ran_to = now;
	while (s->ran_to < now) {
		uint64_t left = now - s->ran_to;
		if (s->switch_left) {
			uint64_t d = left < s->switch_left ? left : s->switch_left;
			ran_locked(s, -1, s->ran_to, d);
			s->switch_left -= d;
			s->ran_to += d;
			continue;
		}
		if (s->cur < 0 || !s->queued[s->cur] || !s->slice_left) {
			int next = next_context(s);
			if (next < 0) { /* idle: the next context starts with no switch */
				s->cur = -1;
				s->ran_to = now;
				break;
			}
			if (next != s->cur && s->cur >= 0)
				s->switch_left = s->switch_ns;
			s->cur = next;
			s->slice_left = s->slice_ns;
			continue;
		}
		uint64_t d = left;
		if (s->queued[s->cur] < d)
			d = s->queued[s->cur];
		if (s->slice_left < d)
			d = s->slice_left;
		ran_locked(s, s->cur, s->ran_to, d);
		s->queued[s->cur] -= d;
		s->slice_left -= d;
		s->ran_to += d;
	}
}

/* dur ns of work on this process's own queue; the launching thread blocks while more than
 * FAKEGPU_MAX_QUEUE_US of its work waits. */
void fk_slice_enqueue(struct fk_dev *d, uint64_t dur)
{
	struct fk_state *s = d->st;
	for (;;) {
		fk_lock(s);
		fk_slice_run_locked(s, fk_now());
		struct fk_pidslot *ps = fk_pid_slot(d, fk.pid);
		int slot = (int)(ps - s->pids);
		if (s->queued[slot] > fk.max_queue_ns) {
			uint64_t wait = s->queued[slot] - fk.max_queue_ns;
			fk_unlock(s);
			fk_sleep_ns(wait); /* at least that long: the engine is shared */
			continue;
		}
		s->queued[slot] += dur;
		fk_unlock(s);
		return;
	}
}

/* Waits until this process's queued work has run. */
void fk_slice_sync(struct fk_dev *d)
{
	struct fk_state *s = d->st;
	for (;;) {
		fk_lock(s);
		fk_slice_run_locked(s, fk_now());
		int slot = fk_slot_locked(s, fk.pid, fk.pidns);
		uint64_t left = slot < 0 ? 0 : s->queued[slot];
		fk_unlock(s);
		if (!left)
			return;
		fk_wait_ns(left);
	}
}

/* Whether the ring's newest entry may still grow: the run of the context on the engine, played
 * up to ran_to (ran_locked extends it while that context keeps the engine). FIFO entries are
 * final when appended. */
static int newest_open(const struct fk_state *s)
{
	if (!fk_sliced(s) || !s->nkern || s->cur < 0)
		return 0;
	const struct fk_kern *k = &s->ring[(s->nkern - 1) % FK_RING];
	return k->slot == (uint32_t)s->cur && k->end == s->ran_to;
}

/* The runs of pid slot `slot` (-1: none) held by pid, from ring index `from` on, oldest first, at
 * most max into out; *next is where to go on. A sliced timeline is played forward to now first,
 * and its newest run, which may still grow, is left for the next call. max 0: *next is the
 * ring's end now. -1: a negative max, or from past the ring's end; -2: the ring has wrapped
 * past from (*next: the oldest entry it still holds). */
int fk_ran_locked(struct fk_state *s, int slot, int32_t pid, uint64_t from, struct fakegpu_span *out,
		  int max, uint64_t *next)
{
	if (fk_sliced(s))
		fk_slice_run_locked(s, fk_now());
	uint64_t end = s->nkern - (uint64_t)newest_open(s), i = from;
	if (max == 0) {
		*next = end;
		return 0;
	}
	if (max < 0 || from > s->nkern)
		return -1;
	if (s->nkern - from > FK_RING) {
		*next = s->nkern - FK_RING;
		return -2;
	}
	int n = 0;
	for (; i < end && n < max; i++) {
		const struct fk_kern *k = &s->ring[i % FK_RING];
		if (slot >= 0 && k->slot == (uint32_t)slot && k->pid == pid)
			out[n++] = (struct fakegpu_span){ k->start, k->end };
	}
	*next = i;
	return n;
}
