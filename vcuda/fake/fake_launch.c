/* fake_launch.c - fake kernel launches, synchronization and cuGetProcAddress. */
#include <string.h>

#include "fake.h"

static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz)
{
	int dev = fk_cur_dev();
	if (dev < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!f || gx == 0 || gy == 0 || gz == 0)
		return CUDA_ERROR_INVALID_VALUE;
	fk_launch(dev, (uint64_t)gx * gy * gz);
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
				  unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
				  void **extra)
{
	(void)bx, (void)by, (void)bz, (void)shmem, (void)s, (void)params, (void)extra;
	return launch(f, gx, gy, gz);
}
FK_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
				       unsigned bx, unsigned by, unsigned bz, unsigned shmem,
				       CUstream s, void **params, void **extra)
{
	return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}
FK_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
					     unsigned bx, unsigned by, unsigned bz, unsigned shmem,
					     CUstream s, void **params)
{
	return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, NULL);
}
FK_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
						  unsigned gz, unsigned bx, unsigned by, unsigned bz,
						  unsigned shmem, CUstream s, void **params)
{
	return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, NULL);
}
FK_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params,
				    void **extra)
{
	(void)params, (void)extra;
	return launch(f, c->gridDimX, c->gridDimY, c->gridDimZ);
}
FK_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params,
					 void **extra)
{
	return cuLaunchKernelEx(c, f, params, extra);
}

FK_EXPORT CUresult cuStreamSynchronize(CUstream s)
{
	(void)s;
	int dev = fk_cur_dev();
	if (dev < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	fk_sync(dev);
	return CUDA_SUCCESS;
}
FK_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s) { return cuStreamSynchronize(s); }

/* ---- cuGetProcAddress: (name, CUDA version, per-thread flag) -> versioned entry point ---- */

/* A future ABI version that is not an exported symbol: what a limiter cannot recognize. */
static CUresult mem_alloc_future(CUdeviceptr *p, size_t size)
{
	return cuMemAlloc_v2(p, size);
}

struct fk_proc {
	const char *base;
	int minver, ptds;
	void *fn;
};

#define P(base, ver, ptds, fn) { base, ver, ptds, (void *)fn }
#define SAME(n) P(#n, 0, 0, n)
#define V2(n) P(#n, 0, 0, n), P(#n, 3020, 0, n##_v2)
#define PT(n) P(#n, 0, 0, n), P(#n, 0, 1, n##_ptsz)
static const struct fk_proc fk_procs[] = {
	SAME(cuInit), SAME(cuDriverGetVersion), SAME(cuDeviceGet), SAME(cuDeviceGetCount),
	SAME(cuDeviceGetName), SAME(cuDeviceGetUuid), P("cuDeviceGetUuid", 11040, 0, cuDeviceGetUuid_v2),
	V2(cuDeviceTotalMem), P("cuCtxCreate", 3020, 0, cuCtxCreate_v2), SAME(cuCtxSetCurrent),
	SAME(cuCtxGetCurrent), SAME(cuCtxGetDevice), SAME(cuCtxSynchronize),
	P("cuCtxDestroy", 4000, 0, cuCtxDestroy_v2), SAME(cuDevicePrimaryCtxRetain),
	V2(cuMemAlloc), P("cuMemAlloc", 99000, 0, mem_alloc_future), V2(cuMemAllocPitch), V2(cuMemFree), V2(cuMemGetInfo),
	SAME(cuMemAllocManaged), PT(cuMemAllocAsync), PT(cuMemAllocFromPoolAsync), PT(cuMemFreeAsync),
	SAME(cuMemCreate), SAME(cuMemRelease), V2(cuArrayCreate), V2(cuArray3DCreate),
	SAME(cuArrayDestroy), SAME(cuMipmappedArrayCreate), SAME(cuMipmappedArrayDestroy),
	PT(cuLaunchKernel), PT(cuLaunchKernelEx), PT(cuLaunchCooperativeKernel), PT(cuGraphLaunch),
	SAME(cuGraphInstantiate), P("cuGraphInstantiate", 11000, 0, cuGraphInstantiate_v2),
	P("cuGraphInstantiate", 12000, 0, cuGraphInstantiateWithFlags),
	SAME(cuGraphInstantiateWithFlags), PT(cuGraphInstantiateWithParams), SAME(cuGraphExecDestroy),
	PT(cuStreamSynchronize), SAME(cuGetProcAddress), P("cuGetProcAddress", 12000, 0, cuGetProcAddress_v2),
	SAME(cuEventCreate), PT(cuEventRecord), SAME(cuEventQuery), P("cuEventDestroy", 4000, 0, cuEventDestroy_v2),
	PT(cuStreamIsCapturing), SAME(cuThreadExchangeStreamCaptureMode),
};

static CUresult lookup(const char *sym, void **pfn, int ver, cuuint64_t flags, int *status)
{
	int want_ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
	const struct fk_proc *best = NULL;
	int seen = 0;
	for (size_t i = 0; i < sizeof(fk_procs) / sizeof(fk_procs[0]); i++) {
		const struct fk_proc *p = &fk_procs[i];
		if (strcmp(p->base, sym) != 0)
			continue;
		seen = 1;
		if (p->minver > ver || (p->ptds && !want_ptds))
			continue;
		if (!best || p->ptds > best->ptds || (p->ptds == best->ptds && p->minver > best->minver))
			best = p;
	}
	*pfn = best ? best->fn : NULL;
	if (status)
		*status = best ? CU_GET_PROC_ADDRESS_SUCCESS
			: seen ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
			       : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	return best ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

FK_EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, cuuint64_t flags)
{
	return lookup(sym, pfn, ver, flags, NULL);
}

FK_EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags,
				       CUdriverProcAddressQueryResult *status)
{
	return lookup(sym, pfn, ver, flags, status);
}
