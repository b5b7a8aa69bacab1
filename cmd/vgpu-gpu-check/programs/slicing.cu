// CUDA C program of vgpu-gpu-check's slicing rows, built on the GPU machine:
//   nvcc -O2 -o slicing slicing.cu
// It measures how the GPU itself shares its time between processes; no limiter runs in it.
//   slicing SECS OUT [PERIOD_US START_US LEN_US FILL]
// Launches kernels of one wave (a block per SM, each spinning about 100 µs) and records where
// each ran on the GPU's global timer (%globaltimer, ns, one clock for every context): its first
// block's start and its last block's end. Without a slot it launches back to back (a deep
// queue, as a busy tenant). With one it launches only at its slot's starts (CLOCK_MONOTONIC in
// µs modulo PERIOD_US = START_US): at once, as many kernels as make FILL × LEN_US of its kernel
// time, then nothing until the next start (the queue drains by itself), as libvcuda's launch
// slots do. Set up, it waits at the check's start line (VGPU_CHECK_READY, VGPU_CHECK_START).
// Writes OUT: "START_NS END_NS" per kernel that ran; prints one JSON line
//   {"kernels":N,"kernel_ns":D,"rate":R,"sms":S,"timer_ns":T,"rt":B,"rt_err":E}
// (rt_err: why SCHED_FIFO was refused, errno as a number; 0 where granted or not asked)
// N kernels, D the kernel's time alone (the shortest of a calibration run, timed by CUDA events so
// that a coarse global timer cannot spoil it), R kernels/s over the second half of its span on the
// GPU, S the SM count, T the smallest step the global timer was seen to take (0: it did not move),
// which bounds how finely the stamps place a kernel, B whether a slotted run launched at real-time
// priority (SCHED_FIFO, as root: a late wake-up on the host would run into the other's slot and
// measure the host's scheduler, not the GPU; null without a slot).
#include <cuda_runtime.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef unsigned long long u64;

static u64 now_ns(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (u64)t.tv_sec * 1000000000ull + (u64)t.tv_nsec;
}

static void sleep_until(u64 ns) {
	struct timespec t = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR) {
	}
}

// start_line says this tenant is ready and waits (at most 120 s) for the row's start
static void start_line(void) {
	const char *ready = getenv("VGPU_CHECK_READY"), *start = getenv("VGPU_CHECK_START");
	if (!ready || !start) return;
	int fd = open(ready, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd >= 0) close(fd);
	for (u64 t = now_ns(); access(start, F_OK) != 0 && now_ns() - t < 120000000000ull;) usleep(5000);
}

__global__ void stamp(u64 *t0, u64 *t1, long long cycles) {
	u64 s, e;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(s));
	long long c = clock64();
	while (clock64() - c < cycles) {
	}
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(e));
	if (threadIdx.x == 0) {
		atomicMin(t0, s);
		atomicMax(t1, e);
	}
}

// tick: the smallest step of %globaltimer one thread sees over 64 changes (~0 if it never moves)
__global__ void tick(u64 *out) {
	u64 prev, t, best = ~0ull;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(prev));
	for (int changes = 0, spins = 0; changes < 64 && spins < (1 << 24); spins++) {
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
		if (t != prev) {
			if (t - prev < best) best = t - prev;
			prev = t;
			changes++;
		}
	}
	*out = best;
}

static int check(cudaError_t e, const char *what) {
	if (e == cudaSuccess) return 0;
	fprintf(stderr, "slicing: %s: %s\n", what, cudaGetErrorString(e));
	return 1;
}

// the device's stamps of kernels [0, n)
struct stamps {
	u64 *d0, *d1, *h0, *h1;
	long cap;
};

static int reset(struct stamps *s) {
	return check(cudaMemset(s->d0, 0xff, s->cap * sizeof(u64)), "cudaMemset") ||
	       check(cudaMemset(s->d1, 0, s->cap * sizeof(u64)), "cudaMemset") ||
	       check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

static int fetch(struct stamps *s, long n) {
	return check(cudaDeviceSynchronize(), "kernels") ||
	       check(cudaMemcpy(s->h0, s->d0, n * sizeof(u64), cudaMemcpyDeviceToHost), "cudaMemcpy") ||
	       check(cudaMemcpy(s->h1, s->d1, n * sizeof(u64), cudaMemcpyDeviceToHost), "cudaMemcpy");
}

// shortest runs n kernels of cycles one at a time and returns the shortest one's time by CUDA
// events (0 on error)
static u64 shortest(struct stamps *s, int sms, long long cycles, long n) {
	cudaEvent_t a, b;
	if (check(cudaEventCreate(&a), "cudaEventCreate")) return 0;
	if (check(cudaEventCreate(&b), "cudaEventCreate")) {
		cudaEventDestroy(a);
		return 0;
	}
	float best = 0;
	for (long i = 0; i < n; i++) {
		float ms = 0;
		if (check(cudaEventRecord(a, 0), "cudaEventRecord")) break;
		stamp<<<sms, 128>>>(s->d0, s->d1, cycles);
		if (check(cudaGetLastError(), "launch") || check(cudaEventRecord(b, 0), "cudaEventRecord") ||
		    check(cudaEventSynchronize(b), "kernel") || check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime")) {
			best = 0;
			break;
		}
		if (ms > 0 && (best == 0 || ms < best)) best = ms;
	}
	cudaEventDestroy(a);
	cudaEventDestroy(b);
	if (best == 0) fprintf(stderr, "slicing: calibration: no kernel time measured\n");
	return (u64)((double)best * 1e6);
}

// timer_step: tick's figure (0: the timer did not move; ~0ull on error)
static u64 timer_step(struct stamps *s) {
	u64 step = 0;
	tick<<<1, 1>>>(s->d0);
	if (check(cudaGetLastError(), "launch") || check(cudaDeviceSynchronize(), "timer") ||
	    check(cudaMemcpy(&step, s->d0, sizeof step, cudaMemcpyDeviceToHost), "cudaMemcpy"))
		return ~0ull;
	return step == ~0ull ? 0 : step;
}

int main(int argc, char **argv) {
	if (argc != 3 && argc != 7) {
		fprintf(stderr, "usage: slicing SECS OUT [PERIOD_US START_US LEN_US FILL]\n");
		return 2;
	}
	double secs = atof(argv[1]);
	const char *out = argv[2];
	int slotted = argc == 7;
	u64 period = 0, start = 0, len = 0;
	double fill = 0;
	if (slotted) {
		period = strtoull(argv[3], NULL, 10) * 1000;
		start = strtoull(argv[4], NULL, 10) * 1000;
		len = strtoull(argv[5], NULL, 10) * 1000;
		fill = atof(argv[6]);
		if (!period || start >= period || !len || start + len > period || fill <= 0 || fill > 2) {
			fprintf(stderr, "slicing: slot %s %s %s %s: want 0 <= START < START+LEN <= PERIOD (µs), 0 < FILL <= 2\n",
				argv[3], argv[4], argv[5], argv[6]);
			return 2;
		}
	}
	if (secs <= 0 || secs > 60) {
		fprintf(stderr, "slicing: SECS %s: want 0 < SECS <= 60\n", argv[1]);
		return 2;
	}
	int sms = 0;
	if (check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "SM count") || sms <= 0) return 1;
	struct stamps s;
	s.cap = (long)(secs * 20000) + 4096; // 100 µs kernels back to back, twice over
	s.h0 = (u64 *)malloc(s.cap * sizeof(u64));
	s.h1 = (u64 *)malloc(s.cap * sizeof(u64));
	if (!s.h0 || !s.h1 || check(cudaMalloc(&s.d0, s.cap * sizeof(u64)), "cudaMalloc") ||
	    check(cudaMalloc(&s.d1, s.cap * sizeof(u64)), "cudaMalloc"))
		return 1;
	// cycles for about 100 µs at the clock it runs at now
	long long cycles = 100000;
	u64 d = shortest(&s, sms, cycles, 16);
	if (!d) return 1;
	cycles = (long long)((double)cycles * 100000.0 / (double)d);
	if (cycles < 1000) cycles = 1000;
	u64 kernel = shortest(&s, sms, cycles, 64);
	u64 timer = timer_step(&s);
	if (!kernel || timer == ~0ull || reset(&s)) return 1;
	long per = slotted ? (long)(fill * (double)len / (double)kernel) : 0;
	if (slotted && per < 1) per = 1;

	int rt = 0, rt_err = 0;
	if (slotted) {
		struct sched_param sp;
		memset(&sp, 0, sizeof sp);
		sp.sched_priority = 10;
		rt = sched_setscheduler(0, SCHED_FIFO, &sp) == 0;
		if (!rt) rt_err = errno;
	}
	start_line();
	u64 t0 = now_ns(), end = t0 + (u64)(secs * 1e9);
	long n = 0;
	if (!slotted) {
		while (n < s.cap && now_ns() < end) {
			stamp<<<sms, 128>>>(s.d0 + n, s.d1 + n, cycles);
			n++;
		}
	} else {
		u64 t = now_ns(), into = (t + period - start % period) % period;
		u64 next = into ? t - into + period : t;
		while (next < end && n + per <= s.cap) {
			sleep_until(next);
			for (long i = 0; i < per; i++) stamp<<<sms, 128>>>(s.d0 + n + i, s.d1 + n + i, cycles);
			n += per;
			next += period;
		}
	}
	if (check(cudaGetLastError(), "launch") || fetch(&s, n)) return 1;
	FILE *f = fopen(out, "w");
	if (!f) {
		fprintf(stderr, "slicing: %s: %s\n", out, strerror(errno));
		return 1;
	}
	u64 first = ~0ull, last = 0;
	for (long i = 0; i < n; i++) {
		fprintf(f, "%llu %llu\n", s.h0[i], s.h1[i]);
		if (s.h0[i] < first) first = s.h0[i];
		if (s.h1[i] > last) last = s.h1[i];
	}
	if (fclose(f) != 0) {
		fprintf(stderr, "slicing: %s: %s\n", out, strerror(errno));
		return 1;
	}
	u64 mid = first + (last - first) / 2;
	long half = 0;
	for (long i = 0; i < n; i++)
		if (s.h1[i] > mid) half++;
	double rate = last > mid ? half / ((double)(last - mid) / 1e9) : 0;
	printf("{\"kernels\":%ld,\"kernel_ns\":%llu,\"rate\":%f,\"sms\":%d,\"timer_ns\":%llu,\"rt\":%s,\"rt_err\":%d}\n", n, kernel,
	       rate, sms, timer, !slotted ? "null" : rt ? "true" : "false", rt_err);
	return 0;
}
