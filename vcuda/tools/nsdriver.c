/*
 * nsdriver.c - libnsdriver.so, a library that links the CUDA driver itself, for the workload's
 * --hold-via: loaded with dlmopen(LM_ID_NEWLM) it gets a link-map namespace of its own, with its
 * own copy of libcuda.so.1 and no libvcuda (the loader does not put preloads into new
 * namespaces), as a tenant's code written to get around the limiter would. On the fake driver.
 */
#include "../include/cuda_api.h"

#define MIB (1ull << 20)

/* nsdriver_hold opens a context on device dev and allocates mib there, kept until the process
 * ends; it returns the driver's result. */
__attribute__((visibility("default"))) int nsdriver_hold(int dev, unsigned long long mib)
{
	CUdevice d;
	CUcontext ctx;
	CUdeviceptr p;
	int rc;
	if ((rc = cuInit(0)) != CUDA_SUCCESS || (rc = cuDeviceGet(&d, dev)) != CUDA_SUCCESS ||
	    (rc = cuCtxCreate_v2(&ctx, 0, d)) != CUDA_SUCCESS)
		return rc;
	return cuMemAlloc_v2(&p, mib * MIB);
}
