/*
 * fake.h - internals of the fake CUDA driver and NVML (tests only, never shipped).
 *
 * Each simulated GPU is a state file <FAKEGPU_DIR>/<uuid>.fakegpu mapped by every process
 * that uses the GPU, so processes (and emulated containers) contend for it. A GPU runs one
 * kernel at a time, in launch order (FIFO timeline on CLOCK_MONOTONIC); a kernel takes
 * grid blocks x FAKEGPU_NS_PER_BLOCK ns. NVML utilization is computed from that timeline over
 * fixed sample periods, like the real sampler. Environment:
 *   FAKEGPU_DEVICES      "GPU-<uuid>:<MiB>,GPU-<uuid>:<MiB>" (required), the visible devices
 *   FAKEGPU_DIR          state directory (default /tmp/fakegpu-<uid>)
 *   FAKEGPU_NS_PER_BLOCK kernel time per block (default 1000); per process, as GPU time per block
 *                        is a property of the program (fakegpu_set_ns_per_block, workload
 *                        --ns-per-block), not of its launch shape
 *   FAKEGPU_LAUNCH_NS    floor of a kernel's GPU time, the launch overhead (default 4000, as
 *                        measured for an empty kernel on an H100)
 *   FAKEGPU_MEMSET_NS_PER_MIB  GPU time of cuMemsetD8 per MiB, a kernel on the GPU (default 1000)
 *   FAKEGPU_MEMCPY_NS_PER_MIB  time of cuMemcpyHtoD per MiB on the copy engine, not GPU busy
 *                        time (default 40000: PCIe at ~25 GB/s)
 *   FAKEGPU_SAMPLE_DELAY_US    a device utilization sample is published this long after its
 *                        period ends (default 0; the node controller's closed loop runs with 50000:
 *                        libvcuda's local sampler does not hold its shares with late samples yet)
 *   FAKEGPU_SAMPLE_WINDOW_US   and averages the busy time over this window, longer than the
 *                        spacing (default 166667: NVML's 1/6 s)
 *   FAKEGPU_MAX_QUEUE_US a launch blocks while more than this much work is queued (20000)
 *   FAKEGPU_SAMPLE_US    NVML device utilization sample period (default 100000: ~10/s)
 *   FAKEGPU_SAMPLE_PHASE_US  the device samples' stamps fall this long after whole periods of
 *                        CLOCK_MONOTONIC (default 0), as a real driver samples on its own clock
 *   FAKEGPU_PROC_SAMPLE_US   per-process utilization sample period (default 1000000)
 *   FAKEGPU_PROC_NOISE   per-process samples are off by up to this many points (default 20)
 *   FAKEGPU_NVML_PID_OFFSET  NVML reports pid + offset, as a host sees a container's pids
 *                        (default 4000000: never a pid the process knows as its own)
 *   FAKEGPU_BOOST        power-capped clocks (default 0: none): a kernel runs up to 1 + this times
 *                        faster when the device was busy less of the last 100 ms, as a card capped
 *                        at full load clocks higher below it (an H200: SM 1473 MHz solo at full load,
 *                        1980 MHz with one tenant at 10-50%); full speed below FAKEGPU_BOOST_KNEE
 *                        (percent busy, default 60), none at 100% busy, linear between
 *   FAKEGPU_CLOCK_MHZ    the SM clock NVML reports at full load (default 1500), times the speed
 *   FAKEGPU_CONTEXT_MIB  device memory each context takes, as a real driver's does (default 0);
 *                        cuCtxSetLimit's stack (x 132 SMs x 2048 threads) and heap above the
 *                        defaults take memory too. A process gives back what its contexts hold
 *                        when they are destroyed or when it exits.
 *   FAKEGPU_CAPTURING    1: every stream of the process is being captured into a CUDA graph
 *                        (cuStreamIsCapturing says ACTIVE; the legacy stream, which cannot
 *                        be, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT); cuEventRecord refuses and counts
 *                        (fakegpu_capture_records), and so does cuEventQuery outside
 *                        CU_STREAM_CAPTURE_MODE_RELAXED (fakegpu_capture_unsafe): fake_event.c
 * Device memory is also booked per process (pid + pid namespace) in the state file, so NVML can
 * list each live process with what it holds, keyed by its host pid; what a process killed
 * with -9 held is given back when its slot is reaped (by the next process of its namespace
 * that needs a slot, or by an NVML running-processes query in the host's namespace).
 */
#ifndef VCUDA_FAKE_H
#define VCUDA_FAKE_H

#include <pthread.h>
#include <stdint.h>

#include "../include/cuda_api.h"
#include "../src/htab.h"

#define FK_EXPORT __attribute__((visibility("default")))
#define FK_MAX_DEV 16
/* kernels the timeline remembers: a second of 4 us kernels from every process, so that a
 * per-process sample over a second is computed from what ran, not cut at the ring's start */
#define FK_RING (1 << 18)
#define FK_PIDS 64
#define FK_MAGIC 0x34504746u /* "FGP4": kernels keyed by pid slot, slots by (pid, pid namespace) with memory; bump on any layout change */
#define FK_MAX_CTX 64 /* contexts a process may create at once */
#define FK_MAX_PEEK 256 /* state files the query API may map */

struct fk_kern {
	uint64_t start, end;
	int32_t pid;
	uint32_t slot; /* the launching process's pid slot: pids of two namespaces may be equal */
};

_Static_assert(sizeof(struct fk_kern) == 24, "fk_kern is part of the state file layout");

/* fakegpu_ran's record (test API): one run of a process on the engine, in the fake's clock
 * (CLOCK_MONOTONIC ns, the same for every process) */
struct fakegpu_span {
	uint64_t start, end;
};

struct fk_pidslot {
	int32_t pid;
	uint32_t power_pct; /* what its kernels draw, % of a dense GEMM's (FAKEGPU_POWER; 0: 100) */
	uint64_t sched_ns; /* GPU time of every kernel this pid launched */
	uint64_t pidns; /* inode of the process's pid namespace (0: unknown), with pid its key */
	uint64_t mem; /* device memory the process holds (allocations and contexts) */
};

struct fk_state { /* shared file layout */
	uint32_t magic, size;
	char uuid[64];
	uint64_t total;
	pthread_mutex_t lock; /* robust, process-shared; guards everything below */
	uint64_t used, peak;
	uint64_t busy_until, sched_all, nkern;
	struct fk_pidslot pids[FK_PIDS];
	struct fk_kern ring[FK_RING];
	/* Time slicing (slice_ns > 0, set by a process with FAKEGPU_SLICE_US): each pid slot queues
	 * its own work (queued[]) and the engine runs one context for up to a slice, then the next
	 * with work, a switch costing switch_ns of busy time no process owns. The timeline is
	 * played forward lazily, under the lock, up to the caller's now (ran_to); the ring then
	 * holds what ran, and sched_* count only that. 0: one FIFO timeline, kernels in launch order. */
	uint64_t slice_ns, switch_ns, ran_to, slice_left, switch_left;
	int32_t cur; /* pid slot on the engine, -1 when idle */
	uint32_t pad;
	uint64_t queued[FK_PIDS];
};
_Static_assert(sizeof(struct fk_pidslot) == 32, "fk_pidslot is part of the state file layout");

struct fk_dev {
	char uuid[64];
	unsigned char raw[16];
	uint64_t total;
	struct fk_state *st;
	uint64_t last_end; /* this process's last kernel end (atomic) */
	int slot_pid, slot; /* cached pid slot, valid while slot_pid == getpid() */
	uint64_t speed_at, speed_ppm; /* fk_speed's last reading: when, and the speed x 1e6 (atomic) */
};

struct fk_ctx {
	uint32_t magic;
	int dev;
	uint64_t held; /* device memory this context takes (context + limits above defaults) */
	uint64_t limit[3]; /* CUlimit values: stack, printf fifo, heap */
};

enum { FK_KIND_PTR = 1, FK_KIND_HANDLE = 2 };

struct fk_globals {
	pthread_once_t once;
	int init_rc;
	int ndev;
	struct fk_dev dev[FK_MAX_DEV];
	struct fk_ctx ctx[FK_MAX_DEV]; /* primary contexts */
	struct fk_ctx created[FK_MAX_CTX]; /* cuCtxCreate's (magic 0: free), under ctx_mu */
	int primary_refs[FK_MAX_DEV];
	uint64_t context_bytes;
	pthread_mutex_t ctx_mu;
	uint64_t ctx_held[FK_MAX_DEV]; /* all this process's contexts hold, given back at exit */
	uint64_t ns_per_block, max_queue_ns, sample_ns, proc_sample_ns;
	uint64_t slice_ns, switch_ns; /* FAKEGPU_SLICE_US, FAKEGPU_SWITCH_US (slice 0: not set) */
	int slice_set;                /* FAKEGPU_SLICE_US is in the environment (0: slicing off) */
	uint64_t launch_ns, memset_ns_per_mib, memcpy_ns_per_mib, sample_delay_ns, sample_window_ns,
		sample_phase_ns;
	unsigned nvml_pid_offset, proc_noise, proc_whole;
	uint64_t boost_ppm, boost_knee_pct, clock_mhz; /* FAKEGPU_BOOST x 1e6, FAKEGPU_BOOST_KNEE, FAKEGPU_CLOCK_MHZ */
	uint32_t power_pct;    /* FAKEGPU_POWER x 100 (0: unset, a GEMM's) */
	uint64_t membound_ppm; /* FAKEGPU_MEMBOUND x 1e6 */
	char dir[512];
	struct vc_htab allocs;       /* device pointer / VMM handle -> (dev, size) */
	uint64_t bump[FK_MAX_DEV];   /* next 64-bit device address (atomic) */
	uint32_t bump32;             /* next 32-bit (v1 API) device address (atomic) */
	uint64_t next_handle;        /* VMM handles (atomic) */
	int capturing; /* FAKEGPU_CAPTURING=1: every stream is being captured (fake_event.c) */
	unsigned long capture_records, capture_unsafe; /* refused under capture (atomic) */
	int pid; /* getpid(), refreshed in fork children */
	uint64_t pidns; /* inode of this process's pid namespace (0: /proc unreadable) */
	uint32_t module_obj, function_obj, stream_obj; /* handle targets */
	pthread_mutex_t peek_mu;
	int npeek;
	struct { char uuid[64]; struct fk_state *st; } peek[FK_MAX_PEEK];
};

extern struct fk_globals fk;
extern __thread struct fk_ctx *fk_cur;
extern __thread CUstreamCaptureMode fk_capture_mode; /* cuThreadExchangeStreamCaptureMode's */

/* fake_gpu.c */
int fk_init(void);
uint64_t fk_now(void);
void fk_sleep_ns(uint64_t ns);
void fk_lock(struct fk_state *s);
void fk_unlock(struct fk_state *s);
struct fk_state *fk_map(const char *uuid, uint64_t total, int create);
struct fk_state *fk_peek(const char *uuid);
int fk_mem_take(int dev, uint64_t size);
void fk_mem_give(int dev, uint64_t size);
void fk_launch(int dev, uint64_t blocks);
uint64_t fk_kernel_ns(uint64_t blocks);
double fk_speed(int dev);
void fk_enqueue(int dev, uint64_t dur);
void fk_wait_ns(uint64_t ns); /* a synchronize's wait: sleep, then spin the last of it */
struct fk_pidslot *fk_pid_slot(struct fk_dev *d, int pid); /* the caller's slot, under the lock */
/* fake_slice.c: time slicing, on when the state's slice_ns is set */
int fk_sliced(const struct fk_state *s);
void fk_slice_run_locked(struct fk_state *s, uint64_t now);
void fk_slice_enqueue(struct fk_dev *d, uint64_t dur);
void fk_slice_sync(struct fk_dev *d);
int fk_ran_locked(struct fk_state *s, int slot, int32_t pid, uint64_t from, struct fakegpu_span *out,
		  int max, uint64_t *next);
void fk_sync(int dev);
uint64_t fk_busy_locked(struct fk_state *s, int slot, uint64_t t);
int fk_slot_locked(struct fk_state *s, int pid, uint64_t pidns);
void fk_shared_mutex_init(pthread_mutex_t *m);
uint64_t fk_pidns_of(const char *proc_pid_dir);
int fk_cur_dev(void);

void fk_ctx_init(struct fk_ctx *c, int dev);
void fk_ctx_after_fork(void);

#endif
