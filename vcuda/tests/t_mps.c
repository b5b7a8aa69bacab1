/* t_mps.c - MPS mode: the CUDA_MPS_* variables libvcuda sets from the config. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../include/vcuda_mps.h"
#include "harness.h"

void test_mps_env_rules(void)
{
	static const struct {
		const char *name;
		unsigned cfg;
		const char *cur;
		double want;
	} threads[] = {
		{ "unset: the config's", 30, NULL, 30 },
		{ "lower: kept", 30, "20", 20 },
		{ "lower, fractional: kept", 30, "12.5", 12.5 },
		{ "higher: the config's", 30, "80", 30 },
		{ "equal: the config's", 30, "30", 30 },
		{ "zero: the config's", 30, "0", 30 },
		{ "negative: the config's", 30, "-5", 30 },
		{ "junk: the config's", 30, "20abc", 30 },
		{ "empty: the config's", 30, "", 30 },
	};
	for (size_t i = 0; i < sizeof(threads) / sizeof(threads[0]); i++) {
		double got = vcuda_mps_threads(threads[i].cfg, threads[i].cur);
		CHECK(got == threads[i].want, "threads %s: got %g, want %g", threads[i].name, got,
		      threads[i].want);
	}
	struct vcuda_config c;
	memset(&c, 0, sizeof(c));
	c.device_count = 2;
	c.devices[0].memory_limit = 4096 * MiB;
	c.devices[1].memory_limit = 2048 * MiB;
	static const struct {
		const char *name, *cur, *want;
	} pinned[] = {
		{ "unset: the config's caps", NULL, "0=4096M,1=2048M" },
		{ "lower for one device: kept there", "1=1G", "0=4096M,1=1024M" },
		{ "higher: the config's", "0=64G,1=3000M", "0=4096M,1=2048M" },
		{ "lower for both", "0=100M,1=200m", "0=100M,1=200M" },
		{ "junk: the config's", "0=lots", "0=4096M,1=2048M" },
		{ "no unit: the config's", "0=100", "0=4096M,1=2048M" },
	};
	for (size_t i = 0; i < sizeof(pinned) / sizeof(pinned[0]); i++) {
		char out[128];
		CHECK(vcuda_mps_pinned(&c, pinned[i].cur, out, sizeof(out)) == 0, "%s: short",
		      pinned[i].name);
		CHECK(strcmp(out, pinned[i].want) == 0, "pinned %s: got %s, want %s", pinned[i].name,
		      out, pinned[i].want);
	}
	char tiny[16];
	volatile size_t tiny_len = 6; /* "0=4096M" does not fit */
	CHECK(vcuda_mps_pinned(&c, NULL, tiny, tiny_len) == -1, "a short buffer must fail");
}

/* child: optionally raises its own percentage (argv[0] != "-"), then cuInit, then prints the
 * three variables as the driver would read them */
int child_mps_env(int argc, char **argv)
{
	CCHECK(argc >= 1, "mode");
	(void)cuInit(0); /* first call: libvcuda reads its config and applies it */
	if (strcmp(argv[0], "-") != 0)
		setenv(VCUDA_ENV_MPS_THREADS, argv[0], 1); /* the process raises it... */
	CCHECK(cuInit(0) == CUDA_SUCCESS, "cuInit"); /* ...and the driver's cuInit reads it */
	const char *vars[] = { VCUDA_ENV_MPS_PIPE, VCUDA_ENV_MPS_THREADS, VCUDA_ENV_MPS_PINNED };
	for (int i = 0; i < 3; i++) {
		const char *v = getenv(vars[i]);
		printf("%s=%s\n", vars[i], v ? v : "(unset)");
	}
	return 0;
}

static int run_mps(unsigned pct, const char *own, const char *raise, char *out, size_t n)
{
	struct t_container ct;
	char uuid[64], devs[128], cfgenv[300], ownenv[128];
	t_uuid(uuid);
	t_container(&ct, VCUDA_POLICY_NONE);
	t_container_dev(&ct, uuid, 4096, 100);
	ct.c.mps_thread_percent = pct;
	if (t_container_write(&ct) != 0)
		return -1;
	snprintf(devs, sizeof(devs), "FAKEGPU_DEVICES=%s:16384", uuid);
	snprintf(cfgenv, sizeof(cfgenv), "VCUDA_CONFIG=%s", ct.cfg);
	snprintf(ownenv, sizeof(ownenv), "%s=%s", VCUDA_ENV_MPS_THREADS, own);
	const char *env[] = { devs, cfgenv, "CUDA_MPS_PIPE_DIRECTORY=/tmp/elsewhere",
			      "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=64G", ownenv, NULL };
	const char *args[] = { "mps_env", raise, NULL };
	return t_run(env, args, out, n);
}

void test_mps_env_applied(void)
{
	char out[4096];
	int rc = run_mps(30, "80", "95", out, sizeof(out));
	CHECK(rc == 0, "child exit %d:\n%s", rc, out);
	CHECK(strstr(out, "CUDA_MPS_PIPE_DIRECTORY=" VCUDA_MPS_PIPE_DIR "\n"), "pipe dir:\n%s", out);
	CHECK(strstr(out, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30\n"),
	      "a process that raised its percentage (80, then 95) must get its share, 30:\n%s", out);
	CHECK(strstr(out, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M\n"), "pinned limit:\n%s", out);

	rc = run_mps(30, "20", "-", out, sizeof(out));
	CHECK(rc == 0, "child exit %d:\n%s", rc, out);
	CHECK(strstr(out, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=20\n"), "a lower own value is kept:\n%s",
	      out);

	rc = run_mps(0, "80", "-", out, sizeof(out));
	CHECK(rc == 0, "child exit %d:\n%s", rc, out);
	CHECK(strstr(out, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=80\n") &&
		      strstr(out, "CUDA_MPS_PIPE_DIRECTORY=/tmp/elsewhere\n"),
	      "a time-sliced config leaves the MPS variables alone:\n%s", out);
}

/* --- the fake driver as an MPS client (fake/fake_mps.h) --- */

double fakegpu_mps_speed(double self, const double *others, int n);
int fakegpu_mps_last(int dev, uint64_t *ns);

void test_mps_fake_speed(void)
{
	static const struct {
		const char *name;
		double self, others[3];
		int n;
		double want;
	} cases[] = {
		/* alone: the figures measured on a real H100, interpolated between them */
		{ "alone 30%: 40% of solo", 30, { 0 }, 0, 0.40 },
		{ "alone 50%: 66% of solo", 50, { 0 }, 0, 0.66 },
		{ "alone 100%: solo", 100, { 0 }, 0, 1.00 },
		{ "alone 75%: between 66 and 100", 75, { 0 }, 0, 0.83 },
		/* under contention the SM fractions split */
		{ "30 beside 60: 30%", 30, { 60 }, 1, 0.30 },
		{ "60 beside 30: 60%", 60, { 30 }, 1, 0.60 },
		{ "50 beside 50: 50%", 50, { 50 }, 1, 0.50 },
		{ "20 beside 30 and 40: 20%", 20, { 30, 40 }, 2, 0.20 },
		{ "60 beside 60 (oversubscribed): half", 60, { 60 }, 1, 0.50 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		double got = fakegpu_mps_speed(cases[i].self, cases[i].others, cases[i].n);
		CHECK(got > cases[i].want - 0.005 && got < cases[i].want + 0.005, "%s: got %.3f, want %.2f",
		      cases[i].name, got, cases[i].want);
	}
}

/* child: "kernel" launches 1000 blocks, syncs, prints the kernel's fake duration; "hold"
 * launches a long kernel, says "ready" and stays alive 3 s; "alloc <MiB>" prints the result */
int child_mps_client(int argc, char **argv)
{
	CCHECK(argc >= 1, "mode");
	CUmodule m;
	CUfunction f;
	t_ctx(0);
	CCHECK(cuModuleLoadData(&m, "fake") == CUDA_SUCCESS, "module");
	CCHECK(cuModuleGetFunction(&f, m, "burn") == CUDA_SUCCESS, "function");
	if (strcmp(argv[0], "alloc") == 0) {
		CUdeviceptr p;
		CUresult rc = cuMemAlloc_v2(&p, (size_t)atoi(argv[1]) * MiB);
		printf("alloc=%d\n", rc);
		return 0;
	}
	unsigned blocks = strcmp(argv[0], "hold") == 0 ? 2000000 : 1000;
	CCHECK(cuLaunchKernel(f, blocks, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL) == CUDA_SUCCESS, "launch");
	uint64_t ns = 0;
	CCHECK(fakegpu_mps_last(0, &ns) == 0, "not an MPS client");
	if (strcmp(argv[0], "hold") == 0) {
		printf("ready\n");
		fflush(stdout);
		sleep(3);
		return 0;
	}
	CCHECK(cuCtxSynchronize() == CUDA_SUCCESS, "sync");
	printf("kernel_ns=%llu\n", (unsigned long long)ns);
	return 0;
}

/* an MPS container on the fake: its GPU's pipe dir (a file stands for the daemon's socket),
 * seen at the fixed container path through FAKEGPU_MPS_MOUNT */
static int mps_container(struct t_container *ct, const char *uuid, unsigned pct, char *mount_env,
			 size_t n)
{
	char pipe[300], sock[340];
	snprintf(pipe, sizeof(pipe), "%s/mps-%s", t_tmp(), uuid);
	snprintf(sock, sizeof(sock), "%s/control", pipe);
	mkdir(pipe, 0755);
	FILE *f = fopen(sock, "w");
	if (!f)
		return -1;
	fclose(f);
	snprintf(mount_env, n, "FAKEGPU_MPS_MOUNT=%s:%s", VCUDA_MPS_PIPE_DIR, pipe);
	t_container(ct, VCUDA_POLICY_NONE);
	t_container_dev(ct, uuid, 4096, 100);
	ct->c.mps_thread_percent = pct;
	return t_container_write(ct);
}

static unsigned long long kernel_ns(const char *out)
{
	const char *p = strstr(out, "kernel_ns=");
	return p ? strtoull(p + 10, NULL, 10) : 0;
}

void test_mps_fake_client(void)
{
	struct t_container a, b;
	char uuid[64], devs[128], cfga[300], cfgb[300], mnt[400], out[4096];
	t_uuid(uuid);
	CHECK(mps_container(&a, uuid, 30, mnt, sizeof(mnt)) == 0, "container a");
	CHECK(mps_container(&b, uuid, 60, mnt, sizeof(mnt)) == 0, "container b");
	snprintf(devs, sizeof(devs), "FAKEGPU_DEVICES=%s:16384", uuid);
	snprintf(cfga, sizeof(cfga), "VCUDA_CONFIG=%s", a.cfg);
	snprintf(cfgb, sizeof(cfgb), "VCUDA_CONFIG=%s", b.cfg);
	/* the process asks 90%: libvcuda holds it to its container's 30% */
	const char *env_a[] = { devs, cfga, mnt, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=90", NULL };
	const char *kernel[] = { "mps_client", "kernel", NULL };
	int rc = t_run(env_a, kernel, out, sizeof(out));
	CHECK(rc == 0, "child exit %d:\n%s", rc, out);
	/* 1000 blocks x 1000 ns = 1 ms solo; alone at 30% the client runs at 40% of solo */
	CHECK(kernel_ns(out) == 2500000, "alone at 30%%: want 2.5 ms, got:\n%s", out);

	/* b (60%) keeps a long kernel running: a's SM fraction splits, 30 of 100 */
	const char *env_b[] = { devs, cfgb, mnt, NULL };
	const char *hold[] = { "mps_client", "hold", NULL };
	int fd;
	pid_t holder = t_spawn(env_b, hold, &fd);
	CHECK(holder > 0, "spawn");
	char ready[64] = "";
	ssize_t got = read(fd, ready, sizeof(ready) - 1);
	CHECK(got > 0 && strstr(ready, "ready"), "holder: %s", got > 0 ? ready : "(nothing)");
	rc = t_run(env_a, kernel, out, sizeof(out));
	close(fd);
	int hrc = t_wait(holder);
	CHECK(rc == 0 && hrc == 0, "child exit %d, holder %d:\n%s", rc, hrc, out);
	CHECK(kernel_ns(out) == 3333333, "30%% beside 60%%: want 3.33 ms (30%% of solo), got:\n%s", out);

	/* a process without the MPS mount is no MPS client: the GPU is time-sliced for it */
	const char *env_plain[] = { devs, cfga, NULL };
	rc = t_run(env_plain, kernel, out, sizeof(out));
	CHECK(rc != 0 && strstr(out, "not an MPS client"), "without the daemon: %d\n%s", rc, out);
}

void test_mps_fake_pinned_limit(void)
{
	struct t_container a;
	char uuid[64], devs[128], cfga[300], mnt[400], out[4096];
	t_uuid(uuid);
	CHECK(mps_container(&a, uuid, 30, mnt, sizeof(mnt)) == 0, "container");
	snprintf(devs, sizeof(devs), "FAKEGPU_DEVICES=%s:16384", uuid);
	snprintf(cfga, sizeof(cfga), "VCUDA_CONFIG=%s", a.cfg);
	/* the process lowers its own pinned limit to 64 MiB (allowed): the fake driver holds it */
	const char *env[] = { devs, cfga, mnt, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=64M", NULL };
	const char *small[] = { "mps_client", "alloc", "32", NULL };
	const char *large[] = { "mps_client", "alloc", "128", NULL };
	int rc = t_run(env, small, out, sizeof(out));
	CHECK(rc == 0 && strstr(out, "alloc=0\n"), "32 MiB under a 64 MiB pinned limit: %d\n%s", rc, out);
	rc = t_run(env, large, out, sizeof(out));
	CHECK(rc == 0 && strstr(out, "alloc=2\n"), "128 MiB over a 64 MiB pinned limit must be out of memory: %d\n%s", rc, out);
}
