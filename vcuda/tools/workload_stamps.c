/*
 * workload_stamps.c - the workload's --stamps machinery (this process's runs on the engine, from
 * the fake driver's ring) and its --slot helpers (launches at the starts of a periodic slot).
 * The flags are documented at the top of workload.c.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "workload.h"

#define POLL_MAX 1024 /* runs per fakegpu_ran call */

static void sleep_until_ns(uint64_t t)
{
	struct timespec ts = { (time_t)(t / 1000000000ull), (long)(t % 1000000000ull) };
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
	}
}

void find_fake(struct fake *fk)
{
	fk->busy = (int (*)(const char *, const int *, int, uint64_t *, uint64_t *))dlsym(
		RTLD_DEFAULT, "fakegpu_busy_ns");
	fk->set_ns = (int (*)(uint64_t))dlsym(RTLD_DEFAULT, "fakegpu_set_ns_per_block");
	fk->ran = (int (*)(const char *, int, uint64_t, struct span *, int, uint64_t *))dlsym(
		RTLD_DEFAULT, "fakegpu_ran");
	fk->kernel_ns = (uint64_t(*)(uint64_t))dlsym(RTLD_DEFAULT, "fakegpu_kernel_ns");
}

/* ---- --stamps: this process's runs on the engine, from the fake's ring ---- */

/* Appends a run, joining it to the previous one when they touch (a FIFO device records each
 * kernel on its own). */
static int stamps_add(struct stamps *st, struct span s)
{
	if (st->n && st->v[st->n - 1].end == s.start) {
		st->v[st->n - 1].end = s.end;
		return 0;
	}
	if (st->n == st->cap) {
		size_t cap = st->cap ? st->cap * 2 : 1024;
		struct span *v = realloc(st->v, cap * sizeof(*v));
		if (!v)
			return -1;
		st->v = v;
		st->cap = cap;
	}
	st->v[st->n++] = s;
	return 0;
}

/* Reads the runs recorded since the last read; the first read only marks the ring's end. */
int stamps_poll(struct run *r, int first)
{
	struct span buf[POLL_MAX];
	int n;
	do {
		n = r->fk.ran(r->uuid, r->pid, r->st.next, buf, first ? 0 : POLL_MAX, &r->st.next);
		if (n == -2)
			return err(r, "--stamps: the fake's ring wrapped past runs not yet read: fakegpu_ran", n);
		if (n < 0)
			return err(r, "--stamps: fakegpu_ran", n);
		for (int i = 0; i < n; i++)
			if (stamps_add(&r->st, buf[i]) != 0)
				return err(r, "--stamps: realloc", 0);
	} while (n == POLL_MAX);
	r->st.polled_ns = mono_ns();
	return 0;
}

static int stamps_write(const struct stamps *st, const char *path)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	for (size_t i = 0; i < st->n; i++)
		fprintf(f, "%llu %llu\n", (unsigned long long)st->v[i].start, (unsigned long long)st->v[i].end);
	int bad = ferror(f);
	return fclose(f) != 0 || bad ? -1 : 0;
}

/* After the launch period: waits for the queue to drain, reads the last runs, writes FILE. */
int stamps_finish(struct run *r)
{
	int rc = cuCtxSynchronize();
	if (rc != CUDA_SUCCESS)
		return err(r, "cuCtxSynchronize (--stamps)", rc);
	if (stamps_poll(r, 0) != 0)
		return -1;
	if (stamps_write(&r->st, r->o->stamps) != 0)
		return err(r, "--stamps: writing the file", errno);
	return 0;
}

/* ---- --slot: launches at the starts of a periodic slot ---- */

/* The first slot start at or after t: CLOCK_MONOTONIC in us modulo PERIOD_US is START_US. */
uint64_t slot_start_ns(const struct slot_opt *s, uint64_t t)
{
	uint64_t p = s->period_us * 1000, at = t - t % p + s->start_us * 1000;
	return at < t ? at + p : at;
}

/* Launches that make FILL x LEN_US of kernel time (kernel_ns each, x N for a graph of N), >= 1. */
unsigned long long slot_launches(const struct opts *o, uint64_t kernel_ns)
{
	double per = (double)kernel_ns * (o->graph ? o->graph : 1);
	double n = o->slot.fill * (double)o->slot.len_us * 1000 / (per > 0 ? per : 1);
	return n >= 1 ? (unsigned long long)n : 1;
}

/* How many launches to make now: a slot's worth at its start, else none, after sleeping towards
 * the slot's next start, the end of the run or the next --stamps read, whichever is first. */
unsigned long long slot_due(struct run *r, uint64_t run_end)
{
	uint64_t t = mono_ns();
	if (t >= r->slot_at) {
		r->slot_at = slot_start_ns(&r->o->slot, t + 1);
		return r->per_slot;
	}
	uint64_t until = r->slot_at < run_end ? r->slot_at : run_end;
	if (r->o->stamps && r->st.polled_ns + POLL_NS < until)
		until = r->st.polled_ns + POLL_NS;
	sleep_until_ns(until);
	return 0;
}
