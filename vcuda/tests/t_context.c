/* t_context.c - CUDA contexts and their limits counted against the cap, on a fake driver whose
 * contexts take device memory as a real driver's do (FAKEGPU_CONTEXT_MIB). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static uint64_t free_now(void)
{
	size_t f, t;
	CCHECK(cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS, "cuMemGetInfo");
	return f;
}

static uint64_t fake_used(const char *uuid)
{
	uint64_t used, peak;
	CCHECK(fakegpu_mem(uuid, &used, &peak) == 0, "fake state");
	return used;
}

#define CHECK_FREE(mib, what) \
	CCHECK(free_now() == (mib) * MiB, "%s: free %llu MiB, want %d", what, \
	       (unsigned long long)(free_now() / MiB), (int)(mib))

/* args: uuid. Cap 1000 MiB, contexts 300 MiB: every path that takes device memory for a
 * context is counted, and the fake GPU never holds more than the cap for this container. */
int child_ctx_paths(int argc, char **argv)
{
	CCHECK(argc == 1, "args: uuid");
	const char *uuid = argv[0];
	CUdevice d;
	CUcontext primary, extra, extra2;
	CUdeviceptr p, q;
	CCHECK(cuInit(0) == CUDA_SUCCESS, "cuInit");
	CCHECK(cuDeviceGet(&d, 0) == CUDA_SUCCESS, "cuDeviceGet");
	CCHECK(cuDevicePrimaryCtxRetain(&primary, d) == CUDA_SUCCESS, "retain");
	CCHECK(cuCtxSetCurrent(primary) == CUDA_SUCCESS, "set current");
	CHECK_FREE(700, "primary context booked");
	CCHECK(fake_used(uuid) == 300 * MiB, "the fake's context");
	CCHECK(cuDevicePrimaryCtxRetain(&primary, d) == CUDA_SUCCESS, "second retain");
	CHECK_FREE(700, "a second retain books nothing more");

	CCHECK(cuMemAlloc_v2(&p, 700 * MiB) == CUDA_SUCCESS, "700 MiB beside the context");
	CCHECK(cuMemAlloc_v2(&q, 1 * MiB) == CUDA_ERROR_OUT_OF_MEMORY, "over the cap");
	CCHECK(cuCtxCreate_v2(&extra, 0, d) == CUDA_ERROR_OUT_OF_MEMORY, "a context over the cap");
	CCHECK(fake_used(uuid) <= 1000 * MiB, "the GPU holds %llu MiB for a 1000 MiB cap",
	       (unsigned long long)(fake_used(uuid) / MiB));
	CCHECK(cuMemFree_v2(p) == CUDA_SUCCESS, "free");

	CCHECK(cuCtxCreate_v2(&extra, 0, d) == CUDA_SUCCESS, "cuCtxCreate");
	CHECK_FREE(400, "a created context");
	CCHECK(cuCtxCreate(&extra2, 0, d) == CUDA_SUCCESS, "cuCtxCreate (v1)");
	CHECK_FREE(100, "two created contexts");
	CCHECK(cuCtxDestroy_v2(extra2) == CUDA_SUCCESS, "destroy");
	CCHECK(cuCtxDestroy(extra) == CUDA_SUCCESS, "destroy (v1)");
	CCHECK(cuCtxSetCurrent(primary) == CUDA_SUCCESS, "current");
	CHECK_FREE(700, "destroyed contexts given back");
	CCHECK(fake_used(uuid) == 300 * MiB, "the fake gave them back too");

	CCHECK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, (8 + 100) * MiB) == CUDA_SUCCESS, "heap");
	CHECK_FREE(600, "heap above the default");
	/* stack: 2 KiB more per thread x 132 SMs x 2048 threads = 528 MiB */
	CCHECK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 1024 + 2048) == CUDA_SUCCESS, "stack");
	CHECK_FREE(72, "stack above the default");
	CCHECK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 1024 + 4096) == CUDA_ERROR_OUT_OF_MEMORY,
	       "a stack over the cap");
	CHECK_FREE(72, "a refused limit books nothing");
	CCHECK(fake_used(uuid) <= 1000 * MiB, "the GPU holds %llu MiB for a 1000 MiB cap",
	       (unsigned long long)(fake_used(uuid) / MiB));
	CCHECK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 1024) == CUDA_SUCCESS, "stack back");
	CCHECK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 8 * MiB) == CUDA_SUCCESS, "heap back");
	CHECK_FREE(700, "limits back to the defaults");
	CCHECK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, (8 + 100) * MiB) == CUDA_SUCCESS, "heap");
	CCHECK(cuDevicePrimaryCtxReset_v2(d) == CUDA_SUCCESS, "reset");
	CHECK_FREE(700, "a reset gives the limits back, the context stays");
	CCHECK(fake_used(uuid) == 300 * MiB, "the fake after a reset");

	CCHECK(cuDevicePrimaryCtxRelease(d) == CUDA_SUCCESS, "release");
	CHECK_FREE(700, "one retain left");
	CCHECK(cuDevicePrimaryCtxRelease_v2(d) == CUDA_SUCCESS, "last release");
	CHECK_FREE(1000, "primary context given back");
	CCHECK(fake_used(uuid) == 0, "the fake's primary context given back");
	return 0;
}

/* args: none. Opens the primary context, says "held", waits to be killed. */
int child_ctx_hold(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	CUdevice d;
	CUcontext c;
	CCHECK(cuInit(0) == CUDA_SUCCESS, "cuInit");
	CCHECK(cuDeviceGet(&d, 0) == CUDA_SUCCESS, "cuDeviceGet");
	CUresult rc = cuDevicePrimaryCtxRetain(&c, d);
	printf(rc == CUDA_SUCCESS ? "held\n" : "refused %d\n", rc);
	fflush(stdout);
	if (rc != CUDA_SUCCESS)
		return 3;
	for (;;)
		pause();
}

struct ctxbox {
	struct t_container ct;
	char uuid[64], devs[128], cfg[300];
	const char *env[4];
};

static void ctxbox(struct ctxbox *b, uint64_t cap_mib, unsigned context_mib)
{
	t_uuid(b->uuid);
	t_container(&b->ct, VCUDA_POLICY_NONE);
	t_container_dev(&b->ct, b->uuid, cap_mib, 100);
	b->ct.c.devices[0].context_mib = context_mib;
	t_container_write(&b->ct);
	snprintf(b->devs, sizeof(b->devs), "FAKEGPU_DEVICES=%s:81920", b->uuid);
	snprintf(b->cfg, sizeof(b->cfg), "VCUDA_CONFIG=%s", b->ct.cfg);
	b->env[0] = b->devs;
	b->env[1] = b->cfg;
	b->env[2] = "FAKEGPU_CONTEXT_MIB=300";
	b->env[3] = NULL;
}

void test_context_counted_on_every_path(void)
{
	struct ctxbox b;
	char out[4096];
	ctxbox(&b, 1000, 300);
	const char *args[] = { "ctx_paths", b.uuid, NULL };
	CHECK(t_run(b.env, args, out, sizeof(out)) == 0, "child:\n%s", out);
	uint64_t used, peak;
	CHECK(fakegpu_mem(b.uuid, &used, &peak) == 0, "fake state");
	CHECK(peak <= 1000 * MiB, "the GPU held %llu MiB at peak for a 1000 MiB cap",
	      (unsigned long long)(peak / MiB));
}

/* Reads fd until one of the words appears or the writer closes it. */
static void read_until(int fd, char *out, size_t n, const char *a, const char *b)
{
	size_t len = 0;
	ssize_t r;
	out[0] = '\0';
	while (!strstr(out, a) && !strstr(out, b) && len < n - 1 &&
	       (r = read(fd, out + len, n - 1 - len)) > 0) {
		len += (size_t)r;
		out[len] = '\0';
	}
}

/* Three processes of one container, 300 MiB contexts, 800 MiB cap: two fit, the third is
 * refused; a killed holder's context is given back to the next process. */
void test_context_shared_cap_across_processes(void)
{
	struct ctxbox b;
	char out[512];
	int fd[3];
	pid_t pid[3];
	ctxbox(&b, 800, 300);
	const char *args[] = { "ctx_hold", NULL };
	for (int i = 0; i < 3; i++) {
		pid[i] = t_spawn(b.env, args, &fd[i]);
		read_until(fd[i], out, sizeof(out), "held", "refused 2");
		if (i < 2)
			CHECK(strstr(out, "held"), "process %d: %s", i, out);
		else
			CHECK(strstr(out, "refused 2"), "third context over the cap: %s", out);
	}
	CHECK(t_wait(pid[2]) == 3, "third process exit");
	close(fd[2]);
	kill(pid[0], SIGKILL);
	t_wait(pid[0]);
	close(fd[0]);
	pid[2] = t_spawn(b.env, args, &fd[2]);
	read_until(fd[2], out, sizeof(out), "held", "refused");
	CHECK(strstr(out, "held"), "after a holder was killed: %s", out);
	for (int i = 1; i < 3; i++) {
		kill(pid[i], SIGKILL);
		t_wait(pid[i]);
		close(fd[i]);
	}
}

/* A config whose context does not fit in the cap is refused, naming the field. */
void test_context_larger_than_cap_refused(void)
{
	struct vcuda_config c;
	struct t_container ct;
	char uuid[64], err[256];
	t_uuid(uuid);
	t_container(&ct, VCUDA_POLICY_NONE);
	t_container_dev(&ct, uuid, 512, 100);
	c = ct.c;
	c.devices[0].context_mib = 512;
	vcuda_config_seal(&c);
	CHECK(vcuda_config_validate(&c, err, sizeof(err)) != 0, "accepted");
	CHECK(strstr(err, "devices[0].context_mib"), "error: %s", err);
	c.devices[0].context_mib = 511;
	vcuda_config_seal(&c);
	CHECK(vcuda_config_validate(&c, err, sizeof(err)) == 0, "511 of 512 MiB: %s", err);
}
