/* t_workload.c - the workload tool under LD_PRELOAD=libvcuda.so, as the e2e emulator runs it. */
#include <libgen.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static double json_num(const char *js, const char *key)
{
	char k[64];
	snprintf(k, sizeof(k), "\"%s\":", key);
	const char *p = strstr(js, k);
	return p ? atof(p + strlen(k)) : -1;
}

void test_workload_tool_json(void)
{
	struct t_container ct;
	char uuid[64], devs[128], cfg[300], pre[600], lib[600], bin[600], out[8192], self[512];
	snprintf(self, sizeof(self), "%s", t_self());
	const char *dir = dirname(self);
	t_uuid(uuid);
	t_container(&ct, VCUDA_POLICY_FIXED);
	t_container_dev(&ct, uuid, 1000, 30);
	CHECK(t_container_write(&ct) == 0, "config");
	snprintf(devs, sizeof(devs), "FAKEGPU_DEVICES=%s:81920", uuid);
	snprintf(cfg, sizeof(cfg), "VCUDA_CONFIG=%s", ct.cfg);
	snprintf(pre, sizeof(pre), "LD_PRELOAD=%s/libvcuda.so", dir);
	snprintf(lib, sizeof(lib), "LD_LIBRARY_PATH=%s/fake", dir);
	snprintf(bin, sizeof(bin), "%s/workload", dir);
	/* sanitizer builds: the runtime is loaded by the program, after the preload */
	const char *env[] = { devs, cfg, pre, lib, "FAKEGPU_NS_PER_BLOCK=1000",
			      "ASAN_OPTIONS=verify_asan_link_order=0", NULL };
	const char *args[] = { bin, "--chunk-mib", "64", "--seconds", "1.6", NULL };
	const char *js = NULL;
	for (int attempt = 1; attempt <= 3; attempt++) { /* the share is real time: see t_compute.c */
		int rc = t_run(env, args, out, sizeof(out));
		CHECK(rc == 0, "exit %d:\n%s", rc, out);
		js = strstr(out, "{\"ok\":true");
		CHECK(js, "no JSON line:\n%s", out);
		t_note("%.*s", (int)strcspn(js, "\n"), js);
		if (fabs(json_num(js, "util_share") - 0.30) <= 0.05)
			break;
	}
	CHECK(strstr(js, uuid), "device UUID missing");
	CHECK(json_num(js, "cuda_total_mib") == 1000, "cuMemGetInfo total");
	CHECK(json_num(js, "nvml_total_mib") == 1000, "NVML total");
	CHECK(json_num(js, "allocated_bytes") == 960.0 * MiB, "allocated (15 chunks of 64 fit)");
	double share = json_num(js, "util_share");
	CHECK(fabs(share - 0.30) <= 0.05, "util share %.3f, want 0.30 +- 0.05", share);
}
