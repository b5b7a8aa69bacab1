/*
 * node.c - the files shared with the node's compute controller (vcuda_control.h).
 *
 * vcuda.usage (shared dir, ours to write): launched cost units and waits per device, the
 * report the node splits the GPU's busy time by. vcuda.control (read-only mount beside the
 * config): the node's allowance per device and its heartbeat. While the heartbeat is fresh
 * the local sampler stands down and launches are admitted against the node's allowance;
 * when it goes stale the container holds the node's fallback rate (a fixed share, never
 * more); a container that never saw a heartbeat runs the local sampler (sampler.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vcuda.h"

#define VC_MIN_STALE_NS 500000000ull /* never call a node stale sooner than this */

int vc_usage_attach(char *err, size_t errlen)
{
	char path[VCUDA_PATH_LEN + 32];
	snprintf(path, sizeof(path), "%s/%s", vcg.cfg.shared_dir, VCUDA_USAGE_FILE);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
	if (fd < 0) {
		snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
		return -1;
	}
	struct vcuda_usage *u = MAP_FAILED;
	off_t size = -1;
	int rc = -1;
	fchmod(fd, 0666);
	if (flock(fd, LOCK_EX) != 0 || (size = vc_fd_size(fd)) < 0) {
		snprintf(err, errlen, "cannot lock %s: %s", path, strerror(errno));
		goto out;
	}
	if (size != 0 && size != (off_t)sizeof(*u)) {
		snprintf(err, errlen, "%s has %lld bytes, want %zu", path, (long long)size,
			 sizeof(*u));
		goto out;
	}
	if (size == 0 && ftruncate(fd, sizeof(*u)) != 0) {
		snprintf(err, errlen, "cannot size %s: %s", path, strerror(errno));
		goto out;
	}
	u = mmap(NULL, sizeof(*u), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (u == MAP_FAILED) {
		snprintf(err, errlen, "cannot map %s: %s", path, strerror(errno));
		goto out;
	}
	if (__atomic_load_n(&u->magic, __ATOMIC_ACQUIRE) != VCUDA_USAGE_MAGIC) {
		memset(u, 0, sizeof(*u));
		u->version = VCUDA_USAGE_VERSION;
		u->size = sizeof(*u);
		u->device_count = (uint32_t)vcg.ndev;
		__atomic_store_n(&u->magic, VCUDA_USAGE_MAGIC, __ATOMIC_RELEASE);
	}
	if (u->version != VCUDA_USAGE_VERSION || u->size != sizeof(*u) ||
	    u->device_count != (uint32_t)vcg.ndev) {
		snprintf(err, errlen, "%s: version %u, %u devices; want version %u, %d devices", path,
			 u->version, u->device_count, VCUDA_USAGE_VERSION, vcg.ndev);
		munmap(u, sizeof(*u));
		goto out;
	}
	vcg.usage = u;
	rc = 0;
out:
	flock(fd, LOCK_UN);
	close(fd);
	return rc;
}

/* Maps vcuda.control read-only when it exists: beside the config file, or VCUDA_CONTROL when
 * the limits came from the environment (local testing). Absent or unusable: no node. */
void vc_control_attach(void)
{
	const char *env = getenv("VCUDA_CONTROL");
	if (vcg.cfg_path[0] == '/') {
		char dir[VCUDA_PATH_LEN];
		snprintf(dir, sizeof(dir), "%s", vcg.cfg_path);
		snprintf(vcg.control_path, sizeof(vcg.control_path), "%s/%s", dirname(dir),
			 VCUDA_CONTROL_FILE);
	} else if (env && *env) {
		snprintf(vcg.control_path, sizeof(vcg.control_path), "%s", env);
	} else {
		return;
	}
	int fd = open(vcg.control_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	/* version 1 (before cost_bits): a container started before them, its file kept */
	const struct vcuda_control *c = MAP_FAILED;
	off_t size = vc_fd_size(fd);
	uint32_t version = size == (off_t)sizeof(*c) ? VCUDA_CONTROL_VERSION : 1;
	if (size == (off_t)sizeof(*c) || size == (off_t)VCUDA_CONTROL_SIZE_V1)
		c = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (c == MAP_FAILED) {
		vc_say_once(VC_MSG_NODE, "vcuda: %s is not a %zu-byte control file; compute shares "
			    "are decided locally", vcg.control_path, sizeof(*c));
		return;
	}
	if (c->magic != VCUDA_CONTROL_MAGIC || c->version != version || c->size != (uint32_t)size ||
	    c->device_count != (uint32_t)vcg.ndev) {
		vc_say_once(VC_MSG_NODE, "vcuda: %s: magic 0x%08x version %u, %u devices; want "
			    "0x%08x version %u, %d devices; compute shares are decided locally",
			    vcg.control_path, c->magic, c->version, c->device_count,
			    VCUDA_CONTROL_MAGIC, version, vcg.ndev);
		munmap((void *)c, (size_t)size);
		return;
	}
	vcg.control_costs = version >= 2;
	vcg.control = c;
}

/* A consistent copy of the node's entry for device idx; 0 if the node is writing. */
static int read_entry(int idx, struct vc_node_view *v, uint64_t *seq)
{
	const struct vcuda_control_device *d = &vcg.control->dev[idx];
	for (int tries = 0; tries < 64; tries++) {
		uint64_t s1 = __atomic_load_n(&d->seq, __ATOMIC_ACQUIRE);
		if (s1 & 1)
			continue;
		/* acquire loads: the second read of seq cannot move above them (no fences:
		 * TSan builds do not support them) */
		v->mode = __atomic_load_n(&d->mode, __ATOMIC_ACQUIRE);
		v->period_us = __atomic_load_n(&d->period_us, __ATOMIC_ACQUIRE);
		v->allowance = __atomic_load_n(&d->allowance, __ATOMIC_ACQUIRE);
		v->stamp_ns = __atomic_load_n(&d->stamp_ns, __ATOMIC_ACQUIRE);
		v->rate = vc_bits2d(__atomic_load_n(&d->rate_bits, __ATOMIC_ACQUIRE));
		v->fallback = vc_bits2d(__atomic_load_n(&d->fallback_bits, __ATOMIC_ACQUIRE));
		v->slot_period_us = __atomic_load_n(&d->slot_period_us, __ATOMIC_ACQUIRE);
		v->slot_start_us = __atomic_load_n(&d->slot_start_us, __ATOMIC_ACQUIRE);
		v->slot_len_us = __atomic_load_n(&d->slot_len_us, __ATOMIC_ACQUIRE);
		v->slot_flags = __atomic_load_n(&d->slot_flags, __ATOMIC_ACQUIRE);
		v->cost = vcg.control_costs ? vc_bits2d(__atomic_load_n(&vcg.control->cost_bits[idx],
									 __ATOMIC_ACQUIRE))
					    : 0;
		if (__atomic_load_n(&d->seq, __ATOMIC_ACQUIRE) == s1) {
			*seq = s1;
			return 1;
		}
	}
	return 0;
}

/* Where the node controller stands for device idx, by this process's own clock. */
int vc_node_state(int idx, uint64_t now, struct vc_node_view *v)
{
	struct vc_dev *dv = &vcg.dev[idx];
	uint64_t seq;
	if (!vcg.control || !read_entry(idx, v, &seq) || seq == 0 ||
	    v->mode == VCUDA_CONTROL_NONE)
		return VC_NODE_NEVER; /* no node, or it has not decided: the local sampler */
	uint64_t last = __atomic_load_n(&dv->node_seq, __ATOMIC_RELAXED);
	if (seq != last) {
		__atomic_store_n(&dv->node_seq, seq, __ATOMIC_RELAXED);
		__atomic_store_n(&dv->node_seen_ns, now, __ATOMIC_RELAXED);
		__atomic_store_n(&dv->node_ever, 1, __ATOMIC_RELAXED);
		return VC_NODE_FRESH;
	}
	uint64_t stale = (uint64_t)v->period_us * 1000ull * VCUDA_CONTROL_STALE_PERIODS;
	if (stale < VC_MIN_STALE_NS)
		stale = VC_MIN_STALE_NS;
	uint64_t seen = __atomic_load_n(&dv->node_seen_ns, __ATOMIC_RELAXED);
	if (seen && now < seen + stale)
		return VC_NODE_FRESH;
	if (!seen) { /* first look at an old heartbeat: give the node one window */
		__atomic_store_n(&dv->node_seen_ns, now, __ATOMIC_RELAXED);
		__atomic_store_n(&dv->node_ever, 1, __ATOMIC_RELAXED);
		return VC_NODE_FRESH;
	}
	/* gone: hold its fixed rate; without one (it never learned a cost) decide locally */
	return v->fallback > 0 ? VC_NODE_STALE : VC_NODE_NEVER;
}

/* With a slot (vcuda_control.h), the next start of it after now (CLOCK_MONOTONIC, which the
 * node and every container on the host share); 0 without one. */
uint64_t vc_node_slot_next(const struct vc_node_view *v, uint64_t now)
{
	if (!v->slot_period_us || v->slot_start_us >= v->slot_period_us || v->rate <= 0)
		return 0;
	uint64_t P = 1000ull * v->slot_period_us, start = 1000ull * v->slot_start_us;
	uint64_t into = (now % P + P - start) % P;
	return now + P - into;
}

/* With a confining slot (VCUDA_SLOT_CONFINE), the end of the slot now is in, or 0 where now is
 * past its end (a launch waits for the next start, credit or not); without one, UINT64_MAX. */
uint64_t vc_node_slot_end(const struct vc_node_view *v, uint64_t now)
{
	uint64_t next = vc_node_slot_next(v, now);
	if (!next || !(v->slot_flags & VCUDA_SLOT_CONFINE) || v->slot_len_us >= v->slot_period_us)
		return UINT64_MAX;
	uint64_t end = next - 1000ull * v->slot_period_us + 1000ull * v->slot_len_us;
	return now < end ? end : 0;
}

/* The node's allowance now: what it set at stamp_ns plus its rate since, for at most two
 * periods (a late heartbeat never turns into unbounded credit; clocks of another time
 * namespace are clamped the same way). With a slot, a slot period's credit comes at once, at
 * the slot's start: the allowance at the slot's next start. A held-back container then
 * launches a period's worth at its slot's start and waits for the next, so its queue has
 * drained by the time the next container's slot starts. */
uint64_t vc_node_allowed(const struct vc_node_view *v, uint64_t now)
{
	uint64_t next = vc_node_slot_next(v, now);
	if (next)
		now = next;
	uint64_t dt = now > v->stamp_ns ? now - v->stamp_ns : 0, cap = 2000ull * v->period_us;
	if (dt > cap)
		dt = cap;
	double add = v->rate > 0 ? v->rate * (double)dt : 0;
	return v->allowance + (uint64_t)add;
}

/* Sampler thread, every tick: act on a change of the node's state for device idx. Returns
 * after clamping the local allowance when the node took over, switched to limited, or went
 * stale (then the fallback rate is held). */
void vc_node_tick(int idx, uint64_t now)
{
	struct vc_node_view v;
	struct vc_dev *dv = &vcg.dev[idx];
	int st = vc_node_state(idx, now, &v);
	uint32_t want = st == VC_NODE_FRESH ? v.mode : st == VC_NODE_STALE ? 100u : 0u;
	uint32_t had = __atomic_exchange_n(&dv->node_mode, want, __ATOMIC_ACQ_REL);
	if (vcg.debug && want != had)
		fprintf(stderr, "vcuda-debug: dev %d node %d mode %u -> %u (launched %llu refilled %llu "
			"allowance %llu rate %.5g fallback %.5g)\n", idx, st, had, want,
			(unsigned long long)vc_launched(idx),
			(unsigned long long)__atomic_load_n(&vcg.region->dev[idx].refilled, __ATOMIC_RELAXED),
			(unsigned long long)v.allowance, v.rate, v.fallback);
	vc_queue_cost(idx, st == VC_NODE_FRESH ? v.cost : 0);
	if (want == had) {
		if (st == VC_NODE_FRESH && v.mode == VCUDA_CONTROL_LIMITED) {
			/* the local credit never runs ahead of the node's allowance (it may
			 * lower it, e.g. after a generous start) */
			struct vc_region_dev *rd = &vcg.region->dev[idx];
			uint64_t allowed = vc_node_allowed(&v, now);
			uint64_t r = __atomic_load_n(&rd->refilled, __ATOMIC_RELAXED);
			while (r > allowed && !__atomic_compare_exchange_n(&rd->refilled, &r, allowed, 1,
									   __ATOMIC_RELEASE,
									   __ATOMIC_RELAXED)) {
			}
			/* a slot that has just come to confine: launches on credit taken before
			 * look at its end from now on (the slow path keeps it after) */
			uint64_t end = vc_node_slot_end(&v, now), zero = 0;
			if (end != UINT64_MAX)
				__atomic_compare_exchange_n(&rd->gate_ns, &zero, end ? end : now, 0,
							    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
		}
		return;
	}
	if (st == VC_NODE_STALE) {
		vc_say_once(VC_MSG_NODE, "vcuda: the node's compute controller stopped answering "
			    "(%s); holding its last fixed rate for %s until it is back",
			    vcg.control_path, vcg.cfg.devices[idx].uuid);
		vc_set_mode(idx, VC_MODE_LIMITED, v.fallback, now);
		return;
	}
	if (st == VC_NODE_FRESH && v.mode == VCUDA_CONTROL_LIMITED) {
		/* drop whatever local credit there was: from now on the node's allowance rules */
		__atomic_store_n(&vcg.region->dev[idx].refilled, vc_launched(idx), __ATOMIC_RELEASE);
	}
}
