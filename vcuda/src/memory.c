/*
 * memory.c - every device-memory allocation path, reserved before the driver allocates and
 * released after it frees; the memory views (cuMemGetInfo, cuDeviceTotalMem).
 * Host allocations (cuMemAllocHost, cuMemHostAlloc, cuMemHostRegister) are not device
 * memory and are not hooked.
 */
#include "vcuda.h"

static uint64_t rounded(uint64_t n)
{
	return (n + VC_GRANULE - 1) & ~(VC_GRANULE - 1);
}

#define ENTER()                                        \
	do {                                           \
		CUresult rc_ = vc_enter();             \
		if (rc_ != CUDA_SUCCESS)               \
			return rc_;                    \
	} while (0)

/* Reserve on the current device; on success *idx and *bytes say what to give back. */
static CUresult reserve_cur(uint64_t size, int *idx, uint64_t *bytes)
{
	CUresult rc = vc_cur_index(idx);
	if (rc != CUDA_SUCCESS)
		return rc;
	*bytes = rounded(size);
	if (*idx < 0 || vc_mem_reserve(*idx, *bytes) != 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	return CUDA_SUCCESS;
}

/* After the driver call: record the allocation, or give the reservation back. */
static CUresult settle(CUresult rc, uint32_t kind, uint64_t key, int idx, uint64_t bytes)
{
	if (rc != CUDA_SUCCESS) {
		vc_mem_release(idx, bytes);
		return rc;
	}
	if (vc_htab_put(&vcg.allocs, kind, key, idx, bytes) != 0) {
		/* cannot track it: keep it reserved (over-counting is the safe side) */
		vc_say_once(VC_MSG_REGION, "vcuda: out of host memory tracking an allocation");
	}
	return CUDA_SUCCESS;
}

/* Free-side: forget the record, call the driver, release on success. */
#define FREE_PATH(kind, key, call)                                             \
	do {                                                                   \
		ENTER();                                                       \
		int idx_;                                                      \
		uint64_t bytes_;                                               \
		int have_ = vc_htab_take(&vcg.allocs, kind, key, &idx_, &bytes_); \
		CUresult rc_ = (call);                                         \
		if (have_ && rc_ == CUDA_SUCCESS)                              \
			vc_mem_release(idx_, bytes_);                          \
		else if (have_)                                                \
			vc_htab_put(&vcg.allocs, kind, key, idx_, bytes_);     \
		return rc_;                                                    \
	} while (0)

#define ALLOC_PATH(size, kind, keyexpr, call)                                  \
	do {                                                                   \
		ENTER();                                                       \
		int idx_;                                                      \
		uint64_t bytes_;                                               \
		CUresult rc_ = reserve_cur(size, &idx_, &bytes_);              \
		if (rc_ != CUDA_SUCCESS)                                       \
			return rc_;                                            \
		rc_ = (call);                                                  \
		return settle(rc_, kind, rc_ == CUDA_SUCCESS ? (uint64_t)(keyexpr) : 0, idx_, bytes_); \
	} while (0)

VC_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size)
{
	ALLOC_PATH(size, VC_KIND_PTR, *p, REAL(cuMemAlloc_v2)(p, size));
}
VC_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *p, unsigned int size)
{
	ALLOC_PATH(size, VC_KIND_PTR, *p, REAL(cuMemAlloc)(p, size));
}
VC_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *p, size_t size, unsigned int flags)
{
	ALLOC_PATH(size, VC_KIND_PTR, *p, REAL(cuMemAllocManaged)(p, size, flags));
}
VC_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t size, CUstream s)
{
	ALLOC_PATH(size, VC_KIND_PTR, *p, REAL(cuMemAllocAsync)(p, size, s));
}
VC_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t size, CUstream s)
{
	ALLOC_PATH(size, VC_KIND_PTR, *p, REAL(cuMemAllocAsync_ptsz)(p, size, s));
}
VC_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t size, CUmemoryPool pool,
					   CUstream s)
{
	ALLOC_PATH(size, VC_KIND_PTR, *p, REAL(cuMemAllocFromPoolAsync)(p, size, pool, s));
}
VC_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t size, CUmemoryPool pool,
						CUstream s)
{
	ALLOC_PATH(size, VC_KIND_PTR, *p, REAL(cuMemAllocFromPoolAsync_ptsz)(p, size, pool, s));
}

VC_EXPORT CUresult cuMemFree_v2(CUdeviceptr p) { FREE_PATH(VC_KIND_PTR, p, REAL(cuMemFree_v2)(p)); }
VC_EXPORT CUresult cuMemFree(CUdeviceptr_v1 p) { FREE_PATH(VC_KIND_PTR, p, REAL(cuMemFree)(p)); }
VC_EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
	FREE_PATH(VC_KIND_PTR, p, REAL(cuMemFreeAsync)(p, s));
}
VC_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s)
{
	FREE_PATH(VC_KIND_PTR, p, REAL(cuMemFreeAsync_ptsz)(p, s));
}

/* Pitch: reserve the widest pitch the driver may pick (512-byte aligned rows), then settle
 * on the pitch it returned. */
static CUresult pitch_fix(CUresult rc, int idx, uint64_t reserved, uint64_t actual, uint64_t key,
			  int v1)
{
	if (rc != CUDA_SUCCESS || actual <= reserved) {
		if (rc == CUDA_SUCCESS)
			vc_mem_release(idx, reserved - actual);
		return settle(rc, VC_KIND_PTR, key, idx, rc == CUDA_SUCCESS ? actual : reserved);
	}
	if (vc_mem_reserve(idx, actual - reserved) != 0) {
		if (v1)
			REAL(cuMemFree)((CUdeviceptr_v1)key);
		else
			REAL(cuMemFree_v2)(key);
		vc_mem_release(idx, reserved);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return settle(rc, VC_KIND_PTR, key, idx, actual);
}

VC_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h,
				      unsigned int elem)
{
	ENTER();
	int idx;
	uint64_t bytes;
	CUresult rc = reserve_cur(rounded(w) * h, &idx, &bytes);
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = REAL(cuMemAllocPitch_v2)(p, pitch, w, h, elem);
	return pitch_fix(rc, idx, bytes, rc == CUDA_SUCCESS ? rounded((uint64_t)*pitch * h) : 0,
			 rc == CUDA_SUCCESS ? *p : 0, 0);
}

VC_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *p, unsigned int *pitch, unsigned int w,
				   unsigned int h, unsigned int elem)
{
	ENTER();
	int idx;
	uint64_t bytes;
	CUresult rc = reserve_cur(rounded(w) * h, &idx, &bytes);
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = REAL(cuMemAllocPitch)(p, pitch, w, h, elem);
	return pitch_fix(rc, idx, bytes, rc == CUDA_SUCCESS ? rounded((uint64_t)*pitch * h) : 0,
			 rc == CUDA_SUCCESS ? *p : 0, 1);
}

/* ---- virtual memory management: the physical allocation is what counts ---- */

VC_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size,
			       const CUmemAllocationProp *prop, unsigned long long flags)
{
	ENTER();
	if (!prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return REAL(cuMemCreate)(h, size, prop, flags); /* not device memory */
	CUresult rc = vc_cuda_map();
	if (rc != CUDA_SUCCESS)
		return rc;
	int idx = vc_index_of_ordinal(prop->location.id);
	uint64_t bytes = rounded(size);
	if (idx < 0 || vc_mem_reserve(idx, bytes) != 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = REAL(cuMemCreate)(h, size, prop, flags);
	return settle(rc, VC_KIND_HANDLE, rc == CUDA_SUCCESS ? *h : 0, idx, bytes);
}

VC_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
	FREE_PATH(VC_KIND_HANDLE, h, REAL(cuMemRelease)(h));
}

/* ---- arrays: the size is estimated from the descriptor (all mip levels) ---- */

static uint64_t elem_bytes(CUarray_format f)
{
	switch (f) {
	case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: return 1;
	case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF:
		return 2;
	case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32: case CU_AD_FORMAT_FLOAT:
		return 4;
	default: return 16; /* formats we do not know: count the widest element */
	}
}

static uint64_t array_bytes(uint64_t w, uint64_t h, uint64_t d, CUarray_format f, unsigned ch,
			    unsigned levels)
{
	uint64_t sum = 0;
	for (unsigned l = 0; l < levels && l < 64; l++) {
		uint64_t lw = w >> l ? w >> l : 1, lh = h >> l ? h >> l : 1, ld = d >> l ? d >> l : 1;
		sum += lw * lh * ld * ch * elem_bytes(f);
	}
	return sum;
}

#define ARRAY_PATH(kind, out, desc, depth, levels, call) \
	ALLOC_PATH(array_bytes((desc)->Width, (desc)->Height, depth, (desc)->Format, \
			       (desc)->NumChannels, levels), kind, (uintptr_t)*(out), call)

VC_EXPORT CUresult cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d)
{
	ARRAY_PATH(VC_KIND_ARRAY, a, d, 1, 1, REAL(cuArrayCreate_v2)(a, d));
}
VC_EXPORT CUresult cuArrayCreate(CUarray *a, const CUDA_ARRAY_DESCRIPTOR_v1 *d)
{
	ARRAY_PATH(VC_KIND_ARRAY, a, d, 1, 1, REAL(cuArrayCreate)(a, d));
}
VC_EXPORT CUresult cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	ARRAY_PATH(VC_KIND_ARRAY, a, d, d->Depth, 1, REAL(cuArray3DCreate_v2)(a, d));
}
VC_EXPORT CUresult cuArray3DCreate(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR_v1 *d)
{
	ARRAY_PATH(VC_KIND_ARRAY, a, d, d->Depth, 1, REAL(cuArray3DCreate)(a, d));
}
VC_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *a, const CUDA_ARRAY3D_DESCRIPTOR *d,
					  unsigned int levels)
{
	ARRAY_PATH(VC_KIND_MIPMAP, a, d, d->Depth, levels, REAL(cuMipmappedArrayCreate)(a, d, levels));
}
VC_EXPORT CUresult cuArrayDestroy(CUarray a)
{
	FREE_PATH(VC_KIND_ARRAY, (uintptr_t)a, REAL(cuArrayDestroy)(a));
}
VC_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray a)
{
	FREE_PATH(VC_KIND_MIPMAP, (uintptr_t)a, REAL(cuMipmappedArrayDestroy)(a));
}

/* ---- views: total = cap, used = the container's reservations, free clamped ---- */

static void view(int idx, uint64_t real_free, uint64_t real_total, uint64_t *free_b,
		 uint64_t *total)
{
	if (idx < 0) {
		*free_b = *total = 0;
		return;
	}
	vc_reap_sometimes();
	uint64_t cap = vcg.dev[idx].cap < real_total ? vcg.dev[idx].cap : real_total;
	uint64_t used = vc_mem_used(idx);
	uint64_t f = used < cap ? cap - used : 0;
	*free_b = f < real_free ? f : real_free;
	*total = cap;
}

VC_EXPORT CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total)
{
	ENTER();
	int idx;
	size_t rf, rt;
	CUresult rc = vc_cur_index(&idx);
	if (rc == CUDA_SUCCESS)
		rc = REAL(cuMemGetInfo_v2)(&rf, &rt);
	if (rc != CUDA_SUCCESS)
		return rc;
	uint64_t f, t;
	view(idx, rf, rt, &f, &t);
	*free_b = f;
	*total = t;
	return CUDA_SUCCESS;
}

VC_EXPORT CUresult cuMemGetInfo(unsigned int *free_b, unsigned int *total)
{
	size_t f, t;
	CUresult rc = cuMemGetInfo_v2(&f, &t);
	if (rc == CUDA_SUCCESS) {
		*free_b = f > 0xFFFFFFFFull ? 0xFFFFFFFFu : (unsigned int)f;
		*total = t > 0xFFFFFFFFull ? 0xFFFFFFFFu : (unsigned int)t;
	}
	return rc;
}

VC_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	ENTER();
	CUresult rc = vc_cuda_map();
	if (rc == CUDA_SUCCESS)
		rc = REAL(cuDeviceTotalMem_v2)(bytes, dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	int idx = vc_index_of_ordinal(dev);
	uint64_t cap = idx < 0 ? 0 : vcg.dev[idx].cap;
	*bytes = cap < *bytes ? cap : *bytes;
	return CUDA_SUCCESS;
}

VC_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
	size_t b;
	CUresult rc = cuDeviceTotalMem_v2(&b, dev);
	if (rc == CUDA_SUCCESS)
		*bytes = b > 0xFFFFFFFFull ? 0xFFFFFFFFu : (unsigned int)b;
	return rc;
}
