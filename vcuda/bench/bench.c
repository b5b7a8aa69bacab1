/*
 * bench - per-call cost of cuLaunchKernel and cuMemAlloc_v2/cuMemFree_v2 on the fake driver.
 * bench/run.sh runs it twice, directly on the fake driver and with libvcuda.so preloaded,
 * and writes the difference to BENCHMARKS.md. Prints one line:
 *   launch_ns=.. alloc_ns=.. free_ns=.. control_ns=..  (each the median of 7 rounds;
 *   control is cuCtxGetDevice, which libvcuda does not hook: the noise floor)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../include/cuda_api.h"

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

int main(void)
{
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
