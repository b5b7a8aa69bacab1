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
 *    "util_share":0.301}
 *   alloc_error is the CUresult that refused the next chunk (2 = CUDA_ERROR_OUT_OF_MEMORY;
 *   0 when --max-alloc-mib stopped it). end_* are the views after the launch period, while
 *   the held memory is still held.
 *   half_launches and half_seconds count the second half of the launch period alone (the
 *   rate real benchmarks report, once a limiter has settled).
 *   util_share is this process's GPU busy time over the second half of the launch period,
 *   from the fake driver's own accounting (fakegpu_busy_ns); null without the fake driver.
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
 *   --duty F            fake driver only: keep this process's GPU busy time at F of the wall
 *                       time in each 500 ms (0 < F < 1; default 0: back to back), e.g. a foreign
 *                       process that takes a fifth of the GPU
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../include/cuda_api.h"
#include "../include/nvml_api.h"

#define MIB (1024ull * 1024ull)
#define DUTY_BLOCK_NS 500000000ull /* --duty holds over blocks this long */

struct opts {
	int device;
	unsigned long long chunk_mib, max_alloc_mib, hold_mib;
	double seconds;
	unsigned grid, block, graph;
	unsigned long long ns_per_block, memset_kib;
	double duty;
};

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int fail(const char *what, int rc)
{
	printf("{\"ok\":false,\"error\":\"%s failed: %d\"}\n", what, rc);
	return 1;
}

static int parse(int argc, char **argv, struct opts *o)
{
	*o = (struct opts){ 0, 256, 0, 0, 2.0, 200, 256, 0, 0, 0, 0 };
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
		else if (strcmp(a, "--duty") == 0)
			o->duty = atof(v);
		else {
			fprintf(stderr, "workload: unknown flag %s (see the top of workload.c)\n", a);
			return -1;
		}
	}
	return o->chunk_mib && o->grid && o->block && o->duty >= 0 && o->duty < 1 ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct opts o;
	if (parse(argc, argv, &o) != 0)
		return 2;
	int rc, n = 0;
	if ((rc = cuInit(0)) != CUDA_SUCCESS)
		return fail("cuInit", rc);
	if ((rc = cuDeviceGetCount(&n)) != CUDA_SUCCESS)
		return fail("cuDeviceGetCount", rc);
	char devices[4096] = "";
	size_t len = 0;
	for (int i = 0; i < n; i++) {
		CUdevice d;
		CUuuid u;
		const unsigned char *b = (const unsigned char *)u.bytes;
		if (cuDeviceGet(&d, i) != CUDA_SUCCESS || cuDeviceGetUuid(&u, d) != CUDA_SUCCESS)
			return fail("cuDeviceGetUuid", i);
		len += (size_t)snprintf(devices + len, sizeof(devices) - len,
			"%s\"GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\"",
			i ? "," : "", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10],
			b[11], b[12], b[13], b[14], b[15]);
	}
	CUdevice dev;
	CUcontext ctx;
	if ((rc = cuDeviceGet(&dev, o.device)) != CUDA_SUCCESS ||
	    (rc = cuCtxCreate_v2(&ctx, 0, dev)) != CUDA_SUCCESS)
		return fail("cuCtxCreate", rc);
	CUdeviceptr held = 0;
	if (o.hold_mib) {
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

	/* allocate until refused */
	size_t cap = 1024, count = 0;
	CUdeviceptr *ptrs = malloc(cap * sizeof(*ptrs));
	unsigned long long allocated = 0;
	int alloc_rc = CUDA_SUCCESS;
	while (ptrs && (!o.max_alloc_mib || allocated + o.chunk_mib * MIB <= o.max_alloc_mib * MIB)) {
		if (count == cap && !(ptrs = realloc(ptrs, (cap *= 2) * sizeof(*ptrs))))
			break;
		if ((alloc_rc = cuMemAlloc_v2(&ptrs[count], o.chunk_mib * MIB)) != CUDA_SUCCESS)
			break;
		count++;
		allocated += o.chunk_mib * MIB;
	}
	for (size_t i = 0; i < count; i++)
		cuMemFree_v2(ptrs[i]);
	free(ptrs);

	/* launch back to back; measure our share over the second half */
	int (*busy)(const char *, const int *, int, uint64_t *, uint64_t *) =
		(int (*)(const char *, const int *, int, uint64_t *, uint64_t *))dlsym(RTLD_DEFAULT,
										      "fakegpu_busy_ns");
	char uuid[NVML_UUID_BUFFER_SIZE];
	int pid = getpid(), have = busy && nvmlDeviceGetUUID(h, uuid, sizeof(uuid)) == NVML_SUCCESS;
	uint64_t b0 = 0, t0 = 0, b1 = 0, t1 = 0;
	unsigned long long launches = 0, half_at = 0;
	CUmodule m;
	CUfunction f;
	if (o.seconds > 0 && ((rc = cuModuleLoadData(&m, "workload")) != CUDA_SUCCESS ||
			      (rc = cuModuleGetFunction(&f, m, "spin")) != CUDA_SUCCESS))
		return fail("cuModuleGetFunction", rc);
	if (o.ns_per_block) {
		int (*set)(uint64_t) = (int (*)(uint64_t))dlsym(RTLD_DEFAULT, "fakegpu_set_ns_per_block");
		if (!set || set(o.ns_per_block) != 0)
			return fail("--ns-per-block needs the fake driver: fakegpu_set_ns_per_block", 0);
	}
	if (o.duty > 0 && !have)
		return fail("--duty needs the fake driver: fakegpu_busy_ns", 0);
	CUgraph graph = NULL;
	CUgraphExec exec = NULL;
	if (o.seconds > 0 && o.graph) {
		CUgraphNode node;
		CUDA_KERNEL_NODE_PARAMS_v2 p = { .func = f, .gridDimX = o.grid, .gridDimY = 1,
						 .gridDimZ = 1, .blockDimX = o.block, .blockDimY = 1,
						 .blockDimZ = 1 };
		if ((rc = cuGraphCreate(&graph, 0)) != CUDA_SUCCESS)
			return fail("cuGraphCreate", rc);
		for (unsigned i = 0; i < o.graph; i++)
			if ((rc = cuGraphAddKernelNode_v2(&node, graph, NULL, 0, &p)) != CUDA_SUCCESS)
				return fail("cuGraphAddKernelNode", rc);
		if ((rc = cuGraphInstantiateWithFlags(&exec, graph, 0)) != CUDA_SUCCESS)
			return fail("cuGraphInstantiate", rc);
	}
	CUdeviceptr buf = 0;
	if (o.seconds > 0 && o.memset_kib && (rc = cuMemAlloc_v2(&buf, o.memset_kib << 10)) != CUDA_SUCCESS)
		return fail("cuMemAlloc (--memset-kib)", rc);
	double start = now_s(), half = start + o.seconds / 2;
	uint64_t dstart = 0, dt = 0;
	if (o.duty > 0)
		busy(uuid, &pid, 1, &dstart, &dt);
	int marked = 0;
	double marked_at = 0, end = start;
	while (o.seconds > 0 && (end = now_s()) < start + o.seconds) {
		if (!marked && end >= half) {
			marked = 1;
			marked_at = end;
			half_at = launches;
			if (have)
				busy(uuid, &pid, 1, &b0, &t0);
		}
		if (o.duty > 0) { /* hold the duty cycle: wait while ahead of it */
			uint64_t bn, tn;
			busy(uuid, &pid, 1, &bn, &tn);
			/* per 500 ms, not since the start: a process with steady demand that was
			 * held back does not repay it later (a cumulative duty of 0.2 read 10.7 to
			 * 27.9% over the closed loop's measured window) */
			if (tn - dt >= DUTY_BLOCK_NS) {
				dstart = bn;
				dt = tn;
			}
			if ((double)(bn - dstart) > o.duty * (double)(tn - dt)) {
				struct timespec ts = { 0, 1000000 };
				nanosleep(&ts, NULL);
				continue;
			}
		}
		if (exec)
			rc = cuGraphLaunch(exec, NULL);
		else
			rc = cuLaunchKernel(f, o.grid, 1, 1, o.block, 1, 1, 0, NULL, NULL, NULL);
		if (rc != CUDA_SUCCESS)
			return fail(exec ? "cuGraphLaunch" : "cuLaunchKernel", rc);
		if (buf && (rc = cuMemsetD8_v2(buf, 0, o.memset_kib << 10)) != CUDA_SUCCESS)
			return fail("cuMemsetD8", rc);
		launches++;
	}
	if (exec && ((rc = cuGraphExecDestroy(exec)) != CUDA_SUCCESS ||
		     (rc = cuGraphDestroy(graph)) != CUDA_SUCCESS))
		return fail("cuGraphDestroy", rc);
	if (buf)
		cuMemFree_v2(buf);
	if (have && marked)
		busy(uuid, &pid, 1, &b1, &t1);
	char share[32] = "null";
	if (have && marked && t1 > t0)
		snprintf(share, sizeof(share), "%.4f", (double)(b1 - b0) / (double)(t1 - t0));
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
	       "\"half_launches\":%llu,\"half_seconds\":%.3f,\"end_cuda_free_mib\":%llu,\"end_nvml_used_mib\":%llu,\"util_share\":%s}\n",
	       devices, o.device, o.hold_mib, (unsigned long long)(total / MIB),
	       (unsigned long long)(free_b / MIB), nm.total / MIB, nm.used / MIB, o.chunk_mib,
	       allocated, alloc_rc, launches, o.seconds, launches - half_at,
	       marked ? end - marked_at : 0.0, (unsigned long long)(end_free / MIB),
	       end_nm.used / MIB, share);
	return 0;
}
