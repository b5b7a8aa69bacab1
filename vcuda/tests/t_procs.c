/*
 * t_procs.c - the fake NVML's running processes, as a node agent reads them: each live
 * process with its pid in the reader's (host) namespace and the device memory it holds,
 * also for a process in its own pid namespace (a container), where it is pid 1; and its
 * per-process utilization samples, keyed by the same host pids even when two containers'
 * processes have the same pid inside.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

/* Prints "pid MiB" per process on device 0, after checking that the v1, v2 and v3 entry
 * points and the size protocol (count query, too small a buffer) agree. */
int child_nvml_procs(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	nvmlDevice_t h;
	CCHECK(nvmlInit_v2() == NVML_SUCCESS, "nvmlInit");
	CCHECK(nvmlDeviceGetHandleByIndex_v2(0, &h) == NVML_SUCCESS, "handle");
	unsigned n = 0;
	nvmlReturn_t rc = nvmlDeviceGetComputeRunningProcesses_v3(h, &n, NULL);
	CCHECK(rc == NVML_SUCCESS || rc == NVML_ERROR_INSUFFICIENT_SIZE, "count: %d", rc);
	nvmlProcessInfo_t v3[64], v2[64];
	nvmlProcessInfo_v1_t v1[64];
	unsigned n3 = 64, n2 = 64, n1 = 64;
	CCHECK(nvmlDeviceGetComputeRunningProcesses_v3(h, &n3, v3) == NVML_SUCCESS, "v3");
	CCHECK(nvmlDeviceGetComputeRunningProcesses_v2(h, &n2, v2) == NVML_SUCCESS, "v2");
	CCHECK(nvmlDeviceGetComputeRunningProcesses(h, &n1, v1) == NVML_SUCCESS, "v1");
	CCHECK(n3 == n && n2 == n && n1 == n, "counts %u %u %u, query said %u", n3, n2, n1, n);
	if (n > 0) {
		unsigned small = n - 1;
		CCHECK(nvmlDeviceGetComputeRunningProcesses_v3(h, &small, v3) ==
			       NVML_ERROR_INSUFFICIENT_SIZE && small == n,
		       "too small a buffer: count %u", small);
	}
	for (unsigned i = 0; i < n; i++) {
		CCHECK(v2[i].pid == v3[i].pid && v1[i].pid == v3[i].pid &&
			       v1[i].usedGpuMemory == v3[i].usedGpuMemory,
		       "entry %u differs between versions", i);
		printf("%u %llu\n", v3[i].pid, v3[i].usedGpuMemory / MiB);
	}
	return 0;
}

/* whether out has the line "<pid> <mib>" */
static int listed(const char *out, long pid, unsigned long long mib)
{
	char want[64];
	int n = snprintf(want, sizeof(want), "%ld %llu\n", pid, mib);
	for (const char *l = out; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
		if (strncmp(l, want, (size_t)n) == 0)
			return 1;
	return 0;
}

static pid_t start_hold(const char *const *env, const char *const *args, int *fd, long *host)
{
	pid_t pid = t_spawn(env, args, fd);
	char buf[64] = "";
	ssize_t n = read(*fd, buf, sizeof(buf) - 1);
	buf[n > 0 ? n : 0] = '\0';
	*host = strstr(buf, "held") ? atol(buf + strlen("held")) : 0;
	return pid;
}

void test_nvml_running_processes_host_pids(void)
{
	char out[4096], uuid[64], devs[128], cfg[300];
	struct t_container ct;
	const char *probe[] = { "/usr/bin/unshare", "-p", "-f", "--kill-child", "/bin/true", NULL };
	CHECK(t_run(NULL, probe, out, sizeof(out)) == 0,
	      "unshare -p -f does not run here (needs root: pid namespaces): %s", out);
	t_uuid(uuid);
	t_container(&ct, VCUDA_POLICY_NONE);
	t_container_dev(&ct, uuid, 4096, 100);
	t_container_write(&ct);
	snprintf(devs, sizeof(devs), "FAKEGPU_DEVICES=%s:81920", uuid);
	snprintf(cfg, sizeof(cfg), "VCUDA_CONFIG=%s", ct.cfg);
	const char *env[] = { devs, cfg, NULL };
	int fa, fb;
	long host_a, host_b;
	const char *a_args[] = { "mem_hold", "100", NULL };
	pid_t a = start_hold(env, a_args, &fa, &host_a);
	CHECK(host_a == a, "host holder said %ld, spawned %d", host_a, (int)a);
	const char *b_args[] = { "/usr/bin/unshare", "-p", "-f", "--kill-child", t_self(),
				 "child", "mem_hold", "60", NULL };
	pid_t b = start_hold(env, b_args, &fb, &host_b);
	CHECK(host_b > 0 && host_b != b, "holder in a pid namespace said host pid %ld", host_b);

	const char *q[] = { "nvml_procs", NULL };
	CHECK(t_run(env, q, out, sizeof(out)) == 0, "query:\n%s", out);
	CHECK(listed(out, host_a, 100), "host process %ld with 100 MiB not listed:\n%s", host_a, out);
	CHECK(listed(out, host_b, 60), "namespaced process (pid 1 inside, host %ld) with 60 MiB not listed:\n%s",
	      host_b, out);

	uint64_t used, peak, after;
	CHECK(fakegpu_mem(uuid, &used, &peak) == 0 && used == 160 * MiB, "fake GPU holds %llu MiB",
	      (unsigned long long)(used / MiB));
	kill(b, SIGKILL); /* -9: the holder gives nothing back itself */
	t_wait(b);
	close(fb);
	char proc[64];
	snprintf(proc, sizeof(proc), "/proc/%ld", host_b);
	for (int i = 0; i < 1000 && access(proc, F_OK) == 0; i++)
		usleep(10 * 1000);
	CHECK(t_run(env, q, out, sizeof(out)) == 0, "query after kill:\n%s", out);
	CHECK(listed(out, host_a, 100) && !listed(out, host_b, 60), "after the kill:\n%s", out);
	CHECK(fakegpu_mem(uuid, &after, &peak) == 0 && after == 100 * MiB,
	      "the killed process's 60 MiB not reaped: the fake GPU holds %llu MiB",
	      (unsigned long long)(after / MiB));
	kill(a, SIGKILL);
	t_wait(a);
	close(fa);
}

/* Prints "pid smUtil" per per-process utilization sample of device 0 (all it keeps). */
int child_nvml_proc_util(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	nvmlDevice_t h;
	CCHECK(nvmlInit_v2() == NVML_SUCCESS, "nvmlInit");
	CCHECK(nvmlDeviceGetHandleByIndex_v2(0, &h) == NVML_SUCCESS, "handle");
	nvmlProcessUtilizationSample_t s[256];
	unsigned n = 256;
	nvmlReturn_t rc = nvmlDeviceGetProcessUtilization(h, s, &n, 1);
	CCHECK(rc == NVML_SUCCESS || rc == NVML_ERROR_NOT_FOUND, "per-process utilization: %d", rc);
	for (unsigned i = 0; rc == NVML_SUCCESS && i < n; i++)
		printf("%u %u\n", s[i].pid, s[i].smUtil);
	return 0;
}

/* the host pid of the process unshare -p -f started (pid 1 of the new namespace) */
static long ns_child(pid_t unshare)
{
	char path[96], buf[64] = "";
	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)unshare, (int)unshare);
	for (int i = 0; i < 500; i++) {
		FILE *f = fopen(path, "re");
		if (f) {
			size_t n = fread(buf, 1, sizeof(buf) - 1, f);
			buf[n] = '\0';
			fclose(f);
			if (atol(buf) > 0)
				return atol(buf);
		}
		usleep(10 * 1000);
	}
	return 0;
}

/* whether out has a line "<pid> <util>" with util >= min */
static int sampled(const char *out, long pid, unsigned min)
{
	for (const char *l = out; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
		long p;
		unsigned u;
		if (sscanf(l, "%ld %u", &p, &u) == 2 && p == pid && u >= min)
			return 1;
	}
	return 0;
}

/* Two containers' processes, each pid 1 in its own pid namespace, burn on one GPU: the
 * host's per-process samples name each by its own host pid (the real driver keys them by
 * the task), never by the pid they share inside. */
void test_nvml_process_utilization_host_pids(void)
{
	char out[8192], uuid[64], devs[128], cfg[300];
	struct t_container ct;
	t_uuid(uuid);
	t_container(&ct, VCUDA_POLICY_NONE);
	t_container_dev(&ct, uuid, 4096, 100);
	t_container_write(&ct);
	snprintf(devs, sizeof(devs), "FAKEGPU_DEVICES=%s:81920", uuid);
	snprintf(cfg, sizeof(cfg), "VCUDA_CONFIG=%s", ct.cfg);
	const char *env[] = { devs, cfg, "FAKEGPU_PROC_SAMPLE_US=200000", "FAKEGPU_PROC_NOISE=0",
			      "FAKEGPU_NVML_PID_OFFSET=0", NULL };
	const char *burn[] = { "/usr/bin/unshare", "-p", "-f", "--kill-child", t_self(), "child",
			       "burn", "200", "256", "plain", "1500", NULL };
	int fa, fb;
	pid_t a = t_spawn(env, burn, &fa), b = t_spawn(env, burn, &fb);
	long host_a = ns_child(a), host_b = ns_child(b);
	CHECK(host_a > 1 && host_b > 1 && host_a != host_b, "burners' host pids %ld, %ld", host_a,
	      host_b);
	usleep(900 * 1000); /* a few 200 ms sample periods with both running */
	const char *q[] = { "nvml_proc_util", NULL };
	CHECK(t_run(env, q, out, sizeof(out)) == 0, "query:\n%s", out);
	CHECK(sampled(out, host_a, 10) && sampled(out, host_b, 10),
	      "no busy sample for host pids %ld and %ld (each pid 1 inside its namespace):\n%s",
	      host_a, host_b, out);
	CHECK(!sampled(out, 1, 0), "a sample keyed by pid 1, the pid inside the namespaces:\n%s", out);
	t_wait(a);
	t_wait(b);
	close(fa);
	close(fb);
}
