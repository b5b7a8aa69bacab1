/*
 * sampler.c - one elected sampler per GPU per container, and the controller it runs.
 *
 * Every process has a sampler thread; per device, the one whose pid is in sampler_pid (and
 * keeps its heartbeat fresh) polls NVML, the others only watch for a stale heartbeat and take
 * over. Nothing here is on the launch path. Per-process samples give both the container's
 * share (its pids, from the region's proc slots) and everyone else's.
 *
 * Controller, once per NVML sample period P (u = the container's measured share):
 *   khat   = GPU ns per cost unit = sum(u*P) / sum(units admitted), last VC_HIST periods
 *   err   += (target - u) * P       integral of the error, in GPU ns (clamped; a shortfall
 *                                   counts only if launches actually had to wait)
 *   rate   = (target + GAIN * err / P) / khat     cost units per ns
 * Before the first estimate (BOOT) launches are admitted a few per period, doubling while the
 * GPU shows nothing. Policy balance: while nobody else uses the GPU the container is not
 * throttled (UNLIMITED); as soon as someone else shows up it drops to its share at once and
 * forgets the burst.
 */
#include <stdio.h>
#include <unistd.h>

#include "vcuda.h"

#define VC_TICK_NS 5000000ull      /* elected sampler's poll period */
#define VC_IDLE_TICK_NS 50000000ull /* others: watch the heartbeat */
#define VC_STALE_NS 250000000ull
#define VC_GAIN 0.25
#define VC_IDLE_OTHERS 0.005 /* others' share under which the GPU counts as idle */

static int elect(struct vc_region_dev *rd, int me, uint64_t now)
{
	int cur = __atomic_load_n(&rd->sampler_pid, __ATOMIC_ACQUIRE);
	if (cur != me) {
		uint64_t beat = __atomic_load_n(&rd->sampler_beat_ns, __ATOMIC_ACQUIRE);
		if (cur != 0 && beat <= now + VC_STALE_NS && now < beat + VC_STALE_NS)
			return 0;
		if (!__atomic_compare_exchange_n(&rd->sampler_pid, &cur, me, 0, __ATOMIC_ACQ_REL,
						 __ATOMIC_RELAXED))
			return 0;
	}
	__atomic_store_n(&rd->sampler_beat_ns, now, __ATOMIC_RELEASE);
	return 1;
}

static void set_mode(struct vc_region_dev *rd, uint32_t mode, double rate, uint64_t now)
{
	uint64_t c = __atomic_load_n(&rd->consumed, __ATOMIC_ACQUIRE);
	__atomic_store_n(&rd->rate_bits, vc_d2bits(rate), __ATOMIC_RELAXED);
	__atomic_store_n(&rd->refill_ns, now, __ATOMIC_RELAXED);
	__atomic_store_n(&rd->refilled, mode == VC_MODE_UNLIMITED ? c + VC_UNLIMITED_CREDIT : c,
			 __ATOMIC_RELEASE);
	__atomic_store_n(&rd->mode, mode, __ATOMIC_RELEASE);
	rd->ctl.err_ns = 0;
}

void vc_ctl_update(int idx, double u, double u_other, uint64_t period_ns)
{
	struct vc_region_dev *rd = &vcg.region->dev[idx];
	struct vc_ctl *ctl = &rd->ctl;
	double P = (double)period_ns, s = vcg.dev[idx].core / 100.0;
	uint64_t now = vc_now();
	uint64_t c = __atomic_load_n(&rd->consumed, __ATOMIC_ACQUIRE);
	uint64_t waits = __atomic_load_n(&rd->waits, __ATOMIC_RELAXED);
	/* the container was held back in this period: a launch waited or was waiting */
	int throttled = waits != ctl->waits_last ||
			__atomic_load_n(&rd->wait_until_ns, __ATOMIC_RELAXED) + period_ns / 2 > now;
	ctl->waits_last = waits;
	ctl->hist_busy[ctl->hist_i % VC_HIST] = u * P;
	ctl->hist_units[ctl->hist_i % VC_HIST] = (double)(c - ctl->c_last);
	ctl->hist_i++;
	ctl->c_last = c;
	double busy = 0, units = 0;
	for (int i = 0; i < VC_HIST; i++) {
		busy += ctl->hist_busy[i];
		units += ctl->hist_units[i];
	}
	if (busy > 0 && units > 0)
		ctl->khat = busy / units;
	uint32_t mode = __atomic_load_n(&rd->mode, __ATOMIC_ACQUIRE);
	if (vcg.debug)
		fprintf(stderr, "vcuda-debug: dev %d mode %u u %.3f others %.3f P %.1fms consumed %llu "
			"khat %.3f err %.2fms rate %.5f throttled %d\n", idx, mode, u, u_other, P / 1e6,
			(unsigned long long)c, ctl->khat, ctl->err_ns / 1e6,
			vc_bits2d(__atomic_load_n(&rd->rate_bits, __ATOMIC_RELAXED)), throttled);

	if (vcg.cfg.policy == VCUDA_POLICY_BALANCE) {
		if (u_other < VC_IDLE_OTHERS) {
			if (mode != VC_MODE_UNLIMITED)
				set_mode(rd, VC_MODE_UNLIMITED, 0, now);
			return;
		}
		if (mode == VC_MODE_UNLIMITED) {
			if (ctl->khat > 0)
				set_mode(rd, VC_MODE_LIMITED, s / ctl->khat, now);
			else
				set_mode(rd, VC_MODE_BOOT, 0, now);
			return;
		}
	}
	if (mode == VC_MODE_BOOT) {
		if (ctl->khat > 0) {
			set_mode(rd, VC_MODE_LIMITED, s / ctl->khat, now);
		} else {
			uint32_t b = __atomic_load_n(&rd->boot_budget, __ATOMIC_RELAXED);
			__atomic_store_n(&rd->boot_budget, b < (1u << 20) ? b * 2 : b,
					 __ATOMIC_RELAXED);
			__atomic_store_n(&rd->boot_used, 0, __ATOMIC_RELEASE);
		}
		return;
	}
	if (mode != VC_MODE_LIMITED || ctl->khat <= 0)
		return;
	double e = (s - u) * P;
	if (e < 0 || throttled)
		ctl->err_ns += e;
	double lim = 3 * s * P;
	ctl->err_ns = ctl->err_ns > lim ? lim : ctl->err_ns < -lim ? -lim : ctl->err_ns;
	double frac = s + VC_GAIN * ctl->err_ns / P;
	if (frac < s / 8)
		frac = s / 8;
	__atomic_store_n(&rd->rate_bits, vc_d2bits(frac / ctl->khat), __ATOMIC_RELEASE);
}

static int in_container(unsigned pid)
{
	for (int i = 0; i < VC_MAX_PROCS; i++)
		if ((unsigned)__atomic_load_n(&vcg.region->proc[i].pid, __ATOMIC_ACQUIRE) == pid)
			return 1;
	return 0;
}

static void poll_dev(int idx, uint64_t now)
{
	struct vc_ctl *ctl = &vcg.region->dev[idx].ctl;
	nvmlProcessUtilizationSample_t buf[4 * VC_MAX_PROCS];
	unsigned n = sizeof(buf) / sizeof(buf[0]);
	nvmlReturn_t rc = REAL(nvmlDeviceGetProcessUtilization)(vcg.dev[idx].nvml, buf, &n,
								  ctl->last_ts_us);
	if (rc == NVML_ERROR_NOT_FOUND) {
		/* nothing ran: an idle period, once we know how long periods are */
		if (ctl->period_ns && now > ctl->last_sample_ns + 3 * ctl->period_ns) {
			vc_ctl_update(idx, 0, 0, now - ctl->last_sample_ns);
			ctl->last_sample_ns = now;
		}
		return;
	}
	if (rc != NVML_SUCCESS && rc != NVML_ERROR_INSUFFICIENT_SIZE)
		return;
	if (n > sizeof(buf) / sizeof(buf[0]))
		n = sizeof(buf) / sizeof(buf[0]);
	/* average over the new sample periods of the sum over our processes, and over others */
	uint64_t newest = 0, stamps[64];
	unsigned nstamps = 0, sum = 0, others = 0, matched = 0;
	for (unsigned i = 0; i < n; i++) {
		uint64_t ts = buf[i].timeStamp;
		if (ts <= ctl->last_ts_us)
			continue;
		newest = ts > newest ? ts : newest;
		unsigned k = 0;
		while (k < nstamps && stamps[k] != ts)
			k++;
		if (k == nstamps && nstamps < 64)
			stamps[nstamps++] = ts;
		if (in_container(buf[i].pid)) {
			sum += buf[i].smUtil;
			matched++;
		} else {
			others += buf[i].smUtil;
		}
	}
	if (!newest)
		return;
	/* Someone uses the GPU, we launched, yet no sample carries one of our pids: NVML sees
	 * other pids than we do (a container's pid namespace). Count everything as ours: the
	 * cap holds, a shared GPU may be under-used, and balance never bursts. */
	uint64_t c = __atomic_load_n(&vcg.region->dev[idx].consumed, __ATOMIC_RELAXED);
	if (matched)
		ctl->blind = 0;
	else if (others && c != ctl->c_last)
		ctl->blind = 1;
	if (ctl->blind) {
		vc_say_once(VC_MSG_PIDS, "vcuda: NVML reports no utilization for this container's "
			    "pids (another pid namespace?); counting all utilization of %s as this "
			    "container's: the cap holds, a shared GPU may be under-used",
			    vcg.cfg.devices[idx].uuid);
		sum += others;
		others = 100u * (nstamps ? nstamps : 1); /* balance: never burst blind */
	}
	if (ctl->last_ts_us) {
		uint64_t period = (newest - ctl->last_ts_us) * 1000;
		ctl->period_ns = period / (nstamps ? nstamps : 1);
		double k = 100.0 * (nstamps ? nstamps : 1);
		vc_ctl_update(idx, sum / k, others / k, period);
	}
	ctl->last_ts_us = newest;
	ctl->last_sample_ns = now;
}

void *vc_sampler_main(void *arg)
{
	(void)arg;
	int me = getpid();
	uint64_t last_reap = 0;
	for (;;) {
		uint64_t now = vc_now();
		int elected = 0;
		for (int i = 0; i < vcg.ndev; i++) {
			if (!vcg.dev[i].limited || !elect(&vcg.region->dev[i], me, now))
				continue;
			elected = 1;
			poll_dev(i, now);
		}
		if (elected && now > last_reap + 1000000000ull) {
			vc_reap();
			last_reap = now;
		}
		vc_sleep_ns(elected ? VC_TICK_NS : VC_IDLE_TICK_NS);
	}
	return NULL;
}
