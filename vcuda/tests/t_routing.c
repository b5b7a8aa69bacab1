/* t_routing.c - every way of finding a driver entry point lands on our hook (dladdr says so). */
#include <dlfcn.h>
#include <string.h>

#include "harness.h"

void *vcuda_probe_next(const char *name);

/* "" if p is the exported symbol `want` of libvcuda.so; else what it is */
static const char *where(void *p, const char *want, const char *lib, char *buf, size_t n)
{
	Dl_info di;
	if (!p || !dladdr(p, &di) || !di.dli_fname) {
		snprintf(buf, n, "%p: unknown", p);
		return buf;
	}
	const char *base = strrchr(di.dli_fname, '/') ? strrchr(di.dli_fname, '/') + 1 : di.dli_fname;
	if (strcmp(base, lib) == 0 && di.dli_sname && strcmp(di.dli_sname, want) == 0)
		return "";
	snprintf(buf, n, "%s in %s", di.dli_sname ? di.dli_sname : "?", base);
	return buf;
}
#define LANDS(p, want, lib, how)                                                      \
	do {                                                                          \
		char b_[512];                                                         \
		const char *w_ = where(p, want, lib, b_, sizeof(b_));                 \
		CCHECK(!*w_, "%s(%s) landed on %s, want %s in %s", how, want, w_, want, lib); \
	} while (0)

static int routing_dlsym(void)
{
	static const char *const names[] = { "cuInit", "cuMemAlloc", "cuMemAlloc_v2",
		"cuMemAllocAsync_ptsz", "cuMemCreate", "cuArray3DCreate_v2", "cuLaunchKernel",
		"cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchCooperativeKernel_ptsz",
		"cuGraphLaunch", "cuGraphInstantiateWithFlags", "cuGetProcAddress",
		"cuGetProcAddress_v2", "cuMemGetInfo_v2", "cuDeviceTotalMem_v2",
		"nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2" };
	void *cuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
	void *nvml = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_NOLOAD);
	CCHECK(cuda && nvml, "driver libraries not loaded");
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		const char *n = names[i];
		void *h = n[0] == 'n' ? nvml : cuda;
		LANDS(dlsym(RTLD_DEFAULT, n), n, "libvcuda.so", "dlsym(RTLD_DEFAULT)");
		LANDS(dlsym(RTLD_NEXT, n), n, "libvcuda.so", "dlsym(RTLD_NEXT) from the program");
		LANDS(dlsym(h, n), n, "libvcuda.so", "dlsym(driver handle)");
		LANDS(vcuda_probe_next(n), n, "libvcuda.so", "dlsym(RTLD_NEXT) from a later library");
	}
	/* not hooked: the driver's own */
	LANDS(dlsym(cuda, "cuCtxSynchronize"), "cuCtxSynchronize", "libcuda.so.1", "dlsym(handle)");
	/* other names keep RTLD_NEXT semantics relative to the caller */
	LANDS(vcuda_probe_next("vcuda_probe"), "vcuda_probe", "librouteprobe_b.so",
	      "dlsym(RTLD_NEXT) of a non-CUDA name");
	LANDS(dlsym(RTLD_DEFAULT, "vcuda_probe"), "vcuda_probe", "librouteprobe_a.so", "RTLD_DEFAULT");
	printf("dlsym routes checked\n");
	return 0;
}

struct gpa { const char *sym; int ver; int flags; const char *want; };

static int routing_gpa(void)
{
	static const struct gpa cases[] = {
		{ "cuMemAlloc", 12000, 0, "cuMemAlloc_v2" }, { "cuMemAlloc", 3000, 0, "cuMemAlloc" },
		{ "cuMemFree", 12000, 0, "cuMemFree_v2" },
		{ "cuMemAllocPitch", 12000, 0, "cuMemAllocPitch_v2" },
		{ "cuMemGetInfo", 12000, 0, "cuMemGetInfo_v2" },
		{ "cuDeviceTotalMem", 12000, 0, "cuDeviceTotalMem_v2" },
		{ "cuArrayCreate", 12000, 0, "cuArrayCreate_v2" },
		{ "cuArray3DCreate", 12000, 0, "cuArray3DCreate_v2" },
		{ "cuLaunchKernel", 12000, 0, "cuLaunchKernel" },
		{ "cuLaunchKernel", 12000, 2, "cuLaunchKernel_ptsz" },
		{ "cuLaunchKernel", 12000, 1, "cuLaunchKernel" },
		{ "cuLaunchKernelEx", 12000, 2, "cuLaunchKernelEx_ptsz" },
		{ "cuLaunchCooperativeKernel", 12000, 2, "cuLaunchCooperativeKernel_ptsz" },
		{ "cuGraphLaunch", 12000, 2, "cuGraphLaunch_ptsz" },
		{ "cuMemAllocAsync", 12000, 2, "cuMemAllocAsync_ptsz" },
		{ "cuMemAllocAsync", 12000, 0, "cuMemAllocAsync" },
		{ "cuMemAllocFromPoolAsync", 12000, 2, "cuMemAllocFromPoolAsync_ptsz" },
		{ "cuMemFreeAsync", 12000, 2, "cuMemFreeAsync_ptsz" },
		{ "cuGraphInstantiate", 12000, 0, "cuGraphInstantiateWithFlags" },
		{ "cuGraphInstantiate", 11000, 0, "cuGraphInstantiate_v2" },
		{ "cuGraphInstantiateWithParams", 12000, 2, "cuGraphInstantiateWithParams_ptsz" },
		{ "cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2" },
		{ "cuGetProcAddress", 11030, 0, "cuGetProcAddress" },
		{ "cuInit", 12000, 0, "cuInit" },
	};
	t_ctx(0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct gpa *c = &cases[i];
		void *p = NULL;
		CUdriverProcAddressQueryResult st = -1;
		CCHECK(cuGetProcAddress(c->sym, &p, c->ver, (cuuint64_t)c->flags) == CUDA_SUCCESS, "%s", c->sym);
		LANDS(p, c->want, "libvcuda.so", "cuGetProcAddress");
		p = NULL;
		CCHECK(cuGetProcAddress_v2(c->sym, &p, c->ver, (cuuint64_t)c->flags, &st) == CUDA_SUCCESS &&
		       st == CU_GET_PROC_ADDRESS_SUCCESS, "%s v2", c->sym);
		LANDS(p, c->want, "libvcuda.so", "cuGetProcAddress_v2");
	}
	void *p = NULL;
	/* an entry point of a hooked family that we cannot identify is refused, not passed on */
	CCHECK(cuGetProcAddress("cuMemAlloc", &p, 99000, 0) == CUDA_ERROR_NOT_FOUND && !p,
	       "unknown cuMemAlloc entry point passed through: %p", p);
	CCHECK(cuGetProcAddress("cuCtxSynchronize", &p, 12000, 0) == CUDA_SUCCESS, "unhooked");
	LANDS(p, "cuCtxSynchronize", "libcuda.so.1", "cuGetProcAddress of an unhooked name");
	/* the pointers work: an allocation through them is counted */
	CUresult (*gpa2)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
	CUresult (*alloc)(CUdeviceptr *, size_t);
	CCHECK(cuGetProcAddress_v2("cuGetProcAddress", (void **)&gpa2, 12000, 0, NULL) == 0, "gpa");
	CCHECK(gpa2("cuMemAlloc", (void **)&alloc, 12000, 0, NULL) == 0, "gpa via gpa");
	CUdeviceptr d;
	size_t f, t;
	CCHECK(alloc(&d, 64 * MiB) == CUDA_SUCCESS, "alloc via pointer");
	CCHECK(cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS && t - f == 64 * MiB, "not counted");
	CCHECK(alloc(&d, t) == CUDA_ERROR_OUT_OF_MEMORY, "cap not enforced through pointer");
	printf("cuGetProcAddress routes checked\n");
	return 0;
}

int child_routing(int argc, char **argv)
{
	CCHECK(argc == 1, "args");
	return strcmp(argv[0], "dlsym") == 0 ? routing_dlsym() : routing_gpa();
}

static void run_routing(const char *what, const char *expect)
{
	struct t_container ct;
	char uuid[64], devs[128], cfg[300], out[8192];
	t_uuid(uuid);
	t_container(&ct, VCUDA_POLICY_NONE);
	t_container_dev(&ct, uuid, 256, 100);
	CHECK(t_container_write(&ct) == 0, "config");
	snprintf(devs, sizeof(devs), "FAKEGPU_DEVICES=%s:1024", uuid);
	snprintf(cfg, sizeof(cfg), "VCUDA_CONFIG=%s", ct.cfg);
	const char *env[] = { devs, cfg, NULL };
	const char *args[] = { "routing", what, NULL };
	int rc = t_run(env, args, out, sizeof(out));
	CHECK(rc == 0, "exit %d:\n%s", rc, out);
	CHECK(!expect || strstr(out, expect), "want \"%s\" in:\n%s", expect, out);
}

void test_routing_dlsym(void) { run_routing("dlsym", NULL); }
void test_routing_get_proc_address(void)
{
	run_routing("gpa", "cuGetProcAddress(\"cuMemAlloc\") returned an entry point vcuda does not know");
}
