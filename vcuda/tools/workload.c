/*
 * workload - a small CUDA-like program for the fake driver, run with libvcuda.so preloaded
 * (LD_PRELOAD) and the fake libcuda.so.1 / libnvidia-ml.so.1 on LD_LIBRARY_PATH, e.g. by the
 * e2e container emulator. It does what an application would:
 *   cuInit; lists the devices (UUIDs); optionally takes --hold-mib and keeps it until exit;
 *   reads cuMemGetInfo and nvmlDeviceGetMemoryInfo; allocates fixed-size chunks until refused
 *   (then frees them); launches kernels back to back for a while; reads the memory views
 *   again; and prints ONE JSON line:
 *   {"ok":true,"devices":["GPU-..."],"device":0,"held_mib":..,"cuda_total_mib":..,
 *    "cuda_free_mib":..,"nvml_total_mib":..,"nvml_used_mib":..,"alloc_chunk_mib":..,
 *    "allocated_bytes":..,"alloc_error":2,"launches":..,"launch_seconds":..,
 *    "half_launches":..,"half_seconds":..,"end_cuda_free_mib":..,"end_nvml_used_mib":..,
 *    "util_share":0.301,"kernel_ns":200000}
 *   alloc_error is the CUresult that refused the next chunk (2 = CUDA_ERROR_OUT_OF_MEMORY;
 *   0 when --max-alloc-mib stopped it). end_* are the views after the launch period, while
 *   the held memory is still held.
 *   half_launches and half_seconds count the second half of the launch period alone (the
 *   rate real benchmarks report, once a limiter has settled).
 *   util_share is this process's GPU busy time over the second half of the launch period,
 *   from the fake driver's own accounting (fakegpu_busy_ns); null without the fake driver.
 *   kernel_ns is one kernel's GPU time on the fake at full load (fakegpu_kernel_ns: --grid x the
 *   ns per block, at least FAKEGPU_LAUNCH_NS; FAKEGPU_BOOST runs kernels faster than this on a
 *   lightly loaded device); null without the fake driver.
 *   On failure: {"ok":false,"error":"..."} and exit status 1.
 *
 * Flags:
 *   --device N          device ordinal to use (default 0)
 *   --hold-mib N        allocate N MiB first and hold it until exit (default 0); once held,
 *                       "workload: holding N MiB" goes to stderr (others can wait for it)
 *   --chunk-mib N       allocation chunk (default 256)
 *   --max-alloc-mib N   stop allocating after this much (default 0 = until refused)
 *   --seconds S         launch for S seconds (default 2; 0 = no launches)
 *   --grid N            blocks per kernel (default 200)
 *   --block N           threads per block (default 256)
 *   --ns-per-block N    fake driver only: GPU time per block of this program's kernels (default:
 *                       the driver's, FAKEGPU_NS_PER_BLOCK); programs differ in it by orders of
 *                       magnitude whatever their launch shape
 *   --graph N           launch a CUDA graph of N kernel nodes (each --grid x --block) instead of
 *                       single kernels (default 0: kernels)
 *   --memset-kib N      after each launch, cuMemsetD8 N KiB of a device buffer (default 0)
 *   --batch N           cuCtxSynchronize after every N launches, as programs wait for their
 *                       results (PyTorch's loop in the GPU check: 4 matmuls, the probe's: 64
 *                       elementwise kernels); default 0: never (the queue stays full)
 *   --duty F            fake driver only: keep this process's GPU busy time at F of the wall
 *                       time in each 500 ms (0 < F < 1; default 0: back to back), e.g. a foreign
 *                       process that takes a fifth of the GPU
 *   --stamps FILE       fake driver only: write FILE, one line "START_NS END_NS" (decimal, the
 *                       fake's clock: CLOCK_MONOTONIC ns) per interval this process ran on the
 *                       engine over the launch period, in order (fakegpu_ran, read every 50 ms
 *                       and after a final cuCtxSynchronize). Intervals that touch are joined;
 *                       others the fake split (a context run in two entries) may stay split.
 *                       Stands in for the real `slicing` program's per-kernel globaltimer stamps.
 *   --slot PERIOD_US,START_US,LEN_US,FILL
 *                       fake driver only: launch only at the starts of a periodic slot, when
 *                       CLOCK_MONOTONIC in us modulo PERIOD_US is START_US (e.g.
 *                       40000,0,20000,0.9 and 40000,20000,20000,0.9: two processes in turn):
 *                       at once, as many launches as make FILL x LEN_US of kernel time
 *                       (kernel_ns each, x N with --graph N; memsets not counted; at least one),
 *                       then sleep to the next start without synchronizing. START_US <
 *                       PERIOD_US, 0 < LEN_US <= PERIOD_US, 0 < FILL <= 1; not with --duty.
 *                       More than FAKEGPU_MAX_QUEUE_US of work in a slot blocks its launches.
 *                       Launches at real-time priority (SCHED_FIFO) where allowed ("rt" says).
 *   --unlink-shared 1   before any CUDA call, remove vcuda.region and vcuda.slots from
 *                       $VCUDA_SHARED_DIR, as a tenant may (the directory is writable in the
 *                       container): libvcuda then books this process from zero, so the
 *                       container can hold more than its cap until the node's memory guard acts
 *   --hold-via LIB      take --hold-mib through LIB (libnsdriver.so, tools/nsdriver.c) loaded with
 *                       dlmopen into a new link-map namespace, where it reaches its own copy of
 *                       the driver and not libvcuda: the cap does not hold it, the node's memory
 *                       guard must; the rest runs as usual, with libvcuda
 */
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "workload.h"

#define MIB (1024ull * 1024ull)
#define DUTY_BLOCK_NS 500000000ull /* --duty holds over blocks this long */

uint64_t mono_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static double now_s(void)
{
	return (double)mono_ns() / 1e9;
}

static int fail(const char *what, int rc)
{
	printf("{\"ok\":false,\"error\":\"%s failed: %d\"}\n", what, rc);
	return 1;
}

int err(struct run *r, const char *what, int rc)
{
	r->what = what;
	r->rc = rc;
	return -1;
}

static int parse_slot(const char *v, struct slot_opt *s)
{
	char tail;
	int n = sscanf(v, "%llu,%llu,%llu,%lf%c", &s->period_us, &s->start_us, &s->len_us, &s->fill, &tail);
	if (n == 4 && !strchr(v, '-') && s->period_us && s->start_us < s->period_us && s->len_us &&
	    s->len_us <= s->period_us && s->fill > 0 && s->fill <= 1)
		return 0;
	fprintf(stderr, "workload: --slot wants PERIOD_US,START_US,LEN_US,FILL with START_US < PERIOD_US, "
		"0 < LEN_US <= PERIOD_US and 0 < FILL <= 1, e.g. 40000,0,20000,0.9; got \"%s\"\n", v);
	return -1;
}

static int parse(int argc, char **argv, struct opts *o)
{
	*o = (struct opts){ .chunk_mib = 256, .seconds = 2.0, .grid = 200, .block = 256 };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v) {
			fprintf(stderr, "workload: %s needs a value\n", a);
			return -1;
		}
		i++;
		if (strcmp(a, "--device") == 0)
			o->device = atoi(v);
		else if (strcmp(a, "--chunk-mib") == 0)
			o->chunk_mib = strtoull(v, NULL, 10);
		else if (strcmp(a, "--max-alloc-mib") == 0)
			o->max_alloc_mib = strtoull(v, NULL, 10);
		else if (strcmp(a, "--hold-mib") == 0)
			o->hold_mib = strtoull(v, NULL, 10);
		else if (strcmp(a, "--seconds") == 0)
			o->seconds = atof(v);
		else if (strcmp(a, "--grid") == 0)
			o->grid = (unsigned)atoi(v);
		else if (strcmp(a, "--block") == 0)
			o->block = (unsigned)atoi(v);
		else if (strcmp(a, "--ns-per-block") == 0)
			o->ns_per_block = strtoull(v, NULL, 10);
		else if (strcmp(a, "--graph") == 0)
			o->graph = (unsigned)atoi(v);
		else if (strcmp(a, "--memset-kib") == 0)
			o->memset_kib = strtoull(v, NULL, 10);
		else if (strcmp(a, "--batch") == 0)
			o->batch = (unsigned)atoi(v);
		else if (strcmp(a, "--duty") == 0)
			o->duty = atof(v);
		else if (strcmp(a, "--stamps") == 0)
			o->stamps = v;
		else if (strcmp(a, "--unlink-shared") == 0)
			o->unlink_shared = atoi(v);
		else if (strcmp(a, "--hold-via") == 0)
			o->hold_via = v;
		else if (strcmp(a, "--slot") == 0) {
			if (parse_slot(v, &o->slot) != 0)
				return -1;
		} else {
			fprintf(stderr, "workload: unknown flag %s (see the top of workload.c)\n", a);
			return -1;
		}
	}
	if (o->slot.period_us && o->duty > 0) {
		fprintf(stderr, "workload: --slot and --duty do not go together\n");
		return -1;
	}
	return o->chunk_mib && o->grid && o->block && o->duty >= 0 && o->duty < 1 ? 0 : -1;
}

static int list_devices(int n, char *out, size_t cap)
{
	size_t len = 0;
	out[0] = '\0';
	for (int i = 0; i < n; i++) {
		CUdevice d;
		CUuuid u;
		const unsigned char *b = (const unsigned char *)u.bytes;
		if (cuDeviceGet(&d, i) != CUDA_SUCCESS || cuDeviceGetUuid(&u, d) != CUDA_SUCCESS)
			return -1;
		len += (size_t)snprintf(out + len, cap - len,
			"%s\"GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\"",
			i ? "," : "", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10],
			b[11], b[12], b[13], b[14], b[15]);
	}
	return 0;
}

/* Allocates fixed-size chunks until refused (or --max-alloc-mib), then frees them; returns the
 * CUresult that refused the next chunk. */
static int alloc_until_refused(const struct opts *o, unsigned long long *allocated)
{
	size_t cap = 1024, count = 0;
	CUdeviceptr *ptrs = malloc(cap * sizeof(*ptrs));
	int rc = CUDA_SUCCESS;
	*allocated = 0;
	while (ptrs && (!o->max_alloc_mib || *allocated + o->chunk_mib * MIB <= o->max_alloc_mib * MIB)) {
		if (count == cap && !(ptrs = realloc(ptrs, (cap *= 2) * sizeof(*ptrs))))
			break;
		if ((rc = cuMemAlloc_v2(&ptrs[count], o->chunk_mib * MIB)) != CUDA_SUCCESS)
			break;
		count++;
		*allocated += o->chunk_mib * MIB;
	}
	for (size_t i = 0; i < count; i++)
		cuMemFree_v2(ptrs[i]);
	free(ptrs);
	return rc;
}

/* ---- the launch period ---- */

static int make_graph(struct run *r)
{
	CUgraphNode node;
	CUDA_KERNEL_NODE_PARAMS_v2 p = { .func = r->f, .gridDimX = r->o->grid, .gridDimY = 1,
					 .gridDimZ = 1, .blockDimX = r->o->block, .blockDimY = 1,
					 .blockDimZ = 1 };
	int rc;
	if ((rc = cuGraphCreate(&r->graph, 0)) != CUDA_SUCCESS)
		return err(r, "cuGraphCreate", rc);
	for (unsigned i = 0; i < r->o->graph; i++)
		if ((rc = cuGraphAddKernelNode_v2(&node, r->graph, NULL, 0, &p)) != CUDA_SUCCESS)
			return err(r, "cuGraphAddKernelNode", rc);
	if ((rc = cuGraphInstantiateWithFlags(&r->exec, r->graph, 0)) != CUDA_SUCCESS)
		return err(r, "cuGraphInstantiate", rc);
	return 0;
}

/* The function (or graph) to launch, the fake-only options, the memset buffer. */
static int prepare(struct run *r, nvmlDevice_t h)
{
	const struct opts *o = r->o;
	CUmodule m;
	int rc;
	find_fake(&r->fk);
	r->pid = getpid();
	r->have = r->fk.busy && nvmlDeviceGetUUID(h, r->uuid, sizeof(r->uuid)) == NVML_SUCCESS;
	if (o->seconds > 0 && ((rc = cuModuleLoadData(&m, "workload")) != CUDA_SUCCESS ||
			       (rc = cuModuleGetFunction(&r->f, m, "spin")) != CUDA_SUCCESS))
		return err(r, "cuModuleGetFunction", rc);
	if (o->ns_per_block && (!r->fk.set_ns || r->fk.set_ns(o->ns_per_block) != 0))
		return err(r, "--ns-per-block needs the fake driver: fakegpu_set_ns_per_block", 0);
	if (o->duty > 0 && !r->have)
		return err(r, "--duty needs the fake driver: fakegpu_busy_ns", 0);
	if (o->stamps && !(r->have && r->fk.ran))
		return err(r, "--stamps needs the fake driver: fakegpu_ran", 0);
	if (o->slot.period_us && !r->fk.kernel_ns)
		return err(r, "--slot needs the fake driver: fakegpu_kernel_ns", 0);
	r->kernel_ns = r->fk.kernel_ns ? r->fk.kernel_ns(o->grid) : 0; /* after --ns-per-block */
	r->per_slot = o->slot.period_us ? slot_launches(o, r->kernel_ns) : 1;
	if (o->seconds > 0 && o->graph && make_graph(r) != 0)
		return -1;
	if (o->seconds > 0 && o->memset_kib &&
	    (rc = cuMemAlloc_v2(&r->buf, o->memset_kib << 10)) != CUDA_SUCCESS)
		return err(r, "cuMemAlloc (--memset-kib)", rc);
	return 0;
}

static int launch_one(struct run *r)
{
	int rc = r->exec ? cuGraphLaunch(r->exec, NULL)
			 : cuLaunchKernel(r->f, r->o->grid, 1, 1, r->o->block, 1, 1, 0, NULL, NULL, NULL);
	if (rc != CUDA_SUCCESS)
		return err(r, r->exec ? "cuGraphLaunch" : "cuLaunchKernel", rc);
	if (r->buf && (rc = cuMemsetD8_v2(r->buf, 0, r->o->memset_kib << 10)) != CUDA_SUCCESS)
		return err(r, "cuMemsetD8", rc);
	r->launches++;
	if (r->o->batch && r->launches % r->o->batch == 0 && (rc = cuCtxSynchronize()) != CUDA_SUCCESS)
		return err(r, "cuCtxSynchronize (--batch)", rc);
	return 0;
}

/* --duty: whether this process is ahead of its duty cycle; then it waits a millisecond. */
static int duty_wait(struct run *r)
{
	uint64_t bn, tn;
	r->fk.busy(r->uuid, &r->pid, 1, &bn, &tn);
	/* per 500 ms, not since the start: a process with steady demand that was held back does
	 * not repay it later (a cumulative duty of 0.2 read 10.7 to 27.9% over the closed loop's
	 * measured window) */
	if (tn - r->dt >= DUTY_BLOCK_NS) {
		r->dstart = bn;
		r->dt = tn;
	}
	if ((double)(bn - r->dstart) <= r->o->duty * (double)(tn - r->dt))
		return 0;
	struct timespec ts = { 0, 1000000 };
	nanosleep(&ts, NULL);
	return 1;
}

/* Launches for --seconds (back to back, held to --duty, or at --slot starts); measures this
 * process's share over the second half. */
static int launch_period(struct run *r)
{
	const struct opts *o = r->o;
	double start = now_s(), half = start + o->seconds / 2;
	uint64_t run_end = (uint64_t)((start + o->seconds) * 1e9);
	if (o->duty > 0)
		r->fk.busy(r->uuid, &r->pid, 1, &r->dstart, &r->dt);
	if (o->slot.period_us) {
		/* A slot's launches measure the engine, not this machine's scheduler: at real-time
		 * priority (root) a busy machine cannot wake them late into the other's slot. */
		struct sched_param sp = { .sched_priority = 10 };
		r->rt = sched_setscheduler(0, SCHED_FIFO, &sp) == 0;
		r->slot_at = slot_start_ns(&o->slot, mono_ns());
	}
	if (o->stamps && stamps_poll(r, 1) != 0)
		return -1;
	r->end = start;
	while (o->seconds > 0 && (r->end = now_s()) < start + o->seconds) {
		if (!r->marked && r->end >= half) {
			r->marked = 1;
			r->marked_at = r->end;
			r->half_at = r->launches;
			if (r->have)
				r->fk.busy(r->uuid, &r->pid, 1, &r->b0, &r->t0);
		}
		if (o->stamps && mono_ns() - r->st.polled_ns >= POLL_NS && stamps_poll(r, 0) != 0)
			return -1;
		if (o->duty > 0 && duty_wait(r))
			continue;
		unsigned long long n = o->slot.period_us ? slot_due(r, run_end) : 1;
		for (unsigned long long i = 0; i < n; i++)
			if (launch_one(r) != 0)
				return -1;
	}
	return 0;
}

/* After the launch period: the graph and buffer go, the share's end reading, --stamps. */
static int end_period(struct run *r)
{
	int rc;
	if (r->exec && ((rc = cuGraphExecDestroy(r->exec)) != CUDA_SUCCESS ||
			(rc = cuGraphDestroy(r->graph)) != CUDA_SUCCESS))
		return err(r, "cuGraphDestroy", rc);
	if (r->buf)
		cuMemFree_v2(r->buf);
	if (r->have && r->marked)
		r->fk.busy(r->uuid, &r->pid, 1, &r->b1, &r->t1);
	return r->o->stamps ? stamps_finish(r) : 0;
}

int main(int argc, char **argv)
{
	struct opts o;
	if (parse(argc, argv, &o) != 0)
		return 2;
	int rc, n = 0;
	if (o.unlink_shared) {
		const char *dir = getenv("VCUDA_SHARED_DIR");
		char path[4096];
		if (!dir || !*dir) {
			printf("{\"ok\":false,\"error\":\"--unlink-shared: VCUDA_SHARED_DIR is not set\"}\n");
			return 1;
		}
		for (int i = 0; i < 2; i++) {
			snprintf(path, sizeof(path), "%s/%s", dir, i ? "vcuda.slots" : "vcuda.region");
			if (unlink(path) != 0 && errno != ENOENT)
				return fail("--unlink-shared: unlink", errno);
		}
	}
	if ((rc = cuInit(0)) != CUDA_SUCCESS)
		return fail("cuInit", rc);
	if ((rc = cuDeviceGetCount(&n)) != CUDA_SUCCESS)
		return fail("cuDeviceGetCount", rc);
	char devices[4096];
	if (list_devices(n, devices, sizeof(devices)) != 0)
		return fail("cuDeviceGetUuid", 0);
	CUdevice dev;
	CUcontext ctx;
	if ((rc = cuDeviceGet(&dev, o.device)) != CUDA_SUCCESS ||
	    (rc = cuCtxCreate_v2(&ctx, 0, dev)) != CUDA_SUCCESS)
		return fail("cuCtxCreate", rc);
	CUdeviceptr held = 0;
	if (o.hold_mib && o.hold_via) {
		void *lib = dlmopen(LM_ID_NEWLM, o.hold_via, RTLD_NOW | RTLD_LOCAL);
		int (*hold)(int, unsigned long long) = lib ? (int (*)(int, unsigned long long))dlsym(lib, "nsdriver_hold") : NULL;
		if (!hold) {
			printf("{\"ok\":false,\"error\":\"--hold-via %s: %s\"}\n", o.hold_via, dlerror());
			return 1;
		}
		if ((rc = hold(o.device, o.hold_mib)) != CUDA_SUCCESS)
			return fail("cuMemAlloc (--hold-via)", rc);
		fprintf(stderr, "workload: holding %llu MiB through another namespace's driver\n", o.hold_mib);
		fflush(stderr);
	} else if (o.hold_mib) {
		if ((rc = cuMemAlloc_v2(&held, o.hold_mib * MIB)) != CUDA_SUCCESS)
			return fail("cuMemAlloc (--hold-mib)", rc);
		fprintf(stderr, "workload: holding %llu MiB\n", o.hold_mib);
		fflush(stderr);
	}
	size_t free_b = 0, total = 0;
	if ((rc = cuMemGetInfo_v2(&free_b, &total)) != CUDA_SUCCESS)
		return fail("cuMemGetInfo", rc);
	nvmlDevice_t h;
	nvmlMemory_t nm = { 0, 0, 0 };
	if ((rc = nvmlInit_v2()) != NVML_SUCCESS ||
	    (rc = nvmlDeviceGetHandleByIndex_v2((unsigned)o.device, &h)) != NVML_SUCCESS ||
	    (rc = nvmlDeviceGetMemoryInfo(h, &nm)) != NVML_SUCCESS)
		return fail("nvmlDeviceGetMemoryInfo", rc);
	unsigned long long allocated;
	int alloc_rc = alloc_until_refused(&o, &allocated);

	struct run r = { .o = &o };
	int ok = prepare(&r, h) == 0 && launch_period(&r) == 0 && end_period(&r) == 0;
	free(r.st.v);
	if (!ok)
		return fail(r.what, r.rc);
	char share[32] = "null", kernel_ns[32] = "null";
	if (r.have && r.marked && r.t1 > r.t0)
		snprintf(share, sizeof(share), "%.4f", (double)(r.b1 - r.b0) / (double)(r.t1 - r.t0));
	if (r.kernel_ns)
		snprintf(kernel_ns, sizeof(kernel_ns), "%llu", (unsigned long long)r.kernel_ns);
	size_t end_free = 0, end_total = 0;
	nvmlMemory_t end_nm = { 0, 0, 0 };
	if ((rc = cuMemGetInfo_v2(&end_free, &end_total)) != CUDA_SUCCESS)
		return fail("cuMemGetInfo (end)", rc);
	if ((rc = nvmlDeviceGetMemoryInfo(h, &end_nm)) != NVML_SUCCESS)
		return fail("nvmlDeviceGetMemoryInfo (end)", rc);
	if (held)
		cuMemFree_v2(held);
	printf("{\"ok\":true,\"devices\":[%s],\"device\":%d,\"held_mib\":%llu,"
	       "\"cuda_total_mib\":%llu,\"cuda_free_mib\":%llu,\"nvml_total_mib\":%llu,"
	       "\"nvml_used_mib\":%llu,\"alloc_chunk_mib\":%llu,\"allocated_bytes\":%llu,"
	       "\"alloc_error\":%d,\"launches\":%llu,\"launch_seconds\":%.3f,"
	       "\"half_launches\":%llu,\"half_seconds\":%.3f,\"end_cuda_free_mib\":%llu,\"end_nvml_used_mib\":%llu,\"util_share\":%s,"
	       "\"kernel_ns\":%s,\"rt\":%s}\n",
	       devices, o.device, o.hold_mib, (unsigned long long)(total / MIB),
	       (unsigned long long)(free_b / MIB), nm.total / MIB, nm.used / MIB, o.chunk_mib,
	       allocated, alloc_rc, r.launches, o.seconds, r.launches - r.half_at,
	       r.marked ? r.end - r.marked_at : 0.0, (unsigned long long)(end_free / MIB),
	       end_nm.used / MIB, share, kernel_ns, !o.slot.period_us ? "null" : r.rt ? "true" : "false");
	return 0;
}
