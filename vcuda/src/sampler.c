/*
 * sampler.c - the local controller: runs only while no node controller answers for a device
 * (node.c), e.g. limits from the environment without a device plugin. One elected sampler
 * per GPU per container reads NVML's device-wide utilization samples and counts all of it as
 * the container's own: real NVML's per-process samples are coarse (about one a second), noisy
 * and keyed by host pids that never match a container's, so nothing here uses them. Alone on
 * a GPU this is exact; beside other containers it over-counts (the cap holds, the GPU may be
 * under-used) and balance never bursts: sharing one GPU well needs the node controller.
 *
 * Controller, once per NVML sample period P (u = measured utilization):
 *   khat   = GPU ns per cost unit = sum(u*P) / sum(units admitted), last VC_HIST periods
 *   err   += (target - u) * P       integral of the error, in GPU ns (clamped; a shortfall
 *                                   counts only if launches actually had to wait)
 *   rate   = (target + GAIN * err / P) / khat     cost units per ns
 * Before the first estimate (BOOT) the first period admits a few launches; then launches are
 * paced at a rate in units, doubled until the GPU shows work and held while the cost is
 * learned (boot()).
 */
#include <stdio.h>
#include <unistd.h>

#include "vcuda.h"

#define VC_TICK_NS 5000000ull      /* elected sampler's poll period */
#define VC_IDLE_TICK_NS 50000000ull /* others: watch the heartbeat */
#define VC_STALE_NS 250000000ull
#define VC_GAIN 0.25
#define VC_IDLE_OTHERS 0.005 /* others' share under which the GPU counts as idle */
#define VC_MIN_PERIOD_NS 10000000ull /* a utilization period shorter than this is left out */
#define VC_BOOT_SEEN 0.2  /* the ramp ends here (or at half the target): whole-percent samples
                            * read within 2.5% of the cost */
#define VC_BOOT_HOLD 3    /* held periods: the first is dropped, the cost learned on the rest */
#define VC_SETTLE 2       /* samples left out after BOOT ends: a window longer than a period, late */

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

static void forget_history(struct vc_ctl *ctl)
{
	for (int i = 0; i < VC_HIST; i++)
		ctl->hist_busy[i] = ctl->hist_units[i] = 0;
	ctl->hist_i = 0;
	ctl->khat = 0;
}

/* BOOT, once per sample period. The first period admits a few launches; from then on BOOT
 * is paced like LIMITED, at a rate in cost units (the first period's units spread over it),
 * doubling while launches wait and the GPU shows less than VC_BOOT_SEEN (or half the
 * target); then the rate is held for VC_BOOT_HOLD periods and the cost learned from those
 * only. Samples average a window longer than a period and lag the launches: a cost learned
 * on the ramp, or from launches admitted in a burst per period, read 52-78 ns per unit
 * against 125 (fake driver), and the first limited rate ran the GPU at 100% for a 90%
 * target; the loop took 2.5 s to settle. */
static void boot(int idx, double u, double s, int throttled, uint64_t now)
{
	struct vc_region_dev *rd = &vcg.region->dev[idx];
	struct vc_ctl *ctl = &rd->ctl;
	double P = (double)ctl->period_ns;
	double rate = vc_bits2d(__atomic_load_n(&rd->rate_bits, __ATOMIC_RELAXED));
	if (rate <= 0) {
		double units = ctl->hist_units[(ctl->hist_i + VC_HIST - 1) % VC_HIST];
		if (units > 0 && P > 0) {
			vc_set_mode(idx, VC_MODE_BOOT, units / P, now);
		} else {
			uint32_t b = __atomic_load_n(&rd->boot_budget, __ATOMIC_RELAXED);
			__atomic_store_n(&rd->boot_budget, b < (1u << 20) ? b * 2 : b,
					 __ATOMIC_RELAXED);
			__atomic_store_n(&rd->boot_used, 0, __ATOMIC_RELEASE);
		}
		ctl->khat = 0;
		return;
	}
	if (rd->boot_hold == 0) {
		double seen = s / 2 < VC_BOOT_SEEN ? s / 2 : VC_BOOT_SEEN;
		if (u >= seen) {
			rd->boot_hold = 1; /* hold from here; this period's sample still ramps */
			forget_history(ctl);
		} else {
			if (throttled && rate < 1e6)
				__atomic_store_n(&rd->rate_bits, vc_d2bits(rate * 2), __ATOMIC_RELEASE);
			ctl->khat = 0;
		}
		return;
	}
	if (++rd->boot_hold == 2) /* the first held period's sample still covers the ramp */
		forget_history(ctl);
	if (rd->boot_hold > VC_BOOT_HOLD && ctl->khat > 0) {
		vc_set_mode(idx, VC_MODE_LIMITED, s / ctl->khat, now);
		/* a step of up to 20x: the samples that still average the boot rate would read a
		 * shortfall, wind the integral up and lower the cost (the GPU then ran at 100%
		 * for a 90% target, 0.8 s) */
		ctl->settle = VC_SETTLE;
	}
}

void vc_ctl_update(int idx, double u, double u_other, uint64_t period_ns)
{
	struct vc_region_dev *rd = &vcg.region->dev[idx];
	struct vc_ctl *ctl = &rd->ctl;
	double P = (double)period_ns, s = vcg.dev[idx].core / 100.0;
	uint64_t now = vc_now();
	uint64_t c = vc_launched(idx);
	uint64_t waits = __atomic_load_n(&vcg.usage->dev[idx].waits, __ATOMIC_RELAXED);
	/* the container was held back in this period: a launch waited or was waiting */
	int throttled = waits != ctl->waits_last ||
			__atomic_load_n(&rd->wait_until_ns, __ATOMIC_RELAXED) + period_ns / 2 > now;
	ctl->waits_last = waits;
	if (ctl->settle > 0) { /* neither cost nor error: the sample is of the old rate */
		ctl->settle--;
		ctl->c_last = c;
		if (vcg.debug)
			fprintf(stderr, "vcuda-debug: dev %d u %.3f left out (settling)\n", idx, u);
		return;
	}
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
				vc_set_mode(idx, VC_MODE_UNLIMITED, 0, now);
			return;
		}
		if (mode == VC_MODE_UNLIMITED) {
			if (ctl->khat > 0)
				vc_set_mode(idx, VC_MODE_LIMITED, s / ctl->khat, now);
			else
				vc_set_mode(idx, VC_MODE_BOOT, 0, now);
			return;
		}
	}
	if (mode == VC_MODE_BOOT) {
		boot(idx, u, s, throttled, now);
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

/* New device-wide utilization since the last poll: the busy fraction over the new samples
 * and the time they cover. nvmlDeviceGetSamples where the driver has it (one sample per
 * hardware period), else nvmlDeviceGetUtilizationRates once per poll. 0 = nothing new. */
static int device_busy(int idx, uint64_t now, double *u, uint64_t *period_ns)
{
	struct vc_ctl *ctl = &vcg.region->dev[idx].ctl;
	nvmlSample_t buf[64];
	unsigned n = sizeof(buf) / sizeof(buf[0]);
	nvmlValueType_t vt;
	nvmlReturn_t rc = NVML_ERROR_NOT_SUPPORTED;
	if (REAL(nvmlDeviceGetSamples))
		rc = REAL(nvmlDeviceGetSamples)(vcg.dev[idx].nvml, NVML_GPU_UTILIZATION_SAMPLES,
						ctl->last_ts_us, &vt, &n, buf);
	if (rc == NVML_ERROR_NOT_FOUND)
		return 0;
	if (rc == NVML_SUCCESS) {
		if (n > sizeof(buf) / sizeof(buf[0]))
			n = sizeof(buf) / sizeof(buf[0]);
		uint64_t newest = 0;
		double sum = 0;
		unsigned k = 0;
		for (unsigned i = 0; i < n; i++) {
			if (buf[i].timeStamp <= ctl->last_ts_us)
				continue;
			newest = buf[i].timeStamp > newest ? buf[i].timeStamp : newest;
			sum += vt == NVML_VALUE_TYPE_UNSIGNED_LONG_LONG ? (double)buf[i].sampleValue.ullVal
								      : (double)buf[i].sampleValue.uiVal;
			k++;
		}
		if (!k)
			return 0;
		uint64_t last = ctl->last_ts_us;
		ctl->last_ts_us = newest;
		if (!last) { /* the first poll only finds where the samples are */
			ctl->c_last = vc_launched(idx); /* units from here on, as busy time */
			return 0;
		}
		*u = sum / (100.0 * k);
		*period_ns = (newest - last) * 1000;
		return 1;
	}
	if (!REAL(nvmlDeviceGetUtilizationRates) || now < ctl->last_sample_ns + 100000000ull)
		return 0;
	nvmlUtilization_t ut;
	if (REAL(nvmlDeviceGetUtilizationRates)(vcg.dev[idx].nvml, &ut) != NVML_SUCCESS)
		return 0;
	uint64_t last = ctl->last_sample_ns;
	ctl->last_sample_ns = now;
	if (!last) {
		ctl->c_last = vc_launched(idx);
		return 0;
	}
	*u = ut.gpu / 100.0;
	*period_ns = now - last;
	return 1;
}

static void poll_dev(int idx, uint64_t now)
{
	double u;
	uint64_t period;
	/* a period much shorter than the device's sample period (a sample stamped just after
	 * the last one) says little: its busy time is left out and its units go to the next
	 * period (one such read 0.015 ns per unit against a true 125, and the local rate ran the
	 * GPU free). Leaving its units out too dropped all launched since the last period when
	 * the fake driver's samples were re-read 1 us later (wall-clock stamps): the cost read
	 * 148 ns per unit against 125 and a 90% container fell to 79%, then ran at 99% */
	if (!device_busy(idx, now, &u, &period) || period < VC_MIN_PERIOD_NS)
		return;
	vcg.region->dev[idx].ctl.period_ns = period;
	/* others unknown: balance must not burst on a guess */
	vc_ctl_update(idx, u > 1 ? 1 : u, 1.0, period);
}

int vc_local_sampler(int idx)
{
	struct vc_node_view v;
	return vc_node_state(idx, vc_now(), &v) == VC_NODE_NEVER;
}

void *vc_sampler_main(void *arg)
{
	(void)arg;
	int me = getpid();
	uint64_t last_reap = 0;
	for (;;) {
		uint64_t now = vc_now();
		int elected = 0;
		int node = 0;
		for (int i = 0; i < vcg.ndev; i++) {
			if (!vcg.dev[i].limited)
				continue;
			vc_node_tick(i, now);
			if (!vc_local_sampler(i)) {
				node = 1; /* the node decides: our sampler stands down */
				continue;
			}
			if (vcg.dev[i].core >= 100 || !elect(&vcg.region->dev[i], me, now))
				continue; /* no share: nothing to sample for */
			elected = 1;
			poll_dev(i, now);
		}
		if (elected && now > last_reap + 1000000000ull) {
			vc_reap();
			last_reap = now;
		}
		vc_sleep_ns(elected || node ? VC_TICK_NS : VC_IDLE_TICK_NS);
	}
	return NULL;
}
