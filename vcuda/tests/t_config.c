/* t_config.c - config layout checks and fail-closed behaviour. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static void good_config(struct vcuda_config *c)
{
	memset(c, 0, sizeof(*c));
	c->magic = VCUDA_CONFIG_MAGIC;
	c->version = VCUDA_CONFIG_VERSION;
	c->size = sizeof(*c);
	c->policy = VCUDA_POLICY_FIXED;
	c->device_count = 2;
	strcpy(c->pod_uid, "6d1c7f0e-0000-4000-8000-000000000001");
	strcpy(c->pod_namespace, "team-a");
	strcpy(c->pod_name, "trainer-0");
	strcpy(c->container_name, "main");
	strcpy(c->shared_dir, "/run/vcuda");
	strcpy(c->devices[0].uuid, "GPU-8f1c2a3b-1111-4222-8333-944455566677");
	c->devices[0].memory_limit = 8ull << 30;
	c->devices[0].core_percent = 30;
	strcpy(c->devices[1].uuid, "GPU-8f1c2a3b-1111-4222-8333-944455566678");
	c->devices[1].memory_limit = 1ull << 30;
	c->devices[1].core_percent = 100;
	vcuda_config_seal(c);
}

/* each mutation must be rejected with an error naming the field */
static const char *reject(void (*mut)(struct vcuda_config *), int reseal, char *err)
{
	struct vcuda_config c;
	good_config(&c);
	mut(&c);
	if (reseal)
		vcuda_config_seal(&c);
	if (vcuda_config_validate(&c, err, 256) == 0)
		return "";
	return err;
}

static void m_flip(struct vcuda_config *c) { c->pod_name[3] ^= 1; }
static void m_magic(struct vcuda_config *c) { c->magic = 0x12345678; }
static void m_version(struct vcuda_config *c) { c->version = 2; }
static void m_core(struct vcuda_config *c) { c->devices[1].core_percent = 0; }
static void m_uuid(struct vcuda_config *c) { strcpy(c->devices[0].uuid, "GPU-aaa"); }
static void m_pad(struct vcuda_config *c) { c->pod_name[40] = 'x'; }
static void m_unused(struct vcuda_config *c) { c->devices[5].core_percent = 1; }
static void m_dup(struct vcuda_config *c) { strcpy(c->devices[1].uuid, c->devices[0].uuid); }
static void m_rel(struct vcuda_config *c) { strcpy(c->shared_dir, "run/vcuda"); }
static void m_mem(struct vcuda_config *c) { c->devices[0].memory_limit = 0; }
static void m_policy(struct vcuda_config *c) { c->policy = 3; }
static void m_count(struct vcuda_config *c) { c->device_count = 0; }

void test_config_layout(void)
{
	struct vcuda_config c;
	char err[256] = "";
	good_config(&c);
	CHECK(vcuda_config_validate(&c, err, sizeof(err)) == 0, "good config rejected: %s", err);
	CHECK(strstr(reject(m_flip, 0, err), "crc32"), "corrupt byte: %s", reject(m_flip, 0, err));
	CHECK(strstr(reject(m_magic, 1, err), "magic"), "magic");
	CHECK(strstr(reject(m_version, 1, err), "version: got 2, want 1"), "version");
	CHECK(strstr(reject(m_core, 1, err), "devices[1].core_percent"), "core");
	CHECK(strstr(reject(m_uuid, 1, err), "devices[0].uuid"), "uuid");
	CHECK(strstr(reject(m_pad, 1, err), "pod_name: want zero padding"), "padding");
	CHECK(strstr(reject(m_unused, 1, err), "devices[5]: unused entry"), "unused");
	CHECK(strstr(reject(m_dup, 1, err), "repeats devices[0]"), "duplicate");
	CHECK(strstr(reject(m_rel, 1, err), "shared_dir"), "relative dir");
	CHECK(strstr(reject(m_mem, 1, err), "devices[0].memory_limit"), "memory");
	CHECK(strstr(reject(m_policy, 1, err), "policy"), "policy");
	CHECK(strstr(reject(m_count, 1, err), "device_count"), "count");
}

/* child: "refused" -> every entry point fails; "ok <MiB>" -> works, total = MiB */
int child_config_probe(int argc, char **argv)
{
	CCHECK(argc >= 1, "mode");
	if (strcmp(argv[0], "refused") == 0) {
		CUdeviceptr p;
		void *fn = NULL;
		nvmlMemory_t m;
		CCHECK(cuInit(0) != CUDA_SUCCESS, "cuInit passed");
		CCHECK(cuMemAlloc_v2(&p, 1 << 20) != CUDA_SUCCESS, "cuMemAlloc passed");
		CCHECK(cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS,
		       "launch passed");
		CCHECK(cuGetProcAddress("cuMemAlloc", &fn, 12000, 0) != CUDA_SUCCESS,
		       "cuGetProcAddress passed");
		nvmlDevice_t h;
		CCHECK(nvmlInit_v2() == NVML_SUCCESS, "nvmlInit (not hooked)");
		CCHECK(nvmlDeviceGetHandleByIndex_v2(0, &h) == NVML_SUCCESS, "nvml handle");
		CCHECK(nvmlDeviceGetMemoryInfo(h, &m) != NVML_SUCCESS, "nvml memory info passed");
		printf("refused as expected\n");
		return 0;
	}
	size_t f, t;
	t_ctx(0);
	CCHECK(cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS, "cuMemGetInfo");
	CCHECK(t == strtoull(argv[1], NULL, 10) * MiB, "total %zu", t);
	printf("ok\n");
	return 0;
}

static int count_lines(const char *out, const char *prefix)
{
	int n = 0;
	for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		n += strncmp(l, prefix, strlen(prefix)) == 0;
	return n;
}

static int probe(const char *cfg, const char *extra1, const char *extra2, const char *mode,
		 char *out, size_t n)
{
	char uuid[64], devs[128], cfgenv[300];
	t_uuid(uuid);
	snprintf(devs, sizeof(devs), "FAKEGPU_DEVICES=%s:4096", uuid);
	snprintf(cfgenv, sizeof(cfgenv), "VCUDA_CONFIG=%s", cfg);
	char vdevs[160];
	snprintf(vdevs, sizeof(vdevs), "VCUDA_DEVICES=%s:300:50", uuid);
	const char *env[] = { devs, cfgenv, vdevs, extra1, extra2, NULL };
	const char *args[] = { "config_probe", mode, "300", NULL };
	return t_run(env, args, out, n);
}

void test_config_missing_fails_closed(void)
{
	char out[8192], cfg[300];
	snprintf(cfg, sizeof(cfg), "%s/missing.config", t_tmp());
	int rc = probe(cfg, NULL, NULL, "refused", out, sizeof(out));
	CHECK(rc == 0, "child exit %d:\n%s", rc, out);
	CHECK(count_lines(out, "vcuda:") == 1, "want exactly one message:\n%s", out);
	CHECK(strstr(out, cfg) && strstr(out, "No such file") && strstr(out, "recreate the pod"),
	      "message must name the file, the cause and the fix:\n%s", out);
}

void test_config_corrupt_fails_closed(void)
{
	struct t_container ct;
	char uuid[64], out[8192];
	t_uuid(uuid);
	t_container(&ct, VCUDA_POLICY_FIXED);
	t_container_dev(&ct, uuid, 300, 50);
	CHECK(t_container_write(&ct) == 0, "write");
	int fd = open(ct.cfg, O_RDWR);
	char b;
	CHECK(pread(fd, &b, 1, 160) == 1, "read");
	b ^= 0x20;
	CHECK(pwrite(fd, &b, 1, 160) == 1, "write");
	close(fd);
	int rc = probe(ct.cfg, NULL, NULL, "refused", out, sizeof(out));
	CHECK(rc == 0, "child exit %d:\n%s", rc, out);
	CHECK(count_lines(out, "vcuda:") == 1, "want exactly one message:\n%s", out);
	CHECK(strstr(out, ct.cfg) && strstr(out, "crc32"), "message:\n%s", out);
}

void test_config_env_fallback_only_when_allowed(void)
{
	char out[8192], cfg[300], dir[300];
	snprintf(cfg, sizeof(cfg), "%s/none.config", t_tmp());
	snprintf(dir, sizeof(dir), "VCUDA_SHARED_DIR=%s", t_tmp());
	int rc = probe(cfg, dir, NULL, "refused", out, sizeof(out));
	CHECK(rc == 0, "env limits used without VCUDA_ALLOW_ENV_CONFIG=1 (exit %d):\n%s", rc, out);
	rc = probe(cfg, dir, "VCUDA_ALLOW_ENV_CONFIG=1", "ok", out, sizeof(out));
	CHECK(rc == 0, "env fallback (exit %d):\n%s", rc, out);
	CHECK(count_lines(out, "vcuda:") == 0, "no message expected:\n%s", out);
}
