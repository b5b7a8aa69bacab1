/*
 * bench - per-call cost of cuLaunchKernel and cuMemAlloc_v2/cuMemFree_v2 on the fake driver.
 * bench/run.sh runs it twice, directly on the fake driver and with libvcuda.so preloaded,
 * and writes the difference to BENCHMARKS.md. Prints one line:
 *   launch_ns=.. alloc_ns=.. free_ns=.. control_ns=..  (each the median of 7 rounds;
 *   control is cuCtxGetDevice, which libvcuda does not hook: the noise floor)
 * BENCH_NODE=plain|confine: first writes $VCUDA_CONTROL as a node controller would, limited
 * with credit to spare, and with confine a confining launch slot that holds the whole run (the
 * hot path then reads the clock against the slot's end).
 */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../include/cuda_api.h"
#include "../include/vcuda_control.h"

#define ROUNDS 7
#define LAUNCHES 400000
#define ALLOCS 2000

static double now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v)
{
	qsort(v, ROUNDS, sizeof(double), cmp);
	return v[ROUNDS / 2];
}

/* The node's decision for device 0: limited, credit to spare, a slot of 4000 s less 1 us. */
static int write_control(const char *mode)
{
	const char *path = getenv("VCUDA_CONTROL");
	if (!path)
		return -1;
	struct vcuda_control c;
	memset(&c, 0, sizeof(c));
	c.magic = VCUDA_CONTROL_MAGIC;
	c.version = VCUDA_CONTROL_VERSION;
	c.size = sizeof(c);
	c.device_count = 1;
	double rate = 1.0; /* units per ns */
	struct vcuda_control_device *d = &c.dev[0];
	d->seq = 2;
	d->allowance = 1ull << 50;
	memcpy(&d->rate_bits, &rate, sizeof(rate));
	memcpy(&d->fallback_bits, &rate, sizeof(rate));
	d->stamp_ns = (uint64_t)now_ns();
	d->mode = VCUDA_CONTROL_LIMITED;
	d->period_us = 10000000;
	d->slot_period_us = 4000000000u;
	d->slot_len_us = 4000000000u - 1;
	d->slot_flags = strcmp(mode, "confine") == 0 ? VCUDA_SLOT_CONFINE : 0;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return -1;
	int ok = write(fd, &c, sizeof(c)) == (ssize_t)sizeof(c);
	close(fd);
	return ok ? 0 : -1;
}

int main(void)
{
	const char *node = getenv("BENCH_NODE");
	if (node && write_control(node) != 0) {
		fprintf(stderr, "bench: BENCH_NODE=%s: cannot write $VCUDA_CONTROL\n", node);
		return 1;
	}
	CUdevice d;
	CUcontext c;
	CUmodule m;
	CUfunction f;
	static CUdeviceptr p[ALLOCS];
	if (cuInit(0) || cuDeviceGet(&d, 0) || cuCtxCreate_v2(&c, 0, d) ||
	    cuModuleLoadData(&m, "bench") || cuModuleGetFunction(&f, m, "k")) {
		fprintf(stderr, "bench: driver setup failed\n");
		return 1;
	}
	/* warm up (BENCH_WARM_MS): lets the limiter's sampler see the GPU */
	const char *w = getenv("BENCH_WARM_MS");
	double until = now_ns() + (w ? atof(w) : 300) * 1e6;
	while (now_ns() < until)
		if (cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS)
			return 1;
	double launch[ROUNDS], alloc[ROUNDS], fr[ROUNDS], ctl[ROUNDS];
	for (int r = 0; r < ROUNDS; r++) {
		double t0 = now_ns();
		for (int i = 0; i < LAUNCHES; i++) /* control: a call libvcuda does not hook */
			if (cuCtxGetDevice(&d) != CUDA_SUCCESS)
				return 1;
		ctl[r] = (now_ns() - t0) / LAUNCHES;
		t0 = now_ns();
		for (int i = 0; i < LAUNCHES; i++)
			if (cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS)
				return 1;
		launch[r] = (now_ns() - t0) / LAUNCHES;
		double a = 0, b = 0;
		for (int k = 0; k < 10; k++) {
			t0 = now_ns();
			for (int i = 0; i < ALLOCS; i++)
				if (cuMemAlloc_v2(&p[i], 1 << 20) != CUDA_SUCCESS)
					return 1;
			double t1 = now_ns();
			for (int i = 0; i < ALLOCS; i++)
				if (cuMemFree_v2(p[i]) != CUDA_SUCCESS)
					return 1;
			a += t1 - t0;
			b += now_ns() - t1;
		}
		alloc[r] = a / (10.0 * ALLOCS);
		fr[r] = b / (10.0 * ALLOCS);
	}
	printf("launch_ns=%.1f alloc_ns=%.1f free_ns=%.1f control_ns=%.1f\n", median(launch),
	       median(alloc), median(fr), median(ctl));
	return 0;
}
