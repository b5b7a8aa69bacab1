/*
 * t_fake.c - the fake driver models what a real GPU does to a share controller (REALGPU.md):
 * GPU time per block is the program's (fakegpu_set_ns_per_block), every kernel takes at least
 * the launch overhead, a memset is GPU time no launch counts, a host-to-device copy is wall time
 * on a copy engine and no GPU time, device utilization samples arrive late and average a window
 * longer than their spacing, and per-process samples name only processes that ran, by host pid,
 * stamped on the wall clock. Checked in a child that runs unlimited (core 100) under libvcuda.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static uint64_t own_busy(const char *uuid)
{
	int pid = getpid();
	uint64_t b = 0, t = 0;
	CCHECK(fakegpu_busy_ns(uuid, &pid, 1, &b, &t) == 0, "fakegpu_busy_ns");
	return b;
}

static uint64_t wall_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (uint64_t)t.tv_sec * 1000000ull + (uint64_t)t.tv_nsec / 1000ull;
}

/* args: uuid */
int child_fake_model(int argc, char **argv)
{
	CCHECK(argc == 1, "args");
	const char *uuid = argv[0];
	int (*set_ns)(uint64_t) = (int (*)(uint64_t))dlsym(RTLD_DEFAULT, "fakegpu_set_ns_per_block");
	CCHECK(set_ns, "the fake driver exports fakegpu_set_ns_per_block");
	CUmodule m;
	CUfunction f;
	t_ctx(0);
	CCHECK(cuModuleLoadData(&m, "fake") == CUDA_SUCCESS, "module");
	CCHECK(cuModuleGetFunction(&f, m, "burn") == CUDA_SUCCESS, "function");
	struct {
		const char *what;
		uint64_t ns_per_block;
		unsigned grid, block;
		uint64_t want_ns;
	} kernels[] = {
		{ "10 blocks at 5 us", 5000, 10, 32, 50000 },
		{ "the same shape, another program: 10 blocks at 0.1 us", 100, 10, 32, 4000 }, /* floor */
		{ "warps do not set the time: 10 blocks x 32 warps at 5 us", 5000, 10, 1024, 50000 },
		{ "one block at 1 us: the 4 us launch floor", 1000, 1, 32, 4000 },
	};
	for (size_t i = 0; i < sizeof(kernels) / sizeof(kernels[0]); i++) {
		CCHECK(set_ns(kernels[i].ns_per_block) == 0, "set ns per block");
		uint64_t b0 = own_busy(uuid);
		CCHECK(cuLaunchKernel(f, kernels[i].grid, 1, 1, kernels[i].block, 1, 1, 0, NULL, NULL,
				      NULL) == CUDA_SUCCESS, "launch");
		CCHECK(cuCtxSynchronize() == CUDA_SUCCESS, "sync");
		uint64_t got = own_busy(uuid) - b0;
		CCHECK(got == kernels[i].want_ns, "%s: %llu ns of GPU time, want %llu", kernels[i].what,
		       (unsigned long long)got, (unsigned long long)kernels[i].want_ns);
	}
	CUdeviceptr p;
	CCHECK(cuMemAlloc_v2(&p, 64 * MiB) == CUDA_SUCCESS, "alloc");
	uint64_t b0 = own_busy(uuid);
	CCHECK(cuMemsetD8_v2(p, 0, 64 * MiB) == CUDA_SUCCESS, "memset");
	CCHECK(cuCtxSynchronize() == CUDA_SUCCESS, "sync");
	uint64_t got = own_busy(uuid) - b0;
	CCHECK(got == 64000, "memset of 64 MiB: %llu ns of GPU time, want 64000 (1 us per MiB)",
	       (unsigned long long)got);
	CCHECK(cuMemsetD8_v2(p + 1, 0, 64 * MiB) == CUDA_ERROR_INVALID_VALUE,
	       "a memset that is not an allocation's start is refused");
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	b0 = own_busy(uuid);
	CCHECK(cuMemcpyHtoD_v2(p, &p, 16 * MiB) == CUDA_SUCCESS, "copy");
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double us = (double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3;
	CCHECK(own_busy(uuid) == b0, "a host-to-device copy is no GPU (SM) time");
	CCHECK(us >= 640, "a 16 MiB copy took %.0f us, want >= 640 (40 us per MiB)", us);
	CCHECK(cuMemFree_v2(p) == CUDA_SUCCESS, "free");

	/* device samples: the newest is stamped at least the delay before now */
	nvmlDevice_t h;
	CCHECK(nvmlInit_v2() == NVML_SUCCESS && nvmlDeviceGetHandleByIndex_v2(0, &h) == NVML_SUCCESS,
	       "nvml");
	nvmlSample_t s[32];
	nvmlValueType_t vt;
	unsigned n = 32;
	uint64_t before = wall_us();
	CCHECK(nvmlDeviceGetSamples(h, NVML_GPU_UTILIZATION_SAMPLES, 0, &vt, &n, s) == NVML_SUCCESS &&
		       n == 1, "newest device sample");
	CCHECK(s[0].timeStamp + 50000 <= before + 1000 && s[0].timeStamp + 250000 >= before,
	       "the newest sample is stamped %lld us before now, want 50 ms late (+ at most 200)",
	       (long long)before - (long long)s[0].timeStamp);

	/* per-process samples: this process, busy, by its pid, on the wall clock; none for a
	 * process that did not run in the window (earlier children on other GPUs, this GPU's
	 * own history before the window) */
	set_ns(1000);
	struct timespec end;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		CCHECK(cuLaunchKernel(f, 200, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL) == CUDA_SUCCESS,
		       "launch");
		clock_gettime(CLOCK_MONOTONIC, &end);
	} while ((end.tv_sec - t0.tv_sec) * 1000 + (end.tv_nsec - t0.tv_nsec) / 1000000 < 700);
	CCHECK(cuCtxSynchronize() == CUDA_SUCCESS, "sync");
	nvmlProcessUtilizationSample_t ps[64];
	unsigned np = 64;
	uint64_t now = wall_us();
	nvmlReturn_t r = nvmlDeviceGetProcessUtilization(h, ps, &np, now - 200000);
	CCHECK(r == NVML_SUCCESS && np >= 1, "per-process samples: %d, %u", r, np);
	for (unsigned i = 0; i < np; i++) {
		CCHECK(ps[i].timeStamp <= now && ps[i].timeStamp + 1000000 > now,
		       "sample stamped %llu, now %llu: want the wall clock", ps[i].timeStamp,
		       (unsigned long long)now);
		CCHECK(ps[i].pid == (unsigned)getpid(), "a sample for pid %u, not this process (%d)",
		       ps[i].pid, (int)getpid());
		CCHECK(ps[i].smUtil >= 80, "this process's sample %u%%, want it busy", ps[i].smUtil);
	}
	return 0;
}

/* The model above, and per-process samples (every 200 ms here, without noise). */
void test_fake_models_the_gpu(void)
{
	struct t_fake_gpu g;
	CHECK(t_fake_gpu(&g) == 0, "config");
	const char *env[] = { g.devices, g.config, "FAKEGPU_PROC_SAMPLE_US=200000", "FAKEGPU_NVML_PID_OFFSET=0",
			      "FAKEGPU_PROC_NOISE=0", "FAKEGPU_NS_PER_BLOCK=1000",
			      "FAKEGPU_SAMPLE_DELAY_US=50000", NULL };
	const char *args[] = { "fake_model", g.uuid, NULL };
	char out[4096];
	int rc = t_run(env, args, out, sizeof(out));
	CHECK(rc == 0, "child exit %d:\n%s", rc, out);
}

/* args: seconds. Keeps its queue full of 1 ms kernels (FAKEGPU_MAX_QUEUE_US deep) for that
 * long, then drains it. */
int child_slice_deep(int argc, char **argv)
{
	CCHECK(argc == 1, "args");
	double secs = atof(argv[0]), t0 = t_mono_s();
	CUmodule m;
	CUfunction f;
	t_ctx(0);
	CCHECK(cuModuleLoadData(&m, "fake") == CUDA_SUCCESS && cuModuleGetFunction(&f, m, "burn") == CUDA_SUCCESS,
	       "function");
	while (t_mono_s() - t0 < secs)
		CCHECK(cuLaunchKernel(f, 1000, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) == CUDA_SUCCESS, "launch");
	CCHECK(cuCtxSynchronize() == CUDA_SUCCESS, "sync");
	return 0;
}

/* args: uuid, the deep child's pid. With a deep queue ahead of it on the engine, a short
 * kernel of this process still runs within a slice or two (one FIFO timeline would make it
 * wait for the whole queue); both saturating, each gets a slice in turn and the switches are
 * busy time neither owns. */
int child_slice_probe(int argc, char **argv)
{
	CCHECK(argc == 2, "args");
	const char *uuid = argv[0];
	int deep = atoi(argv[1]);
	CUmodule m;
	CUfunction f;
	t_ctx(0);
	CCHECK(cuModuleLoadData(&m, "fake") == CUDA_SUCCESS && cuModuleGetFunction(&f, m, "burn") == CUDA_SUCCESS,
	       "function");
	for (double t0 = t_mono_s(); t_busy_of(uuid, deep) < 100000000ull;) /* 100 ms of its work ran */
		CCHECK(t_mono_s() - t0 < 5, "the deep child never ran 100 ms of work");
	double t0 = t_mono_s();
	CCHECK(cuLaunchKernel(f, 50, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) == CUDA_SUCCESS, "launch");
	CCHECK(cuCtxSynchronize() == CUDA_SUCCESS, "sync");
	double waited = t_mono_s() - t0;
	t_note("a 50 us kernel behind a full queue of another context: %.1f ms", waited * 1e3);
	CCHECK(waited < 0.1, "a 50 us kernel behind another context's queue took %.0f ms: want a slice or two, not the queue", waited * 1e3);

	/* both saturating: skip the first 50 ms, measure 400 ms */
	double start = t_mono_s();
	uint64_t d0 = 0, m0 = 0, o0 = 0;
	double w0 = 0;
	int measuring = 0;
	for (;;) {
		CCHECK(cuLaunchKernel(f, 1000, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) == CUDA_SUCCESS, "launch");
		double now = t_mono_s();
		if (!measuring && now - start >= 0.05) {
			measuring = 1;
			w0 = now, d0 = t_busy_of(uuid, 0), m0 = t_busy_of(uuid, getpid()), o0 = t_busy_of(uuid, deep);
		}
		if (measuring && now - w0 >= 0.4)
			break;
	}
	double wall = (t_mono_s() - w0) * 1e9;
	double dev = (double)(t_busy_of(uuid, 0) - d0) / wall, mine = (double)(t_busy_of(uuid, getpid()) - m0) / wall,
	       other = (double)(t_busy_of(uuid, deep) - o0) / wall;
	t_note("both saturating, 2 ms slices, 100 us switches: device %.3f, this %.3f, the other %.3f, switches %.3f",
	       dev, mine, other, dev - mine - other);
	CCHECK(dev > 0.97, "the engine was busy %.3f of the time, want all of it", dev);
	CCHECK(mine > 0.40 && mine < 0.55 && other > 0.40 && other < 0.55,
	       "shares %.3f and %.3f, want a slice each in turn (~0.476)", mine, other);
	CCHECK(dev - mine - other > 0.02 && dev - mine - other < 0.08,
	       "switch time %.3f of the engine, want ~0.048 (100 us per 2.1 ms slice)", dev - mine - other);
	CCHECK(cuCtxSynchronize() == CUDA_SUCCESS, "sync");
	return 0;
}

/* Runs child mode head... UUID PID on a time-sliced fake GPU (2 ms slices, 100 us switches, 300
 * ms queues) beside a slice_deep child that keeps its queue full for deep_secs; PID is that
 * child's. Returns the child's exit code, the deep child's in *deep_rc, the output in out. */
int t_run_beside_deep(const char *deep_secs, const char *const *head, char *out, size_t outlen, int *deep_rc)
{
	struct t_fake_gpu g; /* unlimited: the fake's own scheduling */
	char pid[32];
	const char *args[16];
	if (t_fake_gpu(&g) != 0)
		return -1;
	const char *env[] = { g.devices, g.config, "FAKEGPU_NS_PER_BLOCK=1000", "FAKEGPU_SLICE_US=2000",
			      "FAKEGPU_SWITCH_US=100", "FAKEGPU_MAX_QUEUE_US=300000", NULL };
	const char *deep_args[] = { "slice_deep", deep_secs, NULL };
	pid_t d = t_spawn(env, deep_args, NULL);
	if (d <= 0)
		return -1;
	snprintf(pid, sizeof(pid), "%d", (int)d);
	int n = 0;
	while (head[n] && n < 13) {
		args[n] = head[n];
		n++;
	}
	args[n++] = g.uuid;
	args[n++] = pid;
	args[n] = NULL;
	int rc = t_run(env, args, out, outlen);
	*deep_rc = t_wait(d);
	return rc;
}

/* Time slicing between contexts (FAKEGPU_SLICE_US, FAKEGPU_SWITCH_US), with deep queues. */
void test_fake_time_slices(void)
{
	const char *head[] = { "slice_probe", NULL };
	char out[4096];
	int drc = -1, rc = t_run_beside_deep("1.5", head, out, sizeof(out), &drc);
	CHECK(rc == 0 && drc == 0, "probe exit %d, deep child exit %d:\n%s", rc, drc, out);
}
