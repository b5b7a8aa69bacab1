/* nvml.c - NVML memory info as the container sees it: total = cap, used = its reservations. */
#include "vcuda.h"

static int index_of_handle(nvmlDevice_t h)
{
	char uuid[NVML_UUID_BUFFER_SIZE];
	if (REAL(nvmlDeviceGetUUID)(h, uuid, sizeof(uuid)) != NVML_SUCCESS)
		return -1;
	return vc_index_of_uuid(uuid);
}

/* cap, used and free for the handle's device; 0 = not a device of this container */
static void view(nvmlDevice_t h, unsigned long long real_total, unsigned long long *total,
		 unsigned long long *used, unsigned long long *free_b)
{
	int idx = index_of_handle(h);
	if (idx < 0) {
		*total = *used = *free_b = 0;
		return;
	}
	vc_reap_sometimes();
	uint64_t cap = vcg.dev[idx].cap < real_total ? vcg.dev[idx].cap : real_total;
	uint64_t u = vc_mem_used(idx);
	*total = cap;
	*used = u < cap ? u : cap;
	*free_b = cap - *used;
}

VC_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *m)
{
	if (vc_enter() != CUDA_SUCCESS)
		return NVML_ERROR_UNKNOWN;
	nvmlReturn_t rc = REAL(nvmlDeviceGetMemoryInfo)(h, m);
	if (rc == NVML_SUCCESS)
		view(h, m->total, &m->total, &m->used, &m->free);
	return rc;
}

VC_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, nvmlMemory_v2_t *m)
{
	if (vc_enter() != CUDA_SUCCESS)
		return NVML_ERROR_UNKNOWN;
	nvmlReturn_t rc = REAL(nvmlDeviceGetMemoryInfo_v2)(h, m);
	if (rc == NVML_SUCCESS) {
		view(h, m->total, &m->total, &m->used, &m->free);
		m->reserved = 0;
	}
	return rc;
}
