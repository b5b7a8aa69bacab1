/* fake_clock.c - what a kernel takes on the simulated GPUs: the program's time per block
 * (FAKEGPU_NS_PER_BLOCK, workload --ns-per-block), the launch floor (FAKEGPU_LAUNCH_NS), and a
 * power-capped clock (FAKEGPU_BOOST) that follows what the running kernels draw
 * (FAKEGPU_POWER) and spares their memory-bound part (FAKEGPU_MEMBOUND). */
#include "fake.h"

/* The program's time per block times blocks. */
static uint64_t blocks_ns(uint64_t blocks)
{
	uint64_t ns = __atomic_load_n(&fk.ns_per_block, __ATOMIC_RELAXED);
	return blocks > UINT64_MAX / (ns ? ns : 1) ? UINT64_MAX / 2 : blocks * ns;
}

/* A kernel of blocks at full load (no FAKEGPU_BOOST): never less than the launch overhead. */
uint64_t fk_kernel_ns(uint64_t blocks)
{
	uint64_t dur = blocks_ns(blocks);
	return dur < fk.launch_ns ? fk.launch_ns : dur;
}

/* A kernel of blocks: the program's time per block, never less than the launch overhead. */
void fk_launch(int dev, uint64_t blocks)
{
	uint64_t dur = blocks_ns(blocks);
	if (fk.boost_ppm) {
		double m = (double)fk.membound_ppm / 1e6;
		dur = (uint64_t)((double)dur * (m + (1 - m) / fk_speed(dev)));
	}
	fk_enqueue(dev, dur < fk.launch_ns ? fk.launch_ns : dur);
}

/* The device's load over [from, to) as power: busy time, each process's at its FAKEGPU_POWER
 * (switches, and processes that set none, at a GEMM's). */
static double power_load_locked(struct fk_state *s, uint64_t from, uint64_t to)
{
	double w = (double)(fk_busy_locked(s, -1, to) - fk_busy_locked(s, -1, from));
	for (int i = 0; i < FK_PIDS; i++) {
		uint32_t pct = s->pids[i].power_pct;
		if (!s->pids[i].pid || !pct || pct >= 100)
			continue;
		uint64_t b = fk_busy_locked(s, i, to) - fk_busy_locked(s, i, from);
		w -= (1 - (double)pct / 100) * (double)b;
	}
	return w > 0 ? w : 0;
}

/* How fast kernels run now, as a power-capped card clocks (FAKEGPU_BOOST): 1 when the device
 * drew full power all of the last 100 ms, 1 + boost below the knee, linear between; its power
 * is its busy time, each process's at what its kernels draw (FAKEGPU_POWER; a GEMM's where
 * unset: then busy time alone). A kernel's speed is set at its launch (FAKEGPU_MEMBOUND of it
 * not sped up); read at most every 10 ms per process. */
double fk_speed(int dev)
{
	if (!fk.boost_ppm)
		return 1;
	struct fk_dev *d = &fk.dev[dev];
	const uint64_t window = 100000000ull, every = 10000000ull;
	uint64_t now = fk_now(), at = __atomic_load_n(&d->speed_at, __ATOMIC_RELAXED);
	uint64_t ppm = __atomic_load_n(&d->speed_ppm, __ATOMIC_RELAXED);
	if (ppm && now - at < every)
		return (double)ppm / 1e6;
	struct fk_state *s = d->st;
	fk_lock(s);
	double load = power_load_locked(s, now > window ? now - window : 0, now);
	fk_unlock(s);
	double u = load / (double)window, knee = (double)fk.boost_knee_pct / 100;
	double x = (1 - u) / (1 - knee);
	x = x < 0 ? 0 : x > 1 ? 1 : x;
	double speed = 1 + (double)fk.boost_ppm / 1e6 * x;
	__atomic_store_n(&d->speed_ppm, (uint64_t)(speed * 1e6), __ATOMIC_RELAXED);
	__atomic_store_n(&d->speed_at, now, __ATOMIC_RELAXED);
	return speed;
}
