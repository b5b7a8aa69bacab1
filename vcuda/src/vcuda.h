/*
 * vcuda.h - internals of libvcuda.so, the in-container CUDA limiter.
 *
 *   config.c   read the config file once (env fallback only when allowed), fail closed
 *   init.c     lazy init, real driver/NVML resolution, device mapping, fork handling
 *   region.c   the per-container shared region: memory reservation, reaping by pid
 *   memory.c   allocation/free/info hooks          compute.c  launch hooks, admission
 *   sampler.c  local controller (no node)          routing.c  real symbols, cuGetProcAddress
 *   node.c     the node controller's files: allowance in, usage out
 *   dlsym.c    our dlsym and the hook table        nvml.c     NVML memory info hooks
 *   htab.c     small map for allocation sizes      globals.c  every global, nothing else
 *   context.c  CUDA contexts and their limits counted against the memory cap
 */
#ifndef VCUDA_INTERNAL_H
#define VCUDA_INTERNAL_H

#include "glibc_floor.h"

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include "../include/cuda_api.h"
#include "../include/nvml_api.h"
#include "../include/vcuda_config.h"
#include "../include/vcuda_control.h"
#include "htab.h"

/* The size of an open file, its offset left at 0; -1 on error (errno set). fstat is not used:
 * see glibc_floor.h. */
static inline off_t vc_fd_size(int fd)
{
	off_t n = lseek(fd, 0, SEEK_END);
	if (n >= 0 && lseek(fd, 0, SEEK_SET) < 0)
		return -1;
	return n;
}

#define VC_EXPORT __attribute__((visibility("default")))
#define VC_HIDDEN __attribute__((visibility("hidden")))
#define VC_MAX_ORD 64
#define VC_MAX_PROCS 256
#define VC_HIST 8
#define VC_REGION_MAGIC 0x47455256u /* "VREG" */
#define VC_REGION_VERSION 1u
#define VC_REGION_FILE "vcuda.region"
#define VC_SLOTS_FILE "vcuda.slots" /* one lock byte per proc slot: held while the process lives */
#define VC_GRANULE 512ull               /* allocations are counted rounded up to this */
#define VC_UNLIMITED_CREDIT (1ull << 62) /* refilled - consumed while bursting */

/* Every hook, by library. routing.c builds the name table from these lists. */
#define VC_CUDA_HOOKS(X)                                                                           \
	X(cuInit) X(cuGetProcAddress) X(cuGetProcAddress_v2) X(cuDeviceTotalMem)                    \
	X(cuDeviceTotalMem_v2) X(cuMemGetInfo) X(cuMemGetInfo_v2) X(cuMemAlloc) X(cuMemAlloc_v2)    \
	X(cuMemAllocPitch) X(cuMemAllocPitch_v2) X(cuMemAllocManaged) X(cuMemFree) X(cuMemFree_v2)  \
	X(cuMemAllocAsync) X(cuMemAllocAsync_ptsz) X(cuMemAllocFromPoolAsync)                       \
	X(cuMemAllocFromPoolAsync_ptsz) X(cuMemFreeAsync) X(cuMemFreeAsync_ptsz) X(cuMemCreate)     \
	X(cuMemRelease) X(cuArrayCreate) X(cuArrayCreate_v2) X(cuArray3DCreate) X(cuArray3DCreate_v2) \
	X(cuMipmappedArrayCreate) X(cuArrayDestroy) X(cuMipmappedArrayDestroy) X(cuLaunchKernel)     \
	X(cuLaunchKernel_ptsz) X(cuLaunchCooperativeKernel) X(cuLaunchCooperativeKernel_ptsz)        \
	X(cuLaunchKernelEx) X(cuLaunchKernelEx_ptsz) X(cuLaunchCooperativeKernelMultiDevice)         \
	X(cuLaunch) X(cuLaunchGrid) X(cuLaunchGridAsync) X(cuGraphInstantiate)                       \
	X(cuGraphInstantiate_v2) X(cuGraphInstantiateWithFlags) X(cuGraphInstantiateWithParams)      \
	X(cuGraphInstantiateWithParams_ptsz) X(cuGraphExecDestroy) X(cuGraphLaunch)                  \
	X(cuGraphLaunch_ptsz) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease)              \
	X(cuDevicePrimaryCtxRelease_v2) X(cuDevicePrimaryCtxReset) X(cuDevicePrimaryCtxReset_v2)     \
	X(cuCtxCreate) X(cuCtxCreate_v2) X(cuCtxCreate_v3) X(cuCtxCreate_v4) X(cuCtxDestroy)         \
	X(cuCtxDestroy_v2) X(cuCtxSetLimit)
#define VC_NVML_HOOKS(X) X(nvmlDeviceGetMemoryInfo) X(nvmlDeviceGetMemoryInfo_v2)
#define VC_CUDA_CALLS(X)                                                                     \
	X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetUuid) X(cuDeviceGetUuid_v2)           \
	X(cuCtxGetDevice) X(cuGraphGetNodes) X(cuGraphNodeGetType)                            \
	X(cuGraphKernelNodeGetParams_v2) X(cuGraphChildGraphNodeGetGraph) X(cuDeviceGetAttribute) \
	X(cuCtxGetLimit) X(cuCtxGetCurrent) X(cuEventCreate) X(cuEventRecord) X(cuEventRecord_ptsz)    \
	X(cuEventQuery) X(cuEventDestroy_v2) X(cuStreamIsCapturing) X(cuStreamIsCapturing_ptsz)        \
	X(cuThreadExchangeStreamCaptureMode)
#define VC_NVML_CALLS(X)                                                                     \
	X(nvmlInit_v2) X(nvmlDeviceGetHandleByUUID) X(nvmlDeviceGetUUID)                      \
	X(nvmlDeviceGetSamples) X(nvmlDeviceGetUtilizationRates)

#define VC_REAL_FIELD(n) __typeof__(n) *n;
struct vc_real {
	VC_CUDA_HOOKS(VC_REAL_FIELD)
	VC_NVML_HOOKS(VC_REAL_FIELD)
	VC_CUDA_CALLS(VC_REAL_FIELD)
	VC_NVML_CALLS(VC_REAL_FIELD)
};
#define REAL(n) (vcg.real.n)

/* ---- the shared region: <shared_dir>/vcuda.region, one per container ---- */
enum vc_mode { VC_MODE_BOOT = 0, VC_MODE_LIMITED = 1, VC_MODE_UNLIMITED = 2 };

struct vc_ctl { /* local controller state; only the elected sampler touches it */
	uint64_t last_ts_us, last_sample_ns, period_ns, c_last, waits_last;
	double err_ns, khat;
	double hist_busy[VC_HIST], hist_units[VC_HIST];
	uint32_t hist_i;
	uint32_t settle; /* next samples left out: they still cover the rate before a switch */
};

struct vc_region_dev {
	uint64_t used; /* bytes reserved by the container; written under the lock */
	/* With a confining slot (vcuda_control.h VCUDA_SLOT_CONFINE): the end of the slot the
	 * credit was taken in; a launch after it takes the slow path, which waits for the next
	 * start (0: no such slot). Container-wide: a process whose launches all fit the credit
	 * another raised stops at the slot's end too. (atomic) */
	uint64_t gate_ns;
	char pad0[48];
	uint64_t refilled;  /* cost units allowed so far (atomic); launched lives in vcuda.usage */
	uint64_t refill_ns; /* when refilled was last advanced (atomic) */
	uint64_t rate_bits; /* double, cost units per ns (atomic) */
	uint64_t wait_until_ns; /* a waiting launch sleeps until then (atomic) */
	uint32_t mode, boot_budget, boot_used;
	uint32_t boot_hold; /* BOOT: sample periods the boot rate has been held (the sampler's) */
	int32_t sampler_pid, pad3;
	uint64_t sampler_beat_ns;
	struct vc_ctl ctl;
} __attribute__((aligned(64)));

struct vc_region_proc {
	int32_t pid, pad;
	uint64_t starttime; /* guards against pid reuse */
	uint64_t used[VCUDA_MAX_DEVICES];
};

struct vc_region {
	uint32_t magic, version, size, ndev;
	pthread_mutex_t lock; /* robust, process-shared: memory reservation, proc slots */
	struct vc_region_dev dev[VCUDA_MAX_DEVICES];
	struct vc_region_proc proc[VC_MAX_PROCS];
};
_Static_assert(offsetof(struct vc_region_dev, refilled) == 64, "refilled on its own line");
_Static_assert(sizeof(struct vc_region_proc) == 16 + 8 * VCUDA_MAX_DEVICES, "proc slot layout");
_Static_assert(offsetof(struct vc_region, dev) % 64 == 0, "devices cache-line aligned");

/* ---- process-local state ---- */
struct vc_dev {
	unsigned char raw[16];
	uint64_t cap;
	uint32_t core;
	int limited; /* compute admission on */
	nvmlDevice_t nvml;
	/* the node controller as this process last saw it (atomics; sampler + slow path) */
	uint64_t node_seq, node_seen_ns;
	uint32_t node_mode; /* last mode acted on */
	int node_ever;      /* a heartbeat was seen once: never fall back to the local sampler */
};

enum { VC_KIND_PTR = 1, VC_KIND_HANDLE, VC_KIND_ARRAY, VC_KIND_MIPMAP, VC_KIND_GRAPH, VC_KIND_CTX };

/* What this process's contexts hold on a device, counted against the cap (context.c). */
struct vc_ctx_dev {
	int primary_refs;     /* cuDevicePrimaryCtxRetain minus releases */
	uint64_t primary;     /* bytes booked for the primary context (0: none) */
	uint64_t limits[3];   /* bytes booked above the defaults, by CUlimit (stack, -, heap) */
};

/* vc_say_once kinds */
enum { VC_MSG_CONFIG, VC_MSG_DEVICE, VC_MSG_ROUTING, VC_MSG_REGION, VC_MSG_NODE, VC_MSG_CONTEXT,
       VC_MSG_QUEUE, VC_MSG_COUNT };

/* What this process has queued on a device in confining slots (queue.c). */
#define VC_QUEUE_EVENTS 64
struct vc_queue {
	pthread_mutex_t mu;
	int off;             /* an event call failed: no bound */
	int nev;             /* events created in pool, in order */
	CUcontext ctx;       /* the context the events belong to */
	CUevent pool[VC_QUEUE_EVENTS];
	uint64_t at[VC_QUEUE_EVENTS]; /* queued when each was recorded */
	unsigned head, n;    /* recorded and not seen complete: pool[(head + i) % VC_QUEUE_EVENTS] */
	uint64_t queued;     /* cost units launched through the bound */
	uint64_t done;       /* queued at the last event seen complete */
	uint64_t seen_ns;    /* when it was seen */
	uint64_t marked;     /* queued at the last event recorded */
	CUstream last;       /* the last launch's stream, and whether per-thread (_ptsz) */
	int last_ptsz;
	uint64_t cost_bits;  /* double, the node's GPU ns per cost unit (atomic) */
};

struct vc_globals {
	pthread_once_t once;
	int state; /* 0 not yet, 1 ready, 2 refused (atomic) */
	int mapped; /* ord2dev valid (atomic) */
	pthread_mutex_t map_mu;
	struct vcuda_config cfg;
	char cfg_path[VCUDA_PATH_LEN];
	int ndev, nord, any_limited;
	int only_idx; /* config index of the first visible device, used when nord == 1 */
	struct vc_dev dev[VCUDA_MAX_DEVICES];
	int ord2dev[VC_MAX_ORD];
	struct vc_region *region;
	struct vcuda_usage *usage;         /* <shared_dir>/vcuda.usage, what we report */
	const struct vcuda_control *control; /* vcuda.control beside the config, or NULL */
	int control_costs; /* it has cost_bits (version 2; a version 1 file ends before them) */
	char control_path[VCUDA_PATH_LEN + 32];
	int slot; /* our proc slot, -1 after fork until re-registered (under region lock) */
	int slots_fd; /* <shared_dir>/vcuda.slots: we hold an OFD lock on byte `slot` (-1: none) */
	void *cuda, *nvml;
	struct vc_real real;
	struct vc_htab allocs, graphs;
	int sampler_running; /* atomic */
	int said[VC_MSG_COUNT]; /* one message of each kind per process (atomic) */
	void *next_dlsym; /* the dlsym after ours (atomic) */
	int debug; /* VCUDA_DEBUG=1: controller trace on stderr */
	uint64_t view_reap_ns; /* last reap done for a memory view (atomic) */
	pthread_mutex_t ctx_mu; /* ctx[] and the VC_KIND_CTX entries of allocs */
	struct vc_ctx_dev ctx[VCUDA_MAX_DEVICES];
	struct vc_queue queue[VCUDA_MAX_DEVICES];
};

extern struct vc_globals vcg VC_HIDDEN;

/* init.c */
CUresult vc_enter_slow(void) VC_HIDDEN;
CUresult vc_cuda_map(void) VC_HIDDEN;
CUresult vc_cur_index(int *idx) VC_HIDDEN;
int vc_index_of_ordinal(CUdevice d) VC_HIDDEN;
int vc_index_of_uuid(const char *uuid) VC_HIDDEN;
uint64_t vc_now(void) VC_HIDDEN;
void vc_sleep_ns(uint64_t ns) VC_HIDDEN;
void vc_say_once(int which, const char *fmt, ...) VC_HIDDEN __attribute__((format(printf, 2, 3)));
void vc_start_sampler(void) VC_HIDDEN;
/* MPS mode: sets CUDA_MPS_* from the config before the driver reads them (mps.c). */
void vc_mps_apply(void) VC_HIDDEN;

static inline CUresult vc_enter(void)
{
	if (__builtin_expect(__atomic_load_n(&vcg.state, __ATOMIC_ACQUIRE) == 1, 1))
		return CUDA_SUCCESS;
	return vc_enter_slow();
}

/* config.c */
int vc_config_load(struct vcuda_config *c, char *path, size_t pathlen, char *err, size_t errlen) VC_HIDDEN;

/* region.c */
int vc_region_attach(char *err, size_t errlen) VC_HIDDEN;
int vc_mem_reserve(int idx, uint64_t bytes) VC_HIDDEN;
void vc_mem_release(int idx, uint64_t bytes) VC_HIDDEN;
uint64_t vc_mem_used(int idx) VC_HIDDEN;
void vc_reap(void) VC_HIDDEN;
void vc_reap_sometimes(void) VC_HIDDEN; /* at most every 100 ms per process */

/* context.c */
void vc_ctx_after_fork(void) VC_HIDDEN;

/* compute.c */
CUresult vc_admit_slow(int idx, uint64_t c, uint64_t cost) VC_HIDDEN;
void vc_refill(int idx, uint64_t now) VC_HIDDEN;
void vc_set_mode(int idx, uint32_t mode, double rate, uint64_t now) VC_HIDDEN;

/* queue.c: in a confining slot ending at end, how long a launch waits for the queue before it
 * looks again (0: it goes on); after it went on, what it queued on stream s */
void vc_queue_init(void) VC_HIDDEN;
void vc_queue_cost(int idx, double cost) VC_HIDDEN;
uint64_t vc_queue_wait(int idx, uint64_t now, uint64_t end) VC_HIDDEN;
void vc_queue_launched(int idx, uint64_t cost, CUstream s, int ptsz) VC_HIDDEN;

/* node.c */
enum { VC_NODE_NEVER = 0, VC_NODE_FRESH = 1, VC_NODE_STALE = 2 };
struct vc_node_view {
	uint32_t mode, period_us;
	uint64_t allowance, stamp_ns;
	double rate, fallback;
	uint32_t slot_period_us, slot_start_us, slot_len_us, slot_flags;
	double cost; /* GPU ns per cost unit (0: none) */
};
int vc_usage_attach(char *err, size_t errlen) VC_HIDDEN;
void vc_control_attach(void) VC_HIDDEN;
int vc_node_state(int idx, uint64_t now, struct vc_node_view *v) VC_HIDDEN;
uint64_t vc_node_allowed(const struct vc_node_view *v, uint64_t now) VC_HIDDEN;
uint64_t vc_node_slot_next(const struct vc_node_view *v, uint64_t now) VC_HIDDEN;
uint64_t vc_node_slot_end(const struct vc_node_view *v, uint64_t now) VC_HIDDEN;
void vc_node_tick(int idx, uint64_t now) VC_HIDDEN;
static inline uint64_t vc_launched(int idx)
{
	return __atomic_load_n(&vcg.usage->dev[idx].launched, __ATOMIC_ACQUIRE);
}

/* sampler.c */
void *vc_sampler_main(void *arg) VC_HIDDEN;
void vc_ctl_update(int idx, double u_own, double u_other, uint64_t period_ns) VC_HIDDEN;
int vc_local_sampler(int idx) VC_HIDDEN; /* no node controller for this device */

/* routing.c */
void *vc_hook_by_name(const char *name) VC_HIDDEN;
int vc_resolve_real(char *err, size_t errlen) VC_HIDDEN;

static inline double vc_bits2d(uint64_t b)
{
	double d;
	__builtin_memcpy(&d, &b, sizeof(d));
	return d;
}
static inline uint64_t vc_d2bits(double d)
{
	uint64_t b;
	__builtin_memcpy(&b, &d, sizeof(b));
	return b;
}

#endif
