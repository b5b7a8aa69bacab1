/* t_mem_stress.c - the cap under 8 processes x 16 threads; a killed process's memory returns. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

struct worker {
	CUcontext ctx;
	pthread_barrier_t *go; /* every thread starts together, once the parent says go */
	uint64_t cap;
	unsigned seed;
	int ops;
	int allocs, ooms, bad; /* results */
	char why[256];
};

static uint64_t rnd(unsigned *s)
{
	*s = *s * 1103515245u + 12345u;
	return (*s >> 8) & 0xFFFFFF;
}

static void *stress_thread(void *arg)
{
	struct worker *w = arg;
	struct { int k; CUdeviceptr p; CUmemGenericAllocationHandle h; CUarray a; } held[8];
	int n = 0;
	cuCtxSetCurrent(w->ctx);
	pthread_barrier_wait(w->go);
	for (int i = 0; i < w->ops && !w->bad; i++) {
		if (n > 0 && (n == 8 || rnd(&w->seed) % 3 == 0)) {
			int j = (int)(rnd(&w->seed) % (unsigned)n);
			CUresult rc = held[j].k == 3 ? cuMemRelease(held[j].h)
				    : held[j].k == 4 ? cuArrayDestroy(held[j].a)
				    : held[j].k == 2 ? cuMemFreeAsync(held[j].p, NULL)
						     : cuMemFree_v2(held[j].p);
			if (rc != CUDA_SUCCESS) {
				snprintf(w->why, sizeof(w->why), "free kind %d: %d", held[j].k, rc);
				w->bad = 1;
			}
			held[j] = held[--n];
			continue;
		}
		uint64_t size = (1 + rnd(&w->seed) % 24) * MiB;
		int k = (int)(rnd(&w->seed) % 5);
		CUresult rc;
		CUmemAllocationProp prop = { .type = 1, .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
		CUDA_ARRAY_DESCRIPTOR d = { size / 16, 4, CU_AD_FORMAT_FLOAT, 1 };
		switch (k) {
		case 0: rc = cuMemAlloc_v2(&held[n].p, size); break;
		case 1: rc = cuMemAllocManaged(&held[n].p, size, 1); break;
		case 2: rc = cuMemAllocAsync(&held[n].p, size, NULL); break;
		case 3: rc = cuMemCreate(&held[n].h, size, &prop, 0); break;
		default: rc = cuArrayCreate_v2(&held[n].a, &d); break;
		}
		if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
			w->ooms++;
		} else if (rc != CUDA_SUCCESS) {
			snprintf(w->why, sizeof(w->why), "alloc kind %d: %d", k, rc);
			w->bad = 1;
		} else {
			held[n++].k = k;
			w->allocs++;
		}
		size_t f, t;
		if (cuMemGetInfo_v2(&f, &t) != CUDA_SUCCESS || t != w->cap || f > t) {
			snprintf(w->why, sizeof(w->why), "view free %zu total %zu", f, t);
			w->bad = 1;
		}
	}
	while (n > 0) {
		n--;
		if (held[n].k == 3)
			cuMemRelease(held[n].h);
		else if (held[n].k == 4)
			cuArrayDestroy(held[n].a);
		else
			cuMemFree_v2(held[n].p);
	}
	return NULL;
}

/* args: cap_mib threads ops seed gofile: prints "ready", starts all threads when gofile exists */
int child_mem_stress(int argc, char **argv)
{
	CCHECK(argc == 5, "args");
	int nt = atoi(argv[1]);
	struct worker w[16];
	pthread_t th[16];
	pthread_barrier_t go;
	CCHECK(nt > 0 && nt <= 16, "threads");
	pthread_barrier_init(&go, NULL, (unsigned)nt + 1);
	t_ctx(0);
	CUcontext ctx;
	cuCtxGetCurrent(&ctx);
	for (int i = 0; i < nt; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].ctx = ctx;
		w[i].cap = strtoull(argv[0], NULL, 10) * MiB;
		w[i].ops = atoi(argv[2]);
		w[i].seed = (unsigned)atoi(argv[3]) * 7919u + (unsigned)i;
		w[i].go = &go;
		CCHECK(pthread_create(&th[i], NULL, stress_thread, &w[i]) == 0, "thread");
	}
	printf("ready\n");
	fflush(stdout);
	while (access(argv[4], F_OK) != 0)
		usleep(1000);
	pthread_barrier_wait(&go);
	int allocs = 0, ooms = 0;
	for (int i = 0; i < nt; i++) {
		pthread_join(th[i], NULL);
		CCHECK(!w[i].bad, "thread %d: %s", i, w[i].why);
		allocs += w[i].allocs;
		ooms += w[i].ooms;
	}
	pthread_barrier_destroy(&go);
	printf("allocs=%d ooms=%d\n", allocs, ooms);
	return 0;
}

/* args: mib; allocates, says "held", waits to be killed */
int child_mem_hold(int argc, char **argv)
{
	CCHECK(argc >= 1, "args");
	CUdeviceptr p;
	t_ctx(0);
	CCHECK(cuMemAlloc_v2(&p, strtoull(argv[0], NULL, 10) * MiB) == CUDA_SUCCESS, "hold alloc");
	/* The pid as the host sees it, also from inside a new pid namespace:
	 * /proc is still the host's, and /proc/self resolves in its namespace. */
	char self[32] = "";
	ssize_t n = readlink("/proc/self", self, sizeof(self) - 1);
	self[n > 0 ? n : 0] = '\0';
	printf("held %s\n", self);
	fflush(stdout);
	for (;;)
		pause();
}

/* args: expect_used_mib (-1: do not look first) alloc_mib */
int child_mem_check(int argc, char **argv)
{
	CCHECK(argc >= 2, "args");
	long expect = atol(argv[0]);
	uint64_t want = strtoull(argv[1], NULL, 10) * MiB;
	size_t f, t;
	t_ctx(0);
	if (expect >= 0) {
		CCHECK(cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS, "info");
		CCHECK(t - f == (uint64_t)expect * MiB, "used %zu MiB, want %ld", (size_t)((t - f) / MiB), expect);
	}
	if (want) {
		CUdeviceptr p;
		CUresult rc = cuMemAlloc_v2(&p, want);
		CCHECK(rc == CUDA_SUCCESS, "alloc %llu MiB: %d", (unsigned long long)(want / MiB), rc);
		cuMemFree_v2(p);
	}
	return 0;
}

struct box {
	struct t_container ct;
	char uuid[64], devs[128], cfg[300];
	const char *env[3];
};

static void box(struct box *b, uint64_t cap_mib)
{
	t_uuid(b->uuid);
	t_container(&b->ct, VCUDA_POLICY_NONE);
	t_container_dev(&b->ct, b->uuid, cap_mib, 100);
	t_container_write(&b->ct);
	snprintf(b->devs, sizeof(b->devs), "FAKEGPU_DEVICES=%s:81920", b->uuid);
	snprintf(b->cfg, sizeof(b->cfg), "VCUDA_CONFIG=%s", b->ct.cfg);
	b->env[0] = b->devs;
	b->env[1] = b->cfg;
	b->env[2] = NULL;
}

static int check(struct box *b, const char *expect, const char *alloc, char *out, size_t n)
{
	const char *args[] = { "mem_check", expect, alloc, NULL };
	return t_run(b->env, args, out, n);
}

static pid_t hold(struct box *b, const char *mib, int *fd)
{
	const char *args[] = { "mem_hold", mib, NULL };
	pid_t pid = t_spawn(b->env, args, fd);
	char buf[64] = "";
	ssize_t n = read(*fd, buf, sizeof(buf) - 1);
	buf[n > 0 ? n : 0] = '\0';
	return strstr(buf, "held") ? pid : -pid;
}

void test_mem_killed_process_returns(void)
{
	struct box b;
	char out[4096];
	int fd;
	box(&b, 128);
	pid_t pid = hold(&b, "100", &fd);
	CHECK(pid > 0, "holder did not start");
	CHECK(check(&b, "100", "0", out, sizeof(out)) == 0, "other process sees:\n%s", out);
	CHECK(check(&b, "-1", "40", out, sizeof(out)) != 0, "cap not shared across processes");
	kill(pid, SIGKILL);
	t_wait(pid);
	close(fd);
	CHECK(check(&b, "0", "100", out, sizeof(out)) == 0, "after kill (view first):\n%s", out);
	pid = hold(&b, "100", &fd);
	CHECK(pid > 0, "holder did not start");
	kill(pid, SIGKILL);
	t_wait(pid);
	close(fd);
	CHECK(check(&b, "-1", "100", out, sizeof(out)) == 0, "after kill (alloc first):\n%s", out);
}

void test_mem_stress_8proc_16thr(void)
{
	struct box b;
	char out[8][4096], seed[8][16], gofile[300];
	const char *ops = t_sanitized() ? "150" : "300";
	int fds[8];
	size_t len[8] = { 0 };
	pid_t pids[8];
	box(&b, 256);
	snprintf(gofile, sizeof(gofile), "%s/go", b.ct.dir);
	for (int i = 0; i < 8; i++) {
		snprintf(seed[i], sizeof(seed[i]), "%d", i + 1);
		const char *args[] = { "mem_stress", "256", "16", ops, seed[i], gofile, NULL };
		pids[i] = t_spawn(b.env, args, &fds[i]);
	}
	for (int i = 0; i < 8; i++) { /* all 128 threads wait at their barriers */
		ssize_t n;
		out[i][0] = '\0';
		while (!strstr(out[i], "ready") &&
		       (n = read(fds[i], out[i] + len[i], sizeof(out[i]) - 1 - len[i])) > 0) {
			len[i] += (size_t)n;
			out[i][len[i]] = '\0';
		}
	}
	FILE *g = fopen(gofile, "w");
	CHECK(g && fclose(g) == 0, "go file");
	int allocs = 0, ooms = 0, bad = -1;
	for (int i = 0; i < 8; i++) {
		ssize_t n;
		while ((n = read(fds[i], out[i] + len[i], sizeof(out[i]) - 1 - len[i])) > 0)
			len[i] += (size_t)n;
		out[i][len[i]] = '\0';
		close(fds[i]);
		int a = 0, o = 0;
		const char *res = strstr(out[i], "allocs=");
		if (t_wait(pids[i]) != 0 || !res || sscanf(res, "allocs=%d ooms=%d", &a, &o) != 2)
			bad = i;
		allocs += a;
		ooms += o;
	}
	CHECK(bad < 0, "process %d:\n%s", bad, out[bad < 0 ? 0 : bad]);
	uint64_t used, peak;
	CHECK(fakegpu_mem(b.uuid, &used, &peak) == 0, "fake state");
	CHECK(peak <= 256 * MiB, "driver peak %llu MiB over the 256 MiB cap",
	      (unsigned long long)(peak / MiB));
	CHECK(used == 0, "driver still holds %llu bytes", (unsigned long long)used);
	CHECK(ooms > 0 && allocs > 0, "no contention: %d allocs, %d OOMs", allocs, ooms);
	CHECK(check(&b, "0", "256", out[0], sizeof(out[0])) == 0, "after the storm:\n%s", out[0]);
	t_note("%d allocations, %d refused at the cap, driver peak %llu MiB of 256", allocs, ooms,
	       (unsigned long long)(peak / MiB));
}

/* A container restarted into a new pid namespace: its first instance (pid 1 there) holds
 * 100 of 128 MiB and is killed; the next instance, pid 1 again in a new namespace with the
 * same shared dir, gets the whole cap. Measured on a real H100 before the slot locks: the
 * dead instance's memory stayed booked (its pid equalled ours, so it was never reaped). */
void test_mem_restart_new_pid_namespace(void)
{
	struct box b;
	char out[4096];
	int fd;
	const char *probe[] = { "/usr/bin/unshare", "-p", "-f", "--kill-child", "/bin/true", NULL };
	CHECK(t_run(NULL, probe, out, sizeof(out)) == 0,
	      "unshare -p -f does not run here (needs root: pid namespaces): %s", out);
	box(&b, 128);
	const char *hold_args[] = { "/usr/bin/unshare", "-p", "-f", "--kill-child", t_self(),
				    "child", "mem_hold", "100", NULL };
	pid_t pid = t_spawn(b.env, hold_args, &fd);
	char buf[64] = "";
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	buf[n > 0 ? n : 0] = '\0';
	CHECK(pid > 0 && strstr(buf, "held"), "holder in a new pid namespace did not start: %s", buf);
	long inner = atol(buf + strlen("held"));
	CHECK(inner > 0, "holder did not say its host pid: %s", buf);
	kill(pid, SIGKILL); /* --kill-child: the instance inside dies with it, */
	t_wait(pid);
	close(fd);
	/* but after unshare: until it is gone it rightly still holds its memory. */
	char proc[64];
	snprintf(proc, sizeof(proc), "/proc/%ld", inner);
	for (int i = 0; i < 1000 && access(proc, F_OK) == 0; i++)
		usleep(10 * 1000);
	CHECK(access(proc, F_OK) != 0, "the holder (host pid %ld) outlived unshare by 10 s", inner);
	const char *check_args[] = { "/usr/bin/unshare", "-p", "-f", "--kill-child", t_self(),
				     "child", "mem_check", "-1", "120", NULL };
	CHECK(t_run(b.env, check_args, out, sizeof(out)) == 0,
	      "pid 1 again in a new namespace could not take 120 of 128 MiB:\n%s", out);
}
