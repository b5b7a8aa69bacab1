/*
 * fake_mps.h - the fake driver as an MPS client (tests only, never shipped).
 *
 * A process is an MPS client when a control daemon's socket, <CUDA_MPS_PIPE_DIRECTORY>/control
 * (default /tmp/nvidia-mps), exists at its first CUDA call: the fake nvidia-cuda-mps-control
 * (e2e/sim/mpsfake) creates one. FAKEGPU_MPS_MOUNT="<container path>:<host path>" stands for
 * the container's mount of the pipe directory. A client then
 *   - runs its kernels on its own lane, concurrently with the other clients of the GPU (the
 *     SMs are partitioned, not time-sliced), at a speed set by its active-thread percentage p
 *     (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, default 100):
 *       alone:          fk_mps_solo(p) of its solo speed, interpolated through the figures
 *                       measured on a real H100 (issue 23): 30% -> 40%, 50% -> 66%, 100% -> 100%
 *                       (throughput is not linear in SMs);
 *       with others:    p / max(100, sum of the active clients' p): the SM fractions split, as
 *                       measured (30+60 -> 30+58, 50+50 -> 48+48, 20+30+40 -> 22+30+41);
 *     a kernel's speed is fixed when it is launched;
 *   - cannot hold more device memory than its CUDA_MPS_PINNED_DEVICE_MEM_LIMIT entry for the
 *     device's ordinal ("0=4096M,1=2G"): an allocation past it fails with out of memory.
 * The clients' lanes live in <FAKEGPU_DIR>/<uuid>.fakemps, mapped by every client. NVML's
 * utilization does not see MPS lanes (not modelled).
 */
#ifndef VCUDA_FAKE_MPS_H
#define VCUDA_FAKE_MPS_H

#include <pthread.h>
#include <stdint.h>

#define FK_MPS_MAGIC 0x3153504du /* "MPS1" */
#define FK_MPS_CLIENTS 64

struct fk_mps_client {
	int32_t pid; /* 0: free */
	uint32_t percent;
	uint64_t pidns;
	uint64_t lane_end; /* when its last kernel ends (CLOCK_MONOTONIC ns) */
};

struct fk_mps_state { /* shared file layout */
	uint32_t magic, size;
	pthread_mutex_t lock; /* robust, process-shared */
	struct fk_mps_client clients[FK_MPS_CLIENTS];
};

struct fk_mps_globals {
	pthread_once_t once;
	int on;                       /* this process is an MPS client */
	double percent;               /* its active-thread percentage */
	uint64_t pinned[16];          /* bytes per device ordinal, 0: no limit */
	struct fk_mps_state *st[16];  /* per device */
	uint64_t last_ns[16];         /* duration of its last kernel per device, for tests */
};

extern struct fk_mps_globals fkm;

/* Pure: the share of solo throughput of a lone client at percent p (0..100]. */
double fk_mps_solo(double p);
/* Pure: the speed (share of solo) of a client at self percent among active others. */
double fk_mps_speed(double self, const double *others, int n);
/* Pure: the pinned limit in bytes of ordinal in a CUDA_MPS_PINNED_DEVICE_MEM_LIMIT value. */
uint64_t fk_mps_pinned_of(const char *value, int ordinal);

int fk_mps_on(void);
/* fk_launch in MPS mode: the kernel of dur solo ns on the caller's lane. */
void fk_mps_launch(int dev, uint64_t dur);
/* Whether the process may hold held bytes on dev (its pinned limit). */
int fk_mps_mem_ok(int dev, uint64_t held);

#endif
