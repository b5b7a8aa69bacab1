/* fake_cuda.c - fake driver API: init, devices, contexts, memory, and the test query API. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake.h"

#define CHECK_INIT()                                   \
	do {                                           \
		int rc_ = fk_init();                   \
		if (rc_ != CUDA_SUCCESS)               \
			return rc_;                    \
	} while (0)
#define CUR_DEV(d)                                     \
	int d = fk_cur_dev();                          \
	if (d < 0)                                     \
		return CUDA_ERROR_INVALID_CONTEXT

FK_EXPORT CUresult cuInit(unsigned int flags)
{
	(void)flags;
	return fk_init();
}

FK_EXPORT CUresult cuDriverGetVersion(int *v)
{
	*v = 12040;
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuDeviceGetCount(int *n)
{
	CHECK_INIT();
	*n = fk.ndev;
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
	CHECK_INIT();
	if (ordinal < 0 || ordinal >= fk.ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	*dev = ordinal;
	return CUDA_SUCCESS;
}

#define VALID_DEV(d)                                   \
	do {                                           \
		CHECK_INIT();                          \
		if ((d) < 0 || (d) >= fk.ndev)         \
			return CUDA_ERROR_INVALID_DEVICE; \
	} while (0)

FK_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	VALID_DEV(dev);
	snprintf(name, (size_t)len, "Fake GPU %d", dev);
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuDeviceGetUuid(CUuuid *u, CUdevice dev)
{
	VALID_DEV(dev);
	memcpy(u->bytes, fk.dev[dev].raw, 16);
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice dev)
{
	return cuDeviceGetUuid(u, dev);
}

FK_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	VALID_DEV(dev);
	*bytes = fk.dev[dev].total;
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
	VALID_DEV(dev);
	*bytes = fk.dev[dev].total > 0xFFFFFFFFull ? 0xFFFFFFFFu : (unsigned int)fk.dev[dev].total;
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuCtxGetDevice(CUdevice *dev)
{
	CUR_DEV(d);
	*dev = d;
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuCtxSynchronize(void)
{
	CUR_DEV(d);
	fk_sync(d);
	return CUDA_SUCCESS;
}

/* ---- memory ---- */

static CUresult alloc_ptr(int dev, uint64_t size, CUdeviceptr *out, int v1)
{
	if (size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = fk_mem_take(dev, size);
	if (rc != CUDA_SUCCESS)
		return rc;
	uint64_t span = (size + 511) & ~511ull;
	CUdeviceptr p = v1 ? __atomic_fetch_add(&fk.bump32, (uint32_t)span, __ATOMIC_RELAXED)
			   : __atomic_fetch_add(&fk.bump[dev], span, __ATOMIC_RELAXED);
	if (vc_htab_put(&fk.allocs, FK_KIND_PTR, p, dev, size) != 0) {
		fk_mem_give(dev, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*out = p;
	return CUDA_SUCCESS;
}

static CUresult free_ptr(CUdeviceptr p)
{
	int dev;
	uint64_t size;
	if (!vc_htab_take(&fk.allocs, FK_KIND_PTR, p, &dev, &size))
		return CUDA_ERROR_INVALID_VALUE;
	fk_mem_give(dev, size);
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size)
{
	CUR_DEV(d);
	return alloc_ptr(d, size, p, 0);
}

FK_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *p, unsigned int size)
{
	CUR_DEV(d);
	CUdeviceptr q;
	CUresult rc = alloc_ptr(d, size, &q, 1);
	if (rc == CUDA_SUCCESS)
		*p = (CUdeviceptr_v1)q;
	return rc;
}

FK_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *p, size_t size, unsigned int flags)
{
	(void)flags;
	return cuMemAlloc_v2(p, size);
}

FK_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h,
				      unsigned int elem)
{
	CUR_DEV(d);
	if (elem != 4 && elem != 8 && elem != 16)
		return CUDA_ERROR_INVALID_VALUE;
	*pitch = (w + 511) & ~(size_t)511;
	return alloc_ptr(d, *pitch * h, p, 0);
}

FK_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *p, unsigned int *pitch, unsigned int w,
				   unsigned int h, unsigned int elem)
{
	CUR_DEV(d);
	if (elem != 4 && elem != 8 && elem != 16)
		return CUDA_ERROR_INVALID_VALUE;
	*pitch = (w + 511) & ~511u;
	CUdeviceptr q;
	CUresult rc = alloc_ptr(d, (uint64_t)*pitch * h, &q, 1);
	if (rc == CUDA_SUCCESS)
		*p = (CUdeviceptr_v1)q;
	return rc;
}

FK_EXPORT CUresult cuMemFree_v2(CUdeviceptr p) { return free_ptr(p); }
FK_EXPORT CUresult cuMemFree(CUdeviceptr_v1 p) { return free_ptr(p); }

FK_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t size, CUstream s)
{
	(void)s;
	return cuMemAlloc_v2(p, size);
}
FK_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t size, CUstream s)
{
	return cuMemAllocAsync(p, size, s);
}
FK_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t size, CUmemoryPool pool,
					   CUstream s)
{
	(void)pool;
	return cuMemAllocAsync(p, size, s);
}
FK_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t size, CUmemoryPool pool,
						CUstream s)
{
	return cuMemAllocFromPoolAsync(p, size, pool, s);
}
FK_EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
	(void)s;
	return free_ptr(p);
}
FK_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { return cuMemFreeAsync(p, s); }

FK_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size,
			       const CUmemAllocationProp *prop, unsigned long long flags)
{
	(void)flags;
	CHECK_INIT();
	int dev = prop->location.id;
	if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || dev < 0 || dev >= fk.ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	CUresult rc = fk_mem_take(dev, size);
	if (rc != CUDA_SUCCESS)
		return rc;
	uint64_t id = __atomic_fetch_add(&fk.next_handle, 1, __ATOMIC_RELAXED);
	if (vc_htab_put(&fk.allocs, FK_KIND_HANDLE, id, dev, size) != 0) {
		fk_mem_give(dev, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*h = id;
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
	int dev;
	uint64_t size;
	if (!vc_htab_take(&fk.allocs, FK_KIND_HANDLE, h, &dev, &size))
		return CUDA_ERROR_INVALID_VALUE;
	fk_mem_give(dev, size);
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total)
{
	CUR_DEV(d);
	struct fk_state *s = fk.dev[d].st;
	fk_lock(s);
	*free_b = s->total - s->used;
	*total = s->total;
	fk_unlock(s);
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuMemGetInfo(unsigned int *free_b, unsigned int *total)
{
	size_t f, t;
	CUresult rc = cuMemGetInfo_v2(&f, &t);
	if (rc == CUDA_SUCCESS) {
		*free_b = f > 0xFFFFFFFFull ? 0xFFFFFFFFu : (unsigned int)f;
		*total = t > 0xFFFFFFFFull ? 0xFFFFFFFFu : (unsigned int)t;
	}
	return rc;
}

FK_EXPORT CUresult cuMemAllocHost_v2(void **p, size_t size)
{
	*p = calloc(1, size ? size : 1);
	return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

FK_EXPORT CUresult cuMemFreeHost(void *p)
{
	free(p);
	return CUDA_SUCCESS;
}

/* ---- memset and copies: GPU time no launch counts ---- */

/* A memset is a kernel on the device: GPU busy time of the process that asked, launch
 * overhead included. The call is asynchronous, like cuMemsetD8Async on the legacy stream. */
FK_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n)
{
	(void)v;
	CUR_DEV(d);
	int dev;
	uint64_t size;
	if (!vc_htab_get(&fk.allocs, FK_KIND_PTR, p, &dev, &size) || dev != d || n > size)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t dur = (uint64_t)((double)n / (double)(1 << 20) * (double)fk.memset_ns_per_mib);
	fk_enqueue(d, dur < fk.launch_ns ? fk.launch_ns : dur);
	return CUDA_SUCCESS;
}

/* A host-to-device copy runs on a copy engine: it waits for the process's queued work
 * (legacy stream order), takes wall time, and is not GPU (SM) busy time. */
FK_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr p, const void *src, size_t n)
{
	(void)src;
	CUR_DEV(d);
	int dev;
	uint64_t size;
	if (!vc_htab_get(&fk.allocs, FK_KIND_PTR, p, &dev, &size) || dev != d || n > size)
		return CUDA_ERROR_INVALID_VALUE;
	fk_sync(d);
	fk_sleep_ns((uint64_t)((double)n / (double)(1 << 20) * (double)fk.memcpy_ns_per_mib));
	return CUDA_SUCCESS;
}

/* ---- test query API (not part of CUDA) ---- */

/* GPU time per block of this process's kernels from now on: a property of the program. */
FK_EXPORT int fakegpu_set_ns_per_block(uint64_t ns)
{
	if (fk_init() != CUDA_SUCCESS || ns == 0)
		return -1;
	__atomic_store_n(&fk.ns_per_block, ns, __ATOMIC_RELAXED);
	return 0;
}

/* Cumulative GPU busy time of the given pids (all when npids == 0) up to *now_ns. */
FK_EXPORT int fakegpu_busy_ns(const char *uuid, const int *pids, int npids, uint64_t *busy_ns,
			      uint64_t *now_ns)
{
	struct fk_state *s = fk_peek(uuid);
	if (!s)
		return -1;
	fk_lock(s);
	uint64_t now = fk_now(), busy = 0;
	if (npids == 0)
		busy = fk_busy_locked(s, -1, now);
	for (int i = 0; i < npids; i++) { /* pids of the caller's namespace */
		int slot = fk_slot_locked(s, pids[i], fk.pidns);
		busy += slot < 0 ? 0 : fk_busy_locked(s, slot, now);
	}
	fk_unlock(s);
	*busy_ns = busy;
	*now_ns = now;
	return 0;
}

/* The runs on the engine of process pid (as the caller's pid namespace knows it; a process asks
 * for its own with getpid()) on device uuid, from ring index from on, oldest first: at most max
 * into out, and *next, the index to ask from next time. Start with max 0, which only sets *next
 * to the ring's end now; then poll: no run is missed while the ring (FK_RING entries, every
 * process's and the context switches) has not wrapped past *next. Times are the fake's clock
 * (CLOCK_MONOTONIC ns). A sliced device's timeline is played forward to now first; a FIFO
 * device's entries may lie ahead of now (its timeline is fixed at launch). An MPS client's
 * kernels are not in the ring. Returns how many runs, or -1 (no such device state, a negative
 * max, from past the ring's end) or -2 (the ring wrapped past from: runs were lost; *next is
 * the oldest index it still holds). */
FK_EXPORT int fakegpu_ran(const char *uuid, int pid, uint64_t from, struct fakegpu_span *out,
			  int max, uint64_t *next)
{
	struct fk_state *s = fk_peek(uuid);
	if (!s)
		return -1;
	fk_lock(s);
	int slot = fk_slot_locked(s, pid, fk.pidns);
	int n = fk_ran_locked(s, slot, pid, from, out, max, next);
	fk_unlock(s);
	return n;
}

/* One kernel of blocks at full load (no FAKEGPU_BOOST), in ns: this program's time per block
 * (FAKEGPU_NS_PER_BLOCK or fakegpu_set_ns_per_block) times blocks, at least FAKEGPU_LAUNCH_NS. */
FK_EXPORT uint64_t fakegpu_kernel_ns(uint64_t blocks)
{
	fk_init(); /* reads the environment first, devices or not */
	return fk_kernel_ns(blocks);
}

FK_EXPORT int fakegpu_mem(const char *uuid, uint64_t *used, uint64_t *peak)
{
	struct fk_state *s = fk_peek(uuid);
	if (!s)
		return -1;
	fk_lock(s);
	*used = s->used;
	*peak = s->peak;
	fk_unlock(s);
	return 0;
}
