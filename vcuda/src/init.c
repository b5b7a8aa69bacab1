/* init.c - lazy one-time init, device mapping, messages, fork handling. */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vcuda.h"

uint64_t vc_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void vc_sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

void vc_say_once(int which, const char *fmt, ...)
{
	int zero = 0;
	if (!__atomic_compare_exchange_n(&vcg.said[which], &zero, 1, 0, __ATOMIC_RELAXED,
					 __ATOMIC_RELAXED))
		return;
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	ssize_t w = write(2, buf, (size_t)n);
	(void)w;
}

static void after_fork_child(void)
{
	/* The parent's slot lock lives in the open file description we inherited: drop our
	 * reference (the parent keeps its lock) and claim a slot of our own on first use. */
	if (vcg.slots_fd >= 0)
		close(vcg.slots_fd);
	vcg.slots_fd = -1;
	vcg.slot = -1;
	pthread_mutex_init(&vcg.map_mu, NULL);
	vc_htab_after_fork(&vcg.allocs);
	vc_htab_after_fork(&vcg.graphs);
	free(vcg.allocs.e); /* the parent's allocations are not ours to free */
	vcg.allocs.e = NULL;
	vcg.allocs.cap = vcg.allocs.used = 0;
	__atomic_store_n(&vcg.sampler_running, 0, __ATOMIC_RELAXED);
	vc_ctx_after_fork();
	vc_queue_init();
}

static void *sampler_thread(void *arg)
{
	return vc_sampler_main(arg);
}

void vc_start_sampler(void)
{
	int zero = 0;
	if (!__atomic_compare_exchange_n(&vcg.sampler_running, &zero, 1, 0, __ATOMIC_ACQ_REL,
					 __ATOMIC_RELAXED))
		return;
	pthread_attr_t a;
	pthread_t t;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &a, sampler_thread, NULL) != 0)
		__atomic_store_n(&vcg.sampler_running, 0, __ATOMIC_RELAXED);
	pthread_attr_destroy(&a);
}

#define REFUSE_HINT "GPU access is refused until this is fixed"

static int init_devices(char *err, size_t errlen)
{
	vcg.ndev = (int)vcg.cfg.device_count;
	for (int i = 0; i < vcg.ndev; i++) {
		const struct vcuda_config_device *c = &vcg.cfg.devices[i];
		struct vc_dev *d = &vcg.dev[i];
		vcuda_uuid_parse(c->uuid, d->raw);
		d->cap = c->memory_limit;
		d->core = c->core_percent;
		d->limited = vcg.cfg.policy != VCUDA_POLICY_NONE && c->core_percent < 100;
		vcg.any_limited |= d->limited;
	}
	if (!vcg.any_limited)
		return 0;
	if (!REAL(nvmlInit_v2) || REAL(nvmlInit_v2)() != NVML_SUCCESS) {
		snprintf(err, errlen, "the compute limit needs NVML (libnvidia-ml.so.1), which did not "
			 "load or initialize; mount it into the container");
		return -1;
	}
	for (int i = 0; i < vcg.ndev; i++) {
		if (vcg.dev[i].limited &&
		    REAL(nvmlDeviceGetHandleByUUID)(vcg.cfg.devices[i].uuid, &vcg.dev[i].nvml) !=
			    NVML_SUCCESS) {
			snprintf(err, errlen, "NVML does not know device %s from the config",
				 vcg.cfg.devices[i].uuid);
			return -1;
		}
	}
	return 0;
}

static void init_once(void)
{
	char err[512];
	if (vc_config_load(&vcg.cfg, vcg.cfg_path, sizeof(vcg.cfg_path), err, sizeof(err)) != 0) {
		vc_say_once(VC_MSG_CONFIG,
			    "vcuda: %s: limiter config %s is unusable: %s. The device plugin mounts "
			    "this file read-only into every GPU container; recreate the pod (local "
			    "testing only: set VCUDA_CONFIG=<file>, or VCUDA_ALLOW_ENV_CONFIG=1 with "
			    "VCUDA_DEVICES=<uuid>:<MiB>:<core%%>,... and VCUDA_SHARED_DIR)",
			    REFUSE_HINT, vcg.cfg_path, err);
		__atomic_store_n(&vcg.state, 2, __ATOMIC_RELEASE);
		return;
	}
	if (vc_resolve_real(err, sizeof(err)) != 0 || init_devices(err, sizeof(err)) != 0 ||
	    vc_region_attach(err, sizeof(err)) != 0 || vc_usage_attach(err, sizeof(err)) != 0) {
		vc_say_once(VC_MSG_CONFIG, "vcuda: %s: %s (config %s)", REFUSE_HINT, err,
			    vcg.cfg_path);
		__atomic_store_n(&vcg.state, 2, __ATOMIC_RELEASE);
		return;
	}
	vc_mps_apply();
	vc_queue_init();
	const char *dbg = getenv("VCUDA_DEBUG");
	vcg.debug = dbg && strcmp(dbg, "1") == 0;
	vc_control_attach();
	/* No share asked (100%): with a node controller the container is still held to what
	 * the tenants with shares leave (best effort); without one it runs unlimited. */
	for (int i = 0; vcg.control && vcg.cfg.policy != VCUDA_POLICY_NONE && i < vcg.ndev; i++) {
		if (!vcg.dev[i].limited) {
			vcg.dev[i].limited = 1;
			vcg.any_limited = 1;
		}
	}
	pthread_atfork(NULL, NULL, after_fork_child);
	if (vcg.any_limited)
		vc_start_sampler();
	__atomic_store_n(&vcg.state, 1, __ATOMIC_RELEASE);
}

CUresult vc_enter_slow(void)
{
	pthread_once(&vcg.once, init_once);
	return __atomic_load_n(&vcg.state, __ATOMIC_ACQUIRE) == 1 ? CUDA_SUCCESS
								  : CUDA_ERROR_NO_DEVICE;
}

static int index_of_raw(const unsigned char raw[16])
{
	for (int i = 0; i < vcg.ndev; i++)
		if (memcmp(vcg.dev[i].raw, raw, 16) == 0)
			return i;
	return -1;
}

int vc_index_of_uuid(const char *uuid)
{
	unsigned char raw[16];
	return vcuda_uuid_parse(uuid, raw) == 0 ? index_of_raw(raw) : -1;
}

/* Maps CUdevice values to config entries once the driver is initialized. */
CUresult vc_cuda_map(void)
{
	if (__atomic_load_n(&vcg.mapped, __ATOMIC_ACQUIRE))
		return CUDA_SUCCESS;
	CUresult rc = CUDA_SUCCESS;
	int n = 0;
	pthread_mutex_lock(&vcg.map_mu);
	if (vcg.mapped)
		goto out;
	if (!REAL(cuDeviceGetCount) || !REAL(cuDeviceGet) || !REAL(cuCtxGetDevice)) {
		rc = CUDA_ERROR_NOT_INITIALIZED;
		goto out;
	}
	if ((rc = REAL(cuDeviceGetCount)(&n)) != CUDA_SUCCESS)
		goto out;
	for (int i = 0; i < VC_MAX_ORD; i++)
		vcg.ord2dev[i] = -1;
	for (int o = 0; o < n; o++) {
		CUdevice d;
		CUuuid u;
		if ((rc = REAL(cuDeviceGet)(&d, o)) != CUDA_SUCCESS)
			goto out;
		rc = REAL(cuDeviceGetUuid_v2) ? REAL(cuDeviceGetUuid_v2)(&u, d)
					      : REAL(cuDeviceGetUuid)(&u, d);
		if (rc != CUDA_SUCCESS)
			goto out;
		if (d < 0 || d >= VC_MAX_ORD)
			continue;
		vcg.ord2dev[d] = index_of_raw((const unsigned char *)u.bytes);
		if (o == 0)
			vcg.only_idx = vcg.ord2dev[d];
		if (vcg.ord2dev[d] < 0)
			vc_say_once(VC_MSG_DEVICE, "vcuda: device %d is visible but not in the limiter "
				    "config %s; allocations and launches on it are refused", d,
				    vcg.cfg_path);
	}
	vcg.nord = n;
	__atomic_store_n(&vcg.mapped, 1, __ATOMIC_RELEASE);
out:
	pthread_mutex_unlock(&vcg.map_mu);
	return rc;
}

int vc_index_of_ordinal(CUdevice d)
{
	return d >= 0 && d < VC_MAX_ORD ? vcg.ord2dev[d] : -1;
}

/* Config index of the current context's device (-1: not in the config). */
CUresult vc_cur_index(int *idx)
{
	CUresult rc = vc_cuda_map();
	if (rc != CUDA_SUCCESS)
		return rc;
	if (vcg.nord == 1) {
		*idx = vcg.only_idx;
		return CUDA_SUCCESS;
	}
	CUdevice d;
	if ((rc = REAL(cuCtxGetDevice)(&d)) != CUDA_SUCCESS)
		return rc;
	*idx = vc_index_of_ordinal(d);
	return CUDA_SUCCESS;
}
