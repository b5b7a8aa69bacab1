/*
 * workload.h - what workload.c and workload_stamps.c share: the options, the fake driver's test
 * API, the launch period's state, and the --stamps and --slot helpers (workload_stamps.c).
 * The flags are documented at the top of workload.c.
 */
#ifndef VCUDA_WORKLOAD_H
#define VCUDA_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "../include/cuda_api.h"
#include "../include/nvml_api.h"

#define POLL_NS 50000000ull /* --stamps reads the fake's ring this often */

struct slot_opt { /* --slot PERIOD_US,START_US,LEN_US,FILL; period 0: not set */
	unsigned long long period_us, start_us, len_us;
	double fill;
};

struct opts {
	int device;
	unsigned long long chunk_mib, max_alloc_mib, hold_mib;
	double seconds;
	unsigned grid, block, graph, batch;
	unsigned long long ns_per_block, memset_kib;
	double duty;
	const char *stamps; /* --stamps FILE, NULL: not set */
	const char *hold_via; /* --hold-via LIB, NULL: not set */
	struct slot_opt slot;
	int unlink_shared; /* --unlink-shared 1: a tenant tampering with libvcuda's files */
};

struct span { /* the fake's struct fakegpu_span (fake/fake.h) */
	uint64_t start, end;
};

/* the fake driver's test API, found with dlsym: NULL on a real driver */
struct fake {
	int (*busy)(const char *, const int *, int, uint64_t *, uint64_t *);
	int (*set_ns)(uint64_t);
	int (*ran)(const char *, int, uint64_t, struct span *, int, uint64_t *);
	uint64_t (*kernel_ns)(uint64_t);
};

struct stamps { /* this process's runs on the engine so far, oldest first */
	struct span *v;
	size_t n, cap;
	uint64_t next;      /* the fake's ring index to read from */
	uint64_t polled_ns; /* when it was last read */
};

/* the launch period: what it launches, its state, what it measured */
struct run {
	const struct opts *o;
	struct fake fk;
	char uuid[NVML_UUID_BUFFER_SIZE];
	int pid, have; /* have: the fake's accounting of this device (fakegpu_busy_ns) */
	CUfunction f;
	CUgraph graph;
	CUgraphExec exec;
	CUdeviceptr buf;
	uint64_t kernel_ns;          /* one kernel at full load on the fake; 0 elsewhere */
	unsigned long long per_slot; /* --slot: launches at each slot start */
	int rt;                      /* --slot: 1 when the launches run at real-time priority */
	uint64_t slot_at;            /* --slot: the next slot start, CLOCK_MONOTONIC ns */
	uint64_t dstart, dt;         /* --duty: busy time and clock when the current block began */
	struct stamps st;
	unsigned long long launches, half_at;
	int marked;
	double marked_at, end;
	uint64_t b0, t0, b1, t1;
	const char *what; /* the failure, with rc */
	int rc;
};

/* workload.c */
uint64_t mono_ns(void);                           /* CLOCK_MONOTONIC in ns */
int err(struct run *r, const char *what, int rc); /* records the failure in r, returns -1 */

/* workload_stamps.c */
/* fills fk with the fake's test API, found with dlsym (NULLs on a real driver) */
void find_fake(struct fake *fk);
/* --stamps: reads the runs since the last read (first: only marks the ring's end) */
int stamps_poll(struct run *r, int first);
/* --stamps, after the launch period: drains the queue, reads the last runs, writes FILE */
int stamps_finish(struct run *r);
/* --slot: the first slot start at or after t, CLOCK_MONOTONIC ns */
uint64_t slot_start_ns(const struct slot_opt *s, uint64_t t);
/* --slot: launches at each slot start (FILL x LEN_US of kernel time, at least one) */
unsigned long long slot_launches(const struct opts *o, uint64_t kernel_ns);
/* --slot: launches to make now (a slot's worth at its start), else sleeps towards the next */
unsigned long long slot_due(struct run *r, uint64_t run_end);

#endif
