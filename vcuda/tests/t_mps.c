/* t_mps.c - MPS mode: the CUDA_MPS_* variables libvcuda sets from the config. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
