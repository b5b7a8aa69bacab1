/*
 * context.c - CUDA contexts and their limits, counted against the memory cap.
 *
 * Every context a process opens takes device memory of its own (driver state, module images,
 * the default stack and heap): hundreds of MiB on a data-centre GPU, invisible to the
 * allocation hooks. The node measures it per GPU model and writes it into the config
 * (context_mib); we book it before the driver creates the context, so that the caps of the
 * tenants of one GPU plus their contexts never exceed the card. A context that would not
 * fit fails with CUDA_ERROR_OUT_OF_MEMORY, as the driver's own would on a full GPU.
 *
 *   primary context   booked at the first cuDevicePrimaryCtxRetain, given back when the last
 *                     retain is released (cudart retains it once and keeps it to the end)
 *   cuCtxCreate*      booked per context, given back by cuCtxDestroy*
 *   cuCtxSetLimit     stack and malloc heap above the driver's defaults are booked (per
 *                     process and device; the safe side when several contexts set them)
 *
 * Bookings live in the process's region slot like allocations, so a process that dies
 * gives them back when it is reaped.
 */

#include <pthread.h>

#include "vcuda.h"

#define VC_DEFAULT_HEAP (8ull << 20)  /* CU_LIMIT_MALLOC_HEAP_SIZE default */
#define VC_DEFAULT_STACK 1024ull      /* CU_LIMIT_STACK_SIZE default, bytes per thread */
#define VC_FALLBACK_THREADS (132ull * 2048ull) /* H100 SXM: when the driver does not say */

static uint64_t context_bytes(int idx)
{
	return idx >= 0 ? (uint64_t)vcg.cfg.devices[idx].context_mib << 20 : 0;
}

/* Config index of device ordinal d, or -1 (not limited, or the device map failed). */
static int index_of(CUdevice d)
{
	return vc_cuda_map() == CUDA_SUCCESS ? vc_index_of_ordinal(d) : -1;
}

static CUresult over_cap(int idx, uint64_t bytes, const char *what)
{
	vc_say_once(VC_MSG_CONTEXT, "vcuda: %s on %s needs %llu MiB of the container's %llu MiB "
		    "cap, which is taken: CUDA_ERROR_OUT_OF_MEMORY", what,
		    vcg.cfg.devices[idx].uuid, (unsigned long long)(bytes >> 20),
		    (unsigned long long)(vcg.dev[idx].cap >> 20));
	return CUDA_ERROR_OUT_OF_MEMORY;
}

VC_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	CUresult rc = vc_enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	int idx = index_of(dev);
	uint64_t b = context_bytes(idx);
	if (b == 0)
		return REAL(cuDevicePrimaryCtxRetain)(pctx, dev);
	pthread_mutex_lock(&vcg.ctx_mu);
	struct vc_ctx_dev *c = &vcg.ctx[idx];
	int book = c->primary == 0;
	if (book && vc_mem_reserve(idx, b) != 0) {
		pthread_mutex_unlock(&vcg.ctx_mu);
		return over_cap(idx, b, "the primary CUDA context");
	}
	if (book)
		c->primary = b;
	rc = REAL(cuDevicePrimaryCtxRetain)(pctx, dev);
	if (rc == CUDA_SUCCESS) {
		c->primary_refs++;
	} else if (book) {
		vc_mem_release(idx, b);
		c->primary = 0;
	}
	pthread_mutex_unlock(&vcg.ctx_mu);
	return rc;
}

/* The limits booked on a device go with the context that held them. */
static void release_limits_locked(int idx)
{
	struct vc_ctx_dev *c = &vcg.ctx[idx];
	for (int l = 0; l < 3; l++) {
		if (c->limits[l])
			vc_mem_release(idx, c->limits[l]);
		c->limits[l] = 0;
	}
}

/* Release: the last one destroys the primary context and gives back all it held. Reset:
 * the context's state (its limits back to the defaults) goes; the context itself comes
 * back on next use while it is retained, so its booking stays. */
static CUresult primary_drop(CUresult (*real)(CUdevice), CUdevice dev, int release)
{
	CUresult rc = vc_enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	int idx = index_of(dev);
	if (idx < 0)
		return real(dev);
	pthread_mutex_lock(&vcg.ctx_mu);
	rc = real(dev);
	struct vc_ctx_dev *c = &vcg.ctx[idx];
	if (rc == CUDA_SUCCESS && !release) {
		release_limits_locked(idx);
	} else if (rc == CUDA_SUCCESS && c->primary_refs > 0 && --c->primary_refs == 0) {
		if (c->primary)
			vc_mem_release(idx, c->primary);
		c->primary = 0;
		release_limits_locked(idx);
	}
	pthread_mutex_unlock(&vcg.ctx_mu);
	return rc;
}

VC_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
	return primary_drop(vcg.real.cuDevicePrimaryCtxRelease, dev, 1);
}

VC_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	return primary_drop(vcg.real.cuDevicePrimaryCtxRelease_v2, dev, 1);
}

VC_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
	return primary_drop(vcg.real.cuDevicePrimaryCtxReset, dev, 0);
}

VC_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	return primary_drop(vcg.real.cuDevicePrimaryCtxReset_v2, dev, 0);
}

/* cuCtxCreate*: book, create, then remember what the new context holds. */
static CUresult create_begin(CUdevice dev, int *idx, uint64_t *b)
{
	CUresult rc = vc_enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	*idx = index_of(dev);
	*b = context_bytes(*idx);
	if (*b && vc_mem_reserve(*idx, *b) != 0)
		return over_cap(*idx, *b, "a CUDA context");
	return CUDA_SUCCESS;
}

static CUresult create_end(CUresult rc, CUcontext *pctx, int idx, uint64_t b)
{
	if (b == 0)
		return rc;
	if (rc != CUDA_SUCCESS || !pctx || !*pctx ||
	    vc_htab_put(&vcg.allocs, VC_KIND_CTX, (uint64_t)(uintptr_t)*pctx, idx, b) != 0) {
		/* failed, or untracked (no memory for the entry): a context we cannot follow
		 * stays booked until the process ends (over-counting is the safe side) */
		if (rc != CUDA_SUCCESS)
			vc_mem_release(idx, b);
	}
	return rc;
}

#define VC_CTX_CREATE(call, pctx, dev)                                                   \
	do {                                                                             \
		int idx_;                                                                \
		uint64_t b_;                                                             \
		CUresult rc_ = create_begin(dev, &idx_, &b_);                            \
		if (rc_ != CUDA_SUCCESS)                                                 \
			return rc_;                                                      \
		return create_end(call, pctx, idx_, b_);                                 \
	} while (0)

VC_EXPORT CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	VC_CTX_CREATE(REAL(cuCtxCreate)(pctx, flags, dev), pctx, dev);
}

VC_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	VC_CTX_CREATE(REAL(cuCtxCreate_v2)(pctx, flags, dev), pctx, dev);
}

VC_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *p, int n,
				  unsigned int flags, CUdevice dev)
{
	VC_CTX_CREATE(REAL(cuCtxCreate_v3)(pctx, p, n, flags, dev), pctx, dev);
}

VC_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *p, unsigned int flags,
				  CUdevice dev)
{
	VC_CTX_CREATE(REAL(cuCtxCreate_v4)(pctx, p, flags, dev), pctx, dev);
}

static CUresult destroy(CUresult (*real)(CUcontext), CUcontext ctx)
{
	CUresult rc = vc_enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = real(ctx);
	int idx;
	uint64_t b;
	if (rc == CUDA_SUCCESS &&
	    vc_htab_take(&vcg.allocs, VC_KIND_CTX, (uint64_t)(uintptr_t)ctx, &idx, &b))
		vc_mem_release(idx, b);
	return rc;
}

VC_EXPORT CUresult cuCtxDestroy(CUcontext ctx)
{
	return destroy(vcg.real.cuCtxDestroy, ctx);
}

VC_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	return destroy(vcg.real.cuCtxDestroy_v2, ctx);
}

/* Threads the stack limit is multiplied by on the current context's device. */
static uint64_t resident_threads(void)
{
	CUdevice d;
	int sms = 0, per_sm = 0;
	if (REAL(cuCtxGetDevice)(&d) != CUDA_SUCCESS ||
	    REAL(cuDeviceGetAttribute)(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d) !=
		    CUDA_SUCCESS ||
	    REAL(cuDeviceGetAttribute)(&per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
				       d) != CUDA_SUCCESS ||
	    sms <= 0 || per_sm <= 0)
		return VC_FALLBACK_THREADS;
	return (uint64_t)sms * (uint64_t)per_sm;
}

/* Device memory a limit takes above the driver's default. */
static uint64_t limit_extra(CUlimit limit, size_t value)
{
	if (limit == CU_LIMIT_MALLOC_HEAP_SIZE)
		return value > VC_DEFAULT_HEAP ? value - VC_DEFAULT_HEAP : 0;
	uint64_t threads = resident_threads();
	if (value <= VC_DEFAULT_STACK)
		return 0;
	uint64_t per = value - VC_DEFAULT_STACK;
	return per > UINT64_MAX / threads ? UINT64_MAX : per * threads;
}

VC_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
	CUresult rc = vc_enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	int idx = -1;
	if ((limit != CU_LIMIT_STACK_SIZE && limit != CU_LIMIT_MALLOC_HEAP_SIZE) ||
	    vc_cur_index(&idx) != CUDA_SUCCESS || idx < 0)
		return REAL(cuCtxSetLimit)(limit, value);
	uint64_t extra = limit_extra(limit, value);
	pthread_mutex_lock(&vcg.ctx_mu);
	uint64_t had = vcg.ctx[idx].limits[limit];
	if (extra > had && vc_mem_reserve(idx, extra - had) != 0) {
		pthread_mutex_unlock(&vcg.ctx_mu);
		return over_cap(idx, extra - had,
				limit == CU_LIMIT_STACK_SIZE ? "cuCtxSetLimit(CU_LIMIT_STACK_SIZE)"
							     : "cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE)");
	}
	rc = REAL(cuCtxSetLimit)(limit, value);
	if (rc == CUDA_SUCCESS) {
		if (extra < had)
			vc_mem_release(idx, had - extra);
		vcg.ctx[idx].limits[limit] = extra;
	} else if (extra > had) {
		vc_mem_release(idx, extra - had);
	}
	pthread_mutex_unlock(&vcg.ctx_mu);
	return rc;
}

/* A fork child has no contexts: CUDA state does not cross fork. */
void vc_ctx_after_fork(void)
{
	pthread_mutex_init(&vcg.ctx_mu, NULL);
	__builtin_memset(vcg.ctx, 0, sizeof(vcg.ctx));
}
