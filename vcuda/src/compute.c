/*
 * compute.c - kernel launch admission.
 *
 * Each limited device has two container-wide counters: launched (vcuda.usage: cost units of
 * every admitted launch, the report the node controller reads) and refilled (the region: cost
 * units allowed so far). A launch adds its cost to launched with one atomic add and goes on if
 * the sum is within refilled: no lock, no syscall. Otherwise it has borrowed ahead and takes
 * the slow path: while the node controller's heartbeat is fresh (node.c) refilled is raised
 * to the node's allowance, else it grows with time at the local rate (the node's fallback
 * rate, or the local sampler's controller, sampler.c), capped so an idle container banks at
 * most VC_BURST_NS of it. A launch beyond the allowance sleeps until it catches up and
 * VC_QUANTUM_NS more (launches are served in the order they added), so a held-back
 * container launches in bursts of that much of its rate, not one kernel at a time. Where the
 * node gives it a slot, the credit of each slot period comes at its slot's start (node.c),
 * and a launch beyond it waits for the next start. A confining slot (where every tenant of the
 * GPU has one) also ends the launches at the slot's end, credit or not: the hot path then also
 * reads the clock, against the end the slow path set (vc_region_dev.gate_ns), and holds a launch
 * while the process's queue would run past that end (queue.c).
 * The cost of a launch is blocks x warps per block; of a graph, the sum over its kernel nodes
 * (measured at instantiate). The controller learns what a unit costs in GPU time.
 */
#include "vcuda.h"

#define VC_BURST_NS 20000000ull /* credit an idle container may bank: rides out late wake-ups */
/* How far past its allowance a held-back launch waits, when that much of its rate holds more
 * than this launch: the credit it then launches in one burst. A GPU time-slices between
 * contexts, switching whenever the running one has nothing queued; paced a kernel at a time, a
 * held-back container's queue empties after every kernel and each costs a switch (200 us
 * kernels at 30 + 60 on a time-sliced fake, 2 ms slices and 40 us switches: 27.1 + 54.3 of the
 * GPU's time, 8% lost to switches; in bursts 29.4 + 58.9). The rate is unchanged; a held-back
 * launch waits up to this much longer. A launch the quantum's credit would not cover more than
 * once waits as before: the burst would be that launch alone. Well below VC_BURST_NS and the
 * node's bank (a quarter of its period), or the credit is never reached. The simulation of the
 * loop mirrors it (device-plugin/compute, sim_test.go: simQuantum). */
#define VC_QUANTUM_NS 5000000ull
#define VC_MAX_COST (1ull << 40)
#define VC_UNKNOWN_GRAPH_COST 1ull

static uint64_t launch_cost(uint64_t gx, uint64_t gy, uint64_t gz, uint64_t bx, uint64_t by,
			    uint64_t bz)
{
	uint64_t blocks = gx * gy * gz, warps = (bx * by * bz + 31) / 32;
	if (!warps)
		warps = 1;
	if (blocks > VC_MAX_COST / warps)
		return VC_MAX_COST;
	return blocks ? blocks * warps : 1;
}

static void raise_refilled(struct vc_region_dev *rd, uint64_t to)
{
	uint64_t r = __atomic_load_n(&rd->refilled, __ATOMIC_RELAXED);
	while (r < to && !__atomic_compare_exchange_n(&rd->refilled, &r, to, 1, __ATOMIC_RELEASE,
						      __ATOMIC_RELAXED)) {
	}
}

/* Local mode switch: rate (cost units per ns) from now on, credit reset to what was used. */
void vc_set_mode(int idx, uint32_t mode, double rate, uint64_t now)
{
	struct vc_region_dev *rd = &vcg.region->dev[idx];
	uint64_t c = vc_launched(idx);
	__atomic_store_n(&rd->rate_bits, vc_d2bits(rate), __ATOMIC_RELAXED);
	__atomic_store_n(&rd->refill_ns, now, __ATOMIC_RELAXED);
	__atomic_store_n(&rd->refilled, mode == VC_MODE_UNLIMITED ? c + VC_UNLIMITED_CREDIT : c,
			 __ATOMIC_RELEASE);
	__atomic_store_n(&rd->mode, mode, __ATOMIC_RELEASE);
	rd->ctl.err_ns = 0;
	rd->boot_hold = 0;
	rd->ctl.settle = 0;
}

/* Advance refilled by rate x elapsed; whoever wins the timestamp race does it. */
void vc_refill(int idx, uint64_t now)
{
	struct vc_region_dev *rd = &vcg.region->dev[idx];
	uint64_t last = __atomic_load_n(&rd->refill_ns, __ATOMIC_RELAXED);
	if (now <= last || !__atomic_compare_exchange_n(&rd->refill_ns, &last, now, 0,
							__ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return;
	double rate = vc_bits2d(__atomic_load_n(&rd->rate_bits, __ATOMIC_RELAXED));
	uint64_t add = (uint64_t)(rate * (double)(now - last));
	uint64_t bank = (uint64_t)(rate * (double)VC_BURST_NS);
	uint64_t r = __atomic_load_n(&rd->refilled, __ATOMIC_RELAXED);
	for (;;) {
		uint64_t c = vc_launched(idx);
		uint64_t nr = r + add;
		if (nr > c + bank)
			nr = r > c + bank ? r : c + bank;
		if (__atomic_compare_exchange_n(&rd->refilled, &r, nr, 1, __ATOMIC_RELEASE,
						__ATOMIC_RELAXED))
			return;
	}
}

/* The wait for a launch cost units past credit at rate (units per ns), plus the quantum where
 * the quantum's credit holds this launch and more; 20 us to 20 ms, then it looks again. */
static uint64_t admit_wait(uint64_t short_by, uint64_t cost, double rate)
{
	if (rate <= 0)
		return 1000000;
	double w = (double)short_by / rate;
	if ((double)cost < rate * (double)VC_QUANTUM_NS / 2)
		w += VC_QUANTUM_NS;
	return w < 20000 ? 20000 : w > 20e6 ? 20000000 : (uint64_t)w;
}

/* Until a slot's next start: at least 20 us, at most 20 ms, then it looks again. */
static uint64_t slot_wait(uint64_t w)
{
	return w < 20000 ? 20000 : w > 20000000 ? 20000000 : w;
}

CUresult vc_admit_slow(int idx, uint64_t c, uint64_t cost)
{
	struct vc_region_dev *rd = &vcg.region->dev[idx];
	int counted = 0;
	if (!__atomic_load_n(&vcg.sampler_running, __ATOMIC_RELAXED))
		vc_start_sampler(); /* first launch after fork */
	for (;;) {
		/* the counter as it stands: a container that rewound its report (the node
		 * charges that) would else hold this launch back until its allowance reached a
		 * count no longer there, which a rewind every second never lets it do */
		uint64_t cur = vc_launched(idx);
		if (cur < c)
			c = cur;
		uint32_t mode = __atomic_load_n(&rd->mode, __ATOMIC_ACQUIRE);
		uint64_t wait, now = vc_now();
		struct vc_node_view nv;
		int node = vc_node_state(idx, now, &nv);
		if (node == VC_NODE_FRESH && nv.mode == VCUDA_CONTROL_UNLIMITED) {
			__atomic_store_n(&rd->gate_ns, 0, __ATOMIC_RELAXED);
			raise_refilled(rd, c);
			return CUDA_SUCCESS;
		}
		if (node == VC_NODE_FRESH) {
			vc_queue_cost(idx, nv.cost);
			uint64_t allowed = vc_node_allowed(&nv, now);
			uint64_t end = vc_node_slot_end(&nv, now);
			if (c <= allowed && end) {
				__atomic_store_n(&rd->gate_ns, end == UINT64_MAX ? 0 : end,
						 __ATOMIC_RELAXED);
				raise_refilled(rd, allowed);
				return CUDA_SUCCESS;
			}
			/* wait for it: never for the local credit, which runs at the local rate
			 * (a lone 10% container ran the whole GPU on it while the node allowed
			 * 10%, fake driver); with a slot, until its next start (past a
			 * confining slot's end, with credit or without) */
			uint64_t next = vc_node_slot_next(&nv, now);
			wait = next ? slot_wait(next - now) : admit_wait(c - allowed, cost, nv.rate);
		} else if (mode == VC_MODE_UNLIMITED ||
			   (node == VC_NODE_NEVER && vcg.dev[idx].core >= 100)) {
			__atomic_store_n(&rd->gate_ns, 0, __ATOMIC_RELAXED);
			raise_refilled(rd, c);
			return CUDA_SUCCESS;
		} else if (mode == VC_MODE_BOOT &&
			   vc_bits2d(__atomic_load_n(&rd->rate_bits, __ATOMIC_RELAXED)) <= 0) {
			/* no unit size yet: a few launches in the first sample period (then the
			 * sampler paces BOOT at a rate in units, sampler.c) */
			if (__atomic_fetch_add(&rd->boot_used, 1, __ATOMIC_ACQ_REL) <
			    __atomic_load_n(&rd->boot_budget, __ATOMIC_ACQUIRE)) {
				__atomic_store_n(&rd->gate_ns, 0, __ATOMIC_RELAXED);
				raise_refilled(rd, c);
				return CUDA_SUCCESS;
			}
			wait = 1000000;
		} else {
			vc_refill(idx, now);
			uint64_t r = __atomic_load_n(&rd->refilled, __ATOMIC_ACQUIRE);
			if (c <= r) {
				__atomic_store_n(&rd->gate_ns, 0, __ATOMIC_RELAXED);
				return CUDA_SUCCESS;
			}
			double rate = vc_bits2d(__atomic_load_n(&rd->rate_bits, __ATOMIC_RELAXED));
			wait = admit_wait(c - r, cost, rate);
		}
		if (!counted) {
			__atomic_fetch_add(&vcg.usage->dev[idx].waits, 1, __ATOMIC_RELAXED);
			counted = 1;
		}
		__atomic_store_n(&rd->wait_until_ns, vc_now() + wait, __ATOMIC_RELAXED);
		vc_sleep_ns(wait);
	}
}

/* The hot path: one atomic add and two loads when within the allowance (and a clock read in a
 * confining slot, where the process's queue is looked at too: queue.c). *bq is the device whose
 * queue bounded the launch (-1: none), for vc_queue_launched after it. */
static inline CUresult admit(uint64_t cost, int *bq)
{
	int idx;
	*bq = -1;
	CUresult rc = vc_cur_index(&idx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (idx < 0)
		return CUDA_ERROR_INVALID_DEVICE;
	/* counted even when not limited: the node splits the GPU's busy time by these */
	uint64_t c = __atomic_add_fetch(&vcg.usage->dev[idx].launched, cost, __ATOMIC_RELAXED);
	if (!vcg.dev[idx].limited)
		return CUDA_SUCCESS;
	struct vc_region_dev *rd = &vcg.region->dev[idx];
	int counted = 0;
	for (;;) {
		uint64_t gate = 0, now = 0;
		if (__builtin_expect(c <= __atomic_load_n(&rd->refilled, __ATOMIC_ACQUIRE), 1)) {
			gate = __atomic_load_n(&rd->gate_ns, __ATOMIC_RELAXED);
			if (__builtin_expect(!gate, 1))
				return CUDA_SUCCESS;
			now = vc_now();
		}
		if (!gate || now >= gate) {
			rc = vc_admit_slow(idx, c, cost);
			if (rc != CUDA_SUCCESS)
				return rc;
			gate = __atomic_load_n(&rd->gate_ns, __ATOMIC_RELAXED);
			if (!gate)
				return CUDA_SUCCESS;
			now = vc_now();
		}
		uint64_t wait = vc_queue_wait(idx, now, gate);
		if (!wait) {
			*bq = idx;
			return CUDA_SUCCESS;
		}
		if (!counted) {
			__atomic_fetch_add(&vcg.usage->dev[idx].waits, 1, __ATOMIC_RELAXED);
			counted = 1;
		}
		vc_sleep_ns(wait);
	}
}

#define ENTER()                                        \
	do {                                           \
		CUresult rc_ = vc_enter();             \
		if (rc_ != CUDA_SUCCESS)               \
			return rc_;                    \
	} while (0)
/* Admits a launch of cost units on stream s (ptsz: per-thread default stream semantics), makes
 * it (call), and tells the queue what it queued. */
#define LAUNCH(cost, s, ptsz, call)                                        \
	do {                                                               \
		uint64_t cost_ = (cost);                                   \
		int bq_;                                                   \
		CUresult rc_ = admit(cost_, &bq_);                         \
		if (rc_ != CUDA_SUCCESS)                                   \
			return rc_;                                        \
		rc_ = (call);                                              \
		if (bq_ >= 0 && rc_ == CUDA_SUCCESS)                       \
			vc_queue_launched(bq_, cost_, (s), (ptsz));        \
		return rc_;                                                \
	} while (0)

VC_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
				  unsigned by, unsigned bz, unsigned shm, CUstream s, void **params,
				  void **extra)
{
	ENTER();
	LAUNCH(launch_cost(gx, gy, gz, bx, by, bz), s, 0,
	       REAL(cuLaunchKernel)(f, gx, gy, gz, bx, by, bz, shm, s, params, extra));
}
VC_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
				       unsigned bx, unsigned by, unsigned bz, unsigned shm,
				       CUstream s, void **params, void **extra)
{
	ENTER();
	LAUNCH(launch_cost(gx, gy, gz, bx, by, bz), s, 1,
	       REAL(cuLaunchKernel_ptsz)(f, gx, gy, gz, bx, by, bz, shm, s, params, extra));
}
VC_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
					     unsigned bx, unsigned by, unsigned bz, unsigned shm,
					     CUstream s, void **params)
{
	ENTER();
	LAUNCH(launch_cost(gx, gy, gz, bx, by, bz), s, 0,
	       REAL(cuLaunchCooperativeKernel)(f, gx, gy, gz, bx, by, bz, shm, s, params));
}
VC_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
						  unsigned gz, unsigned bx, unsigned by, unsigned bz,
						  unsigned shm, CUstream s, void **params)
{
	ENTER();
	LAUNCH(launch_cost(gx, gy, gz, bx, by, bz), s, 1,
	       REAL(cuLaunchCooperativeKernel_ptsz)(f, gx, gy, gz, bx, by, bz, shm, s, params));
}
VC_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params,
				    void **extra)
{
	ENTER();
	LAUNCH(launch_cost(c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY,
			   c->blockDimZ),
	       c->hStream, 0, REAL(cuLaunchKernelEx)(c, f, params, extra));
}
VC_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params,
					 void **extra)
{
	ENTER();
	LAUNCH(launch_cost(c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY,
			   c->blockDimZ),
	       c->hStream, 1, REAL(cuLaunchKernelEx_ptsz)(c, f, params, extra));
}

/* Deprecated launch APIs cannot be throttled per device here: refused, never passed on. */
VC_EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(void *l, unsigned int n, unsigned int fl)
{
	(void)l, (void)n, (void)fl;
	return CUDA_ERROR_NOT_SUPPORTED;
}
VC_EXPORT CUresult cuLaunch(CUfunction f)
{
	(void)f;
	return CUDA_ERROR_NOT_SUPPORTED;
}
VC_EXPORT CUresult cuLaunchGrid(CUfunction f, int w, int h)
{
	(void)f, (void)w, (void)h;
	return CUDA_ERROR_NOT_SUPPORTED;
}
VC_EXPORT CUresult cuLaunchGridAsync(CUfunction f, int w, int h, CUstream s)
{
	(void)f, (void)w, (void)h, (void)s;
	return CUDA_ERROR_NOT_SUPPORTED;
}

/* ---- graphs: cost measured once at instantiate ---- */

static uint64_t graph_cost(CUgraph g, int depth)
{
	size_t n = 0;
	if (depth > 8 || REAL(cuGraphGetNodes)(g, NULL, &n) != CUDA_SUCCESS || n == 0)
		return 0;
	CUgraphNode nodes[n > 4096 ? 4096 : n];
	size_t got = sizeof(nodes) / sizeof(nodes[0]);
	if (REAL(cuGraphGetNodes)(g, nodes, &got) != CUDA_SUCCESS)
		return 0;
	if (got > sizeof(nodes) / sizeof(nodes[0]))
		got = sizeof(nodes) / sizeof(nodes[0]);
	uint64_t sum = 0;
	for (size_t i = 0; i < got; i++) {
		CUgraphNodeType t;
		CUDA_KERNEL_NODE_PARAMS_v2 p;
		CUgraph child;
		if (REAL(cuGraphNodeGetType)(nodes[i], &t) != CUDA_SUCCESS)
			continue;
		if (t == CU_GRAPH_NODE_TYPE_KERNEL &&
		    REAL(cuGraphKernelNodeGetParams_v2)(nodes[i], &p) == CUDA_SUCCESS)
			sum += launch_cost(p.gridDimX, p.gridDimY, p.gridDimZ, p.blockDimX,
					   p.blockDimY, p.blockDimZ);
		else if (t == CU_GRAPH_NODE_TYPE_GRAPH &&
			 REAL(cuGraphChildGraphNodeGetGraph)(nodes[i], &child) == CUDA_SUCCESS)
			sum += graph_cost(child, depth + 1);
	}
	return sum;
}

static CUresult note_exec(CUresult rc, CUgraphExec *e, CUgraph g)
{
	if (rc == CUDA_SUCCESS)
		vc_htab_put(&vcg.graphs, VC_KIND_GRAPH, (uintptr_t)*e, 0, graph_cost(g, 0));
	return rc;
}

VC_EXPORT CUresult cuGraphInstantiate(CUgraphExec *e, CUgraph g, CUgraphNode *en, char *log,
				      size_t n)
{
	ENTER();
	return note_exec(REAL(cuGraphInstantiate)(e, g, en, log, n), e, g);
}
VC_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *e, CUgraph g, CUgraphNode *en, char *log,
					 size_t n)
{
	ENTER();
	return note_exec(REAL(cuGraphInstantiate_v2)(e, g, en, log, n), e, g);
}
VC_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long fl)
{
	ENTER();
	return note_exec(REAL(cuGraphInstantiateWithFlags)(e, g, fl), e, g);
}
VC_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *e, CUgraph g,
						CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
	ENTER();
	return note_exec(REAL(cuGraphInstantiateWithParams)(e, g, p), e, g);
}
VC_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *e, CUgraph g,
						     CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
	ENTER();
	return note_exec(REAL(cuGraphInstantiateWithParams_ptsz)(e, g, p), e, g);
}
VC_EXPORT CUresult cuGraphExecDestroy(CUgraphExec e)
{
	ENTER();
	vc_htab_take(&vcg.graphs, VC_KIND_GRAPH, (uintptr_t)e, NULL, NULL);
	return REAL(cuGraphExecDestroy)(e);
}

static uint64_t exec_cost(CUgraphExec e)
{
	uint64_t cost;
	if (!vc_htab_get(&vcg.graphs, VC_KIND_GRAPH, (uintptr_t)e, NULL, &cost) || cost == 0)
		return VC_UNKNOWN_GRAPH_COST;
	return cost;
}

VC_EXPORT CUresult cuGraphLaunch(CUgraphExec e, CUstream s)
{
	ENTER();
	LAUNCH(exec_cost(e), s, 0, REAL(cuGraphLaunch)(e, s));
}
VC_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream s)
{
	ENTER();
	LAUNCH(exec_cost(e), s, 1, REAL(cuGraphLaunch_ptsz)(e, s));
}
