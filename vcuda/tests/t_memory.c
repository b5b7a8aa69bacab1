/* t_memory.c - every allocation path counted, over-cap OOM without leaks, several devices. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static uint64_t used_now(void)
{
	size_t f, t;
	CCHECK(cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS, "cuMemGetInfo");
	CCHECK(f <= t, "free %zu > total %zu", f, t);
	return t - f;
}

static uint64_t r512(uint64_t n) { return (n + 511) & ~511ull; }

/* One allocation of `size` bytes (or an array of that many bytes) by path `k`; returns the
 * bytes the limiter should count, or 0 if the path failed (rc in *rc). */
struct alloc { int k; CUdeviceptr p; CUdeviceptr_v1 p32; CUmemGenericAllocationHandle h; CUarray a; CUmipmappedArray m; };
enum { P_V2, P_V1, P_PITCH2, P_PITCH1, P_MANAGED, P_ASYNC, P_ASYNC_PT, P_POOL, P_POOL_PT, P_VMM,
       P_ARR2, P_ARR1, P_3D2, P_3D1, P_MIP, P_COUNT };
static const char *const path_names[P_COUNT] = {
	"cuMemAlloc_v2", "cuMemAlloc", "cuMemAllocPitch_v2", "cuMemAllocPitch", "cuMemAllocManaged",
	"cuMemAllocAsync", "cuMemAllocAsync_ptsz", "cuMemAllocFromPoolAsync",
	"cuMemAllocFromPoolAsync_ptsz", "cuMemCreate", "cuArrayCreate_v2", "cuArrayCreate",
	"cuArray3DCreate_v2", "cuArray3DCreate", "cuMipmappedArrayCreate" };

static CUresult do_alloc(struct alloc *a, int k, uint64_t size, uint64_t *counted)
{
	a->k = k;
	CUresult rc;
	size_t pitch;
	unsigned pitch32;
	uint64_t w = size / 16; /* arrays: w x 4 x 1 channel float = size bytes */
	CUDA_ARRAY_DESCRIPTOR d2 = { w, 4, CU_AD_FORMAT_FLOAT, 1 };
	CUDA_ARRAY_DESCRIPTOR_v1 d1 = { (unsigned)w, 4, CU_AD_FORMAT_FLOAT, 1 };
	CUDA_ARRAY3D_DESCRIPTOR d3 = { w, 2, 2, CU_AD_FORMAT_FLOAT, 1, 0 };
	CUDA_ARRAY3D_DESCRIPTOR_v1 d31 = { (unsigned)w, 2, 2, CU_AD_FORMAT_FLOAT, 1, 0 };
	CUDA_ARRAY3D_DESCRIPTOR dm = { 256, 256, 0, CU_AD_FORMAT_FLOAT, 1, 0 };
	CUmemAllocationProp prop = { .type = 1, .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
	*counted = r512(size);
	switch (k) {
	case P_V2: rc = cuMemAlloc_v2(&a->p, size); break;
	case P_V1: rc = cuMemAlloc(&a->p32, (unsigned)size); break;
	case P_PITCH2: /* rows of 1000 bytes -> pitch 1024 */
		rc = cuMemAllocPitch_v2(&a->p, &pitch, 1000, size / 1024, 4);
		*counted = r512(1024 * (size / 1024));
		break;
	case P_PITCH1:
		rc = cuMemAllocPitch(&a->p32, &pitch32, 1000, (unsigned)(size / 1024), 4);
		*counted = r512(1024 * (size / 1024));
		break;
	case P_MANAGED: rc = cuMemAllocManaged(&a->p, size, 1); break;
	case P_ASYNC: rc = cuMemAllocAsync(&a->p, size, NULL); break;
	case P_ASYNC_PT: rc = cuMemAllocAsync_ptsz(&a->p, size, NULL); break;
	case P_POOL: rc = cuMemAllocFromPoolAsync(&a->p, size, NULL, NULL); break;
	case P_POOL_PT: rc = cuMemAllocFromPoolAsync_ptsz(&a->p, size, NULL, NULL); break;
	case P_VMM: rc = cuMemCreate(&a->h, size, &prop, 0); break;
	case P_ARR2: rc = cuArrayCreate_v2(&a->a, &d2); *counted = r512(w * 16); break;
	case P_ARR1: rc = cuArrayCreate(&a->a, &d1); *counted = r512(w * 16); break;
	case P_3D2: rc = cuArray3DCreate_v2(&a->a, &d3); *counted = r512(w * 16); break;
	case P_3D1: rc = cuArray3DCreate(&a->a, &d31); *counted = r512(w * 16); break;
	default: /* 256x256 float, 9 levels: 4 * (65536 + 16384 + ... + 1) = 349524 bytes */
		rc = cuMipmappedArrayCreate(&a->m, &dm, 9);
		*counted = r512(349524);
		break;
	}
	if (rc != CUDA_SUCCESS)
		*counted = 0;
	return rc;
}

static CUresult do_free(struct alloc *a)
{
	switch (a->k) {
	case P_V1: case P_PITCH1: return cuMemFree(a->p32);
	case P_ASYNC: case P_POOL: return cuMemFreeAsync(a->p, NULL);
	case P_ASYNC_PT: case P_POOL_PT: return cuMemFreeAsync_ptsz(a->p, NULL);
	case P_VMM: return cuMemRelease(a->h);
	case P_ARR2: case P_ARR1: case P_3D2: case P_3D1: return cuArrayDestroy(a->a);
	case P_MIP: return cuMipmappedArrayDestroy(a->m);
	default: return cuMemFree_v2(a->p);
	}
}

int child_mem_paths(int argc, char **argv)
{
	CCHECK(argc == 2, "args: cap_mib uuid");
	uint64_t cap = strtoull(argv[0], NULL, 10) * MiB, fake0, fake, peak;
	t_ctx(0);
	CCHECK(used_now() == 0, "fresh container uses %llu", (unsigned long long)used_now());
	CCHECK(fakegpu_mem(argv[1], &fake0, &peak) == 0, "fake state");
	for (int k = 0; k < P_COUNT; k++) {
		struct alloc a;
		uint64_t want;
		CUresult rc = do_alloc(&a, k, 3 * MiB + 100, &want);
		CCHECK(rc == CUDA_SUCCESS, "%s: %d", path_names[k], rc);
		CCHECK(used_now() == want, "%s counted %llu, want %llu", path_names[k],
		       (unsigned long long)used_now(), (unsigned long long)want);
		CCHECK(do_free(&a) == CUDA_SUCCESS, "%s: free", path_names[k]);
		CCHECK(used_now() == 0, "%s: %llu left after free", path_names[k],
		       (unsigned long long)used_now());
	}
	void *host;
	CCHECK(cuMemAllocHost_v2(&host, 8 * MiB) == CUDA_SUCCESS, "host alloc");
	CCHECK(used_now() == 0, "host memory counted");
	cuMemFreeHost(host);
	/* views: total = cap everywhere, used = reservations */
	CUdeviceptr p;
	CCHECK(cuMemAlloc_v2(&p, 10 * MiB) == CUDA_SUCCESS, "alloc");
	size_t tm;
	unsigned tm32, f32, t32;
	CCHECK(cuDeviceTotalMem_v2(&tm, 0) == CUDA_SUCCESS && tm == cap, "cuDeviceTotalMem_v2 %zu", tm);
	CCHECK(cuDeviceTotalMem(&tm32, 0) == CUDA_SUCCESS && tm32 == cap, "cuDeviceTotalMem %u", tm32);
	CCHECK(cuMemGetInfo(&f32, &t32) == CUDA_SUCCESS && t32 == cap && f32 == cap - 10 * MiB,
	       "cuMemGetInfo v1: %u/%u", f32, t32);
	nvmlDevice_t h;
	nvmlMemory_t m;
	nvmlMemory_v2_t m2 = { .version = NVML_MEMORY_V2_VERSION };
	CCHECK(nvmlInit_v2() == NVML_SUCCESS && nvmlDeviceGetHandleByIndex_v2(0, &h) == NVML_SUCCESS,
	       "nvml");
	CCHECK(nvmlDeviceGetMemoryInfo(h, &m) == NVML_SUCCESS, "nvml memory");
	CCHECK(m.total == cap && m.used == 10 * MiB && m.free == cap - 10 * MiB,
	       "nvml v1 %llu/%llu/%llu", m.total, m.used, m.free);
	CCHECK(nvmlDeviceGetMemoryInfo_v2(h, &m2) == NVML_SUCCESS, "nvml memory v2");
	CCHECK(m2.total == cap && m2.used == 10 * MiB && m2.free == cap - 10 * MiB,
	       "nvml v2 %llu/%llu/%llu", m2.total, m2.used, m2.free);
	CCHECK(cuMemFree_v2(p) == CUDA_SUCCESS, "free");
	CCHECK(fakegpu_mem(argv[1], &fake, &peak) == 0 && fake == fake0, "fake leaked %llu",
	       (unsigned long long)(fake - fake0));
	printf("%d paths counted\n", P_COUNT);
	return 0;
}

int child_mem_over_cap(int argc, char **argv)
{
	CCHECK(argc == 2, "args: cap_mib uuid");
	uint64_t cap = strtoull(argv[0], NULL, 10) * MiB, f0, f, peak;
	t_ctx(0);
	CUdeviceptr fill;
	CCHECK(cuMemAlloc_v2(&fill, cap - MiB) == CUDA_SUCCESS, "fill to cap - 1 MiB");
	CCHECK(fakegpu_mem(argv[1], &f0, &peak) == 0, "fake state");
	uint64_t u0 = used_now();
	for (int k = 0; k < P_COUNT; k++) {
		struct alloc a;
		uint64_t want;
		CUresult rc = do_alloc(&a, k, k == P_MIP ? 0 : 2 * MiB, &want);
		if (k == P_MIP) { /* the mipmap is small: take the rest first */
			CUdeviceptr q;
			CCHECK(rc == CUDA_SUCCESS && do_free(&a) == CUDA_SUCCESS, "mipmap");
			CCHECK(cuMemAlloc_v2(&q, MiB - 4096) == CUDA_SUCCESS, "rest");
			rc = do_alloc(&a, k, 0, &want);
			CCHECK(rc == CUDA_ERROR_OUT_OF_MEMORY, "mipmap over cap: %d", rc);
			CCHECK(cuMemFree_v2(q) == CUDA_SUCCESS, "free rest");
			continue;
		}
		CCHECK(rc == CUDA_ERROR_OUT_OF_MEMORY, "%s over the cap gave %d", path_names[k], rc);
		CCHECK(used_now() == u0, "%s: count moved", path_names[k]);
		CCHECK(fakegpu_mem(argv[1], &f, &peak) == 0 && f == f0, "%s: driver memory leaked",
		       path_names[k]);
	}
	CUdeviceptr p;
	CCHECK(cuMemAlloc_v2(&p, 512 * 1024) == CUDA_SUCCESS, "what fits still fits");
	CCHECK(cuMemFree_v2(p) == CUDA_SUCCESS && cuMemFree_v2(fill) == CUDA_SUCCESS, "free");
	CCHECK(cuMemFree_v2(fill) != CUDA_SUCCESS, "double free passed");
	CCHECK(used_now() == 0, "left %llu", (unsigned long long)used_now());
	CCHECK(peak <= cap, "driver peak %llu over cap", (unsigned long long)peak);
	printf("over-cap refused on every path\n");
	return 0;
}

/* devices: 0 cap 100 MiB, 1 cap 50 MiB, 2 visible but not in the config */
int child_mem_multi(int argc, char **argv)
{
	(void)argc, (void)argv;
	CUcontext c[3];
	CUdevice d[3];
	CUdeviceptr p;
	size_t f, t;
	CCHECK(cuInit(0) == CUDA_SUCCESS, "cuInit");
	for (int i = 0; i < 3; i++)
		CCHECK(cuDeviceGet(&d[i], i) == CUDA_SUCCESS &&
		       cuCtxCreate_v2(&c[i], 0, d[i]) == CUDA_SUCCESS, "ctx %d", i);
	cuCtxSetCurrent(c[1]);
	CCHECK(cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS && t == 50 * MiB, "dev1 total %zu", t);
	CCHECK(cuMemAlloc_v2(&p, 40 * MiB) == CUDA_SUCCESS, "dev1 40");
	CCHECK(cuMemAlloc_v2(&p, 20 * MiB) == CUDA_ERROR_OUT_OF_MEMORY, "dev1 over cap");
	cuCtxSetCurrent(c[0]);
	CCHECK(cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS && t == 100 * MiB && f == t, "dev0 view");
	CCHECK(cuMemAlloc_v2(&p, 90 * MiB) == CUDA_SUCCESS, "dev0 90");
	CUmemGenericAllocationHandle h;
	CUmemAllocationProp prop = { .type = 1, .location = { CU_MEM_LOCATION_TYPE_DEVICE, 1 } };
	CCHECK(cuMemCreate(&h, 20 * MiB, &prop, 0) == CUDA_ERROR_OUT_OF_MEMORY, "vmm on dev1 over");
	CCHECK(cuMemCreate(&h, 8 * MiB, &prop, 0) == CUDA_SUCCESS, "vmm on dev1 fits");
	cuCtxSetCurrent(c[2]);
	CCHECK(cuMemAlloc_v2(&p, MiB) == CUDA_ERROR_OUT_OF_MEMORY, "unconfigured device allocated");
	CCHECK(cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS && t == 0 && f == 0, "unconfigured view");
	CCHECK(cuLaunchKernel((CUfunction)&c, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) ==
	       CUDA_ERROR_INVALID_DEVICE, "launch on unconfigured device");
	CCHECK(cuDeviceTotalMem_v2(&t, d[1]) == CUDA_SUCCESS && t == 50 * MiB, "total dev1");
	CCHECK(cuDeviceTotalMem_v2(&t, d[2]) == CUDA_SUCCESS && t == 0, "total dev2");
	printf("devices kept apart\n");
	return 0;
}

static int run_mem_child(const char *mode, uint64_t cap_mib, int policy, char *out, size_t n)
{
	struct t_container ct;
	char uuid[64], devs[128], cfg[300], cap[32];
	t_uuid(uuid);
	t_container(&ct, policy);
	t_container_dev(&ct, uuid, cap_mib, 100);
	if (t_container_write(&ct) != 0)
		return -1;
	snprintf(devs, sizeof(devs), "FAKEGPU_DEVICES=%s:81920", uuid);
	snprintf(cfg, sizeof(cfg), "VCUDA_CONFIG=%s", ct.cfg);
	snprintf(cap, sizeof(cap), "%llu", (unsigned long long)cap_mib);
	const char *env[] = { devs, cfg, NULL };
	const char *args[] = { mode, cap, uuid, NULL };
	return t_run(env, args, out, n);
}

void test_mem_every_path_counted(void)
{
	char out[8192];
	int rc = run_mem_child("mem_paths", 512, VCUDA_POLICY_FIXED, out, sizeof(out));
	CHECK(rc == 0, "exit %d:\n%s", rc, out);
	t_note("%s", strtok(out, "\n"));
}

void test_mem_over_cap_oom_no_leak(void)
{
	char out[8192];
	int rc = run_mem_child("mem_over_cap", 64, VCUDA_POLICY_NONE, out, sizeof(out));
	CHECK(rc == 0, "exit %d:\n%s", rc, out);
}

void test_mem_multi_device(void)
{
	struct t_container ct;
	char u[3][64], devs[300], cfg[300], out[8192];
	for (int i = 0; i < 3; i++)
		t_uuid(u[i]);
	t_container(&ct, VCUDA_POLICY_FIXED);
	t_container_dev(&ct, u[0], 100, 100);
	t_container_dev(&ct, u[1], 50, 100);
	CHECK(t_container_write(&ct) == 0, "config");
	snprintf(devs, sizeof(devs), "FAKEGPU_DEVICES=%s:1024,%s:1024,%s:1024", u[0], u[1], u[2]);
	snprintf(cfg, sizeof(cfg), "VCUDA_CONFIG=%s", ct.cfg);
	const char *env[] = { devs, cfg, NULL };
	const char *args[] = { "mem_multi", NULL };
	int rc = t_run(env, args, out, sizeof(out));
	CHECK(rc == 0, "exit %d:\n%s", rc, out);
	CHECK(strstr(out, "device 2 is visible but not in the limiter config"), "message:\n%s", out);
}
