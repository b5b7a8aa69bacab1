/*
 * fake_context.c - fake contexts, which take device memory as a real driver's do.
 *
 * A context takes FAKEGPU_CONTEXT_MIB of the GPU when it is created (the primary context at
 * its first retain), plus what cuCtxSetLimit asks above the defaults (stack bytes per thread
 * x 132 SMs x 2048 threads, heap bytes). Destroying it, releasing the last retain, or the
 * process exiting gives that memory back, as the real driver does for a process that ends.
 */

#include "fake.h"

#define FK_THREADS (132ull * 2048ull)

static int valid_dev(CUdevice d)
{
	return fk_init() == CUDA_SUCCESS && d >= 0 && d < fk.ndev;
}

/* bytes a context's limit value takes above the default */
static uint64_t limit_bytes(int limit, uint64_t v)
{
	if (limit == 0)
		return v > 1024 ? (v - 1024) * FK_THREADS : 0;
	if (limit == 2)
		return v > (8u << 20) ? v - (8u << 20) : 0;
	return 0;
}

/* under ctx_mu */
static CUresult take(struct fk_ctx *c, uint64_t b)
{
	if (b == 0)
		return CUDA_SUCCESS;
	if (fk_mem_take(c->dev, b) != CUDA_SUCCESS)
		return CUDA_ERROR_OUT_OF_MEMORY;
	c->held += b;
	fk.ctx_held[c->dev] += b;
	return CUDA_SUCCESS;
}

static void give(struct fk_ctx *c, uint64_t b)
{
	b = b < c->held ? b : c->held;
	if (b == 0)
		return;
	fk_mem_give(c->dev, b);
	c->held -= b;
	fk.ctx_held[c->dev] -= b;
}

static void reset_locked(struct fk_ctx *c, int keep_context)
{
	give(c, keep_context ? c->held - (c->held < fk.context_bytes ? c->held : fk.context_bytes)
			     : c->held);
	uint64_t held = c->held;
	fk_ctx_init(c, c->dev);
	c->held = held;
}

FK_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev)
{
	if (!valid_dev(dev))
		return fk_init() != CUDA_SUCCESS ? fk_init() : CUDA_ERROR_INVALID_DEVICE;
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&fk.ctx_mu);
	if (fk.primary_refs[dev] == 0)
		rc = take(&fk.ctx[dev], fk.context_bytes);
	if (rc == CUDA_SUCCESS) {
		fk.primary_refs[dev]++;
		*ctx = (CUcontext)&fk.ctx[dev];
	}
	pthread_mutex_unlock(&fk.ctx_mu);
	return rc;
}

FK_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	if (!valid_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&fk.ctx_mu);
	if (fk.primary_refs[dev] == 0)
		rc = CUDA_ERROR_INVALID_CONTEXT;
	else if (--fk.primary_refs[dev] == 0)
		reset_locked(&fk.ctx[dev], 0);
	pthread_mutex_unlock(&fk.ctx_mu);
	return rc;
}

FK_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
	return cuDevicePrimaryCtxRelease_v2(dev);
}

FK_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	if (!valid_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&fk.ctx_mu);
	reset_locked(&fk.ctx[dev], fk.primary_refs[dev] > 0);
	pthread_mutex_unlock(&fk.ctx_mu);
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
	return cuDevicePrimaryCtxReset_v2(dev);
}

FK_EXPORT CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice dev)
{
	(void)flags;
	if (!valid_dev(dev))
		return fk_init() != CUDA_SUCCESS ? fk_init() : CUDA_ERROR_INVALID_DEVICE;
	struct fk_ctx *c = NULL;
	CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&fk.ctx_mu);
	for (int i = 0; i < FK_MAX_CTX && !c; i++)
		if (fk.created[i].magic != FK_MAGIC)
			c = &fk.created[i];
	if (c) {
		fk_ctx_init(c, dev);
		rc = take(c, fk.context_bytes);
		if (rc != CUDA_SUCCESS)
			c->magic = 0;
	}
	pthread_mutex_unlock(&fk.ctx_mu);
	if (rc != CUDA_SUCCESS)
		return rc;
	fk_cur = c;
	*ctx = (CUcontext)c;
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuCtxCreate(CUcontext *ctx, unsigned int flags, CUdevice dev)
{
	return cuCtxCreate_v2(ctx, flags, dev);
}

static int is_primary(const struct fk_ctx *c)
{
	return c >= &fk.ctx[0] && c < &fk.ctx[FK_MAX_DEV];
}

FK_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	struct fk_ctx *c = (struct fk_ctx *)ctx;
	if (!c || c->magic != FK_MAGIC || is_primary(c))
		return CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_lock(&fk.ctx_mu);
	give(c, c->held);
	c->magic = 0;
	pthread_mutex_unlock(&fk.ctx_mu);
	if (c == fk_cur)
		fk_cur = NULL;
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuCtxDestroy(CUcontext ctx)
{
	return cuCtxDestroy_v2(ctx);
}

FK_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
	struct fk_ctx *c = (struct fk_ctx *)ctx;
	if (c && c->magic != FK_MAGIC)
		return CUDA_ERROR_INVALID_CONTEXT;
	fk_cur = c;
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuCtxGetCurrent(CUcontext *ctx)
{
	*ctx = (CUcontext)fk_cur;
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
	struct fk_ctx *c = fk_cur;
	if (!c)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (limit < 0 || limit > 2)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t had = limit_bytes(limit, c->limit[limit]), want = limit_bytes(limit, value);
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&fk.ctx_mu);
	if (want > had)
		rc = take(c, want - had);
	else
		give(c, had - want);
	if (rc == CUDA_SUCCESS)
		c->limit[limit] = value;
	pthread_mutex_unlock(&fk.ctx_mu);
	return rc;
}

FK_EXPORT CUresult cuCtxGetLimit(size_t *value, CUlimit limit)
{
	if (!fk_cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (limit < 0 || limit > 2)
		return CUDA_ERROR_INVALID_VALUE;
	*value = fk_cur->limit[limit];
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice dev)
{
	if (!valid_dev(dev))
		return fk_init() != CUDA_SUCCESS ? fk_init() : CUDA_ERROR_INVALID_DEVICE;
	switch (a) {
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; return CUDA_SUCCESS;
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *v = 2048; return CUDA_SUCCESS;
	default: return CUDA_ERROR_INVALID_VALUE;
	}
}

/* The driver gives back a process's memory when it ends; so does the fake. */
__attribute__((destructor)) static void fk_ctx_exit(void)
{
	if (fk.ndev == 0)
		return;
	pthread_mutex_lock(&fk.ctx_mu);
	for (int i = 0; i < fk.ndev; i++) {
		if (fk.ctx_held[i])
			fk_mem_give(i, fk.ctx_held[i]);
		fk.ctx_held[i] = 0;
	}
	pthread_mutex_unlock(&fk.ctx_mu);
}
