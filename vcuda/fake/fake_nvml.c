/*
 * fake_nvml.c - fake NVML over the same simulated GPUs. Utilization is computed from the
 * kernel timeline over the last complete sample period [t - P, t], t = now rounded down to P
 * (FAKEGPU_SAMPLE_US), in whole percent (rounded), like a periodic hardware sampler.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../include/nvml_api.h"
#include "fake.h"

static int dev_of(nvmlDevice_t h)
{
	struct fk_dev *d = (struct fk_dev *)h;
	if (d < &fk.dev[0] || d >= &fk.dev[fk.ndev])
		return -1;
	return (int)(d - &fk.dev[0]);
}

#define DEV_OR_FAIL(i, h)                             \
	int i = dev_of(h);                            \
	if (i < 0)                                    \
		return NVML_ERROR_INVALID_ARGUMENT

FK_EXPORT nvmlReturn_t nvmlInit_v2(void)
{
	return fk_init() == CUDA_SUCCESS ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}
FK_EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }
FK_EXPORT nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }

FK_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
	*n = (unsigned)fk.ndev;
	return NVML_SUCCESS;
}
FK_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *n) { return nvmlDeviceGetCount_v2(n); }

FK_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *h)
{
	if (i >= (unsigned)fk.ndev)
		return NVML_ERROR_INVALID_ARGUMENT;
	*h = (nvmlDevice_t)&fk.dev[i];
	return NVML_SUCCESS;
}
FK_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *h)
{
	return nvmlDeviceGetHandleByIndex_v2(i, h);
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *h)
{
	for (int i = 0; i < fk.ndev; i++) {
		if (strcmp(fk.dev[i].uuid, uuid) == 0) {
			*h = (nvmlDevice_t)&fk.dev[i];
			return NVML_SUCCESS;
		}
	}
	return NVML_ERROR_NOT_FOUND;
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *buf, unsigned int len)
{
	DEV_OR_FAIL(i, h);
	if (strlen(fk.dev[i].uuid) >= len)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	snprintf(buf, len, "%s", fk.dev[i].uuid);
	return NVML_SUCCESS;
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char *buf, unsigned int len)
{
	DEV_OR_FAIL(i, h);
	snprintf(buf, len, "Fake GPU %d", i);
	return NVML_SUCCESS;
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *m)
{
	DEV_OR_FAIL(i, h);
	struct fk_state *s = fk.dev[i].st;
	fk_lock(s);
	m->total = s->total;
	m->used = s->used;
	m->free = s->total - s->used;
	fk_unlock(s);
	return NVML_SUCCESS;
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, nvmlMemory_v2_t *m)
{
	if (m->version != NVML_MEMORY_V2_VERSION)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlMemory_t v1;
	nvmlReturn_t rc = nvmlDeviceGetMemoryInfo(h, &v1);
	if (rc == NVML_SUCCESS) {
		m->total = v1.total;
		m->reserved = 0;
		m->used = v1.used;
		m->free = v1.free;
	}
	return rc;
}

/* The end of the newest device sample period by now (FAKEGPU_SAMPLE_US, FAKEGPU_SAMPLE_PHASE_US). */
static uint64_t sample_end(uint64_t now)
{
	uint64_t p = fk.sample_ns, ph = fk.sample_phase_ns;
	return now < ph + p ? 0 : (now - ph) / p * p + ph;
}

static unsigned pct(uint64_t busy, uint64_t period)
{
	return (unsigned)((busy * 100 + period / 2) / period);
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t h, nvmlUtilization_t *u)
{
	DEV_OR_FAIL(i, h);
	struct fk_state *s = fk.dev[i].st;
	uint64_t t = sample_end(fk_now()), p = fk.sample_ns;
	fk_lock(s);
	uint64_t busy = fk_busy_locked(s, -1, t) - fk_busy_locked(s, -1, t > p ? t - p : 0);
	fk_unlock(s);
	u->gpu = pct(busy, p);
	u->memory = 0;
	return NVML_SUCCESS;
}

/* The SM (and graphics) clock: FAKEGPU_CLOCK_MHZ at full load, times the speed power-capped
 * clocks give kernels now (FAKEGPU_BOOST, fk_speed). */
FK_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t h, nvmlClockType_t type, unsigned int *clock)
{
	DEV_OR_FAIL(i, h);
	if (!clock)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (type != NVML_CLOCK_SM && type != NVML_CLOCK_GRAPHICS)
		return NVML_ERROR_NOT_SUPPORTED;
	*clock = (unsigned)((double)fk.clock_mhz * fk_speed(i) + 0.5);
	return NVML_SUCCESS;
}

/* Device utilization samples: one per period P (FAKEGPU_SAMPLE_US; periods end
 * FAKEGPU_SAMPLE_PHASE_US after whole P of CLOCK_MONOTONIC) that ended after last_seen_us (at
 * most 32 back; only the newest when last_seen_us is 0), published FAKEGPU_SAMPLE_DELAY_US after
 * the period ends, each the busy time over the FAKEGPU_SAMPLE_WINDOW_US before its stamp (longer
 * than P: consecutive samples overlap), in whole percent, stamped like the real driver's:
 * wall-clock (CLOCK_REALTIME) microseconds. */
FK_EXPORT nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t h, nvmlSamplingType_t type,
					    unsigned long long last_seen_us, nvmlValueType_t *vt,
					    unsigned int *count, nvmlSample_t *out)
{
	DEV_OR_FAIL(i, h);
	if (type != NVML_GPU_UTILIZATION_SAMPLES)
		return NVML_ERROR_NOT_SUPPORTED;
	if (!count)
		return NVML_ERROR_INVALID_ARGUMENT;
	struct fk_state *s = fk.dev[i].st;
	struct timespec rt;
	clock_gettime(CLOCK_REALTIME, &rt);
	uint64_t now = fk_now(), p = fk.sample_ns, win = fk.sample_window_ns;
	uint64_t wall = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;
	uint64_t off_us = (wall - now) / 1000; /* monotonic -> wall clock */
	now = now > fk.sample_delay_ns ? now - fk.sample_delay_ns : 0;
	uint64_t t = sample_end(now);
	if (t < win || t / 1000 + off_us <= last_seen_us)
		return NVML_ERROR_NOT_FOUND;
	uint64_t nwin = 1;
	while (last_seen_us && nwin < 32 && t >= nwin * p + win &&
	       (t - nwin * p) / 1000 + off_us > last_seen_us)
		nwin++;
	if (!out) {
		*count = (unsigned)nwin;
		return NVML_SUCCESS;
	}
	if (vt)
		*vt = NVML_VALUE_TYPE_UNSIGNED_INT;
	unsigned n = 0;
	fk_lock(s);
	for (uint64_t w = nwin; w-- > 0 && n < *count;) {
		uint64_t end = t - w * p;
		uint64_t busy = fk_busy_locked(s, -1, end) - fk_busy_locked(s, -1, end - win);
		out[n].timeStamp = end / 1000 + off_us;
		out[n].sampleValue.ullVal = 0;
		out[n].sampleValue.uiVal = pct(busy, win);
		n++;
	}
	fk_unlock(s);
	*count = n;
	return NVML_SUCCESS;
}

static uint64_t proc_hash(int pid, uint64_t end)
{
	uint64_t x = ((uint64_t)(unsigned)pid << 32) ^ (end / 1000);
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return x;
}

/* Noise of a per-process sample: deterministic in (pid, window), within +-proc_noise. */
static int proc_noise(int pid, uint64_t end)
{
	if (!fk.proc_noise)
		return 0;
	return (int)(proc_hash(pid, end) % (2 * fk.proc_noise + 1)) - (int)fk.proc_noise;
}

static unsigned reader_pid(const struct fk_pidslot *p);
static int reader_sees_all(void);

/* Per-process samples as a real driver gives them: one per process that ran on the device
 * in the period, for each complete period of FAKEGPU_PROC_SAMPLE_US (about a second) that ended
 * after last_seen_us (at most 16 back), off by up to FAKEGPU_PROC_NOISE points, keyed by
 * host pids (below), stamped in wall-clock microseconds like the device samples.
 * FAKEGPU_PROC_WHOLE=1 gives them as an H200 (driver 580) did: one sample a round, of one
 * process, reading the device's whole busy time (set FAKEGPU_PROC_SAMPLE_US=200000 too). */
FK_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t h,
						       nvmlProcessUtilizationSample_t *out,
						       unsigned int *count,
						       unsigned long long last_seen_us)
{
	DEV_OR_FAIL(i, h);
	struct fk_state *s = fk.dev[i].st;
	struct timespec rt;
	clock_gettime(CLOCK_REALTIME, &rt);
	uint64_t now = fk_now(), p = fk.proc_sample_ns, t = now / p * p;
	uint64_t wall = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;
	uint64_t off_us = (wall - now) / 1000; /* monotonic -> wall clock, as the driver stamps */
	if (t / 1000 + off_us <= last_seen_us)
		return NVML_ERROR_NOT_FOUND;
	uint64_t nwin = 1;
	while (last_seen_us && nwin < 16 && t >= (nwin + 1) * p &&
	       (t - nwin * p) / 1000 + off_us > last_seen_us)
		nwin++;
	/* sampled under the lock, pids mapped after it (that may read /proc) */
	struct {
		struct fk_pidslot slot;
		uint64_t end, busy, dev;
	} got[16 * FK_PIDS];
	unsigned n = 0;
	fk_lock(s);
	for (uint64_t w = nwin; w-- > 0;) {
		uint64_t end = t - w * p;
		uint64_t dev = fk_busy_locked(s, -1, end) - fk_busy_locked(s, -1, end - p);
		/* whole-device samples (an H200): one per round, of a process picked about as
		 * often as its share of the round's busy time (a 10% one beside a saturating
		 * one: 3 rounds of 27), reading the device's busy time */
		uint64_t pick = dev ? proc_hash(7919, end) % dev : 0;
		for (int k = 0; k < FK_PIDS; k++) {
			if (!s->pids[k].pid)
				continue;
			uint64_t busy = fk_busy_locked(s, k, end) - fk_busy_locked(s, k, end - p);
			if (busy && fk.proc_whole) {
				if (pick >= busy) {
					pick -= busy;
					continue;
				}
				pick = UINT64_MAX; /* picked: no other process in this round */
			}
			if (busy)
				got[n].slot = s->pids[k], got[n].end = end, got[n].busy = busy, got[n].dev = dev, n++;
		}
	}
	fk_unlock(s);
	/* noise that adds up to nothing over a round: real shares sum to the device's figure
	 * or below (an H100: pairs read 100 or 76 at a device 99) */
	int noise[16 * FK_PIDS];
	for (unsigned a = 0; a < n;) {
		unsigned b = a;
		int sum = 0;
		for (; b < n && got[b].end == got[a].end; b++)
			sum += noise[b] = proc_noise((int)got[b].slot.pid, got[b].end);
		for (unsigned k = a; k < b; k++)
			noise[k] -= sum / (int)(b - a);
		a = b;
	}
	int all = reader_sees_all();
	for (unsigned k = 0; out && k < n && k < *count; k++) {
		/* the host's pid, as the driver keys its samples: a process of another namespace,
		 * seen from the host's, by its task; one of the reader's own namespace (or, from
		 * inside a container, anyone's) shows pid + FAKEGPU_NVML_PID_OFFSET, a pid the
		 * container cannot match */
		unsigned pid = (unsigned)got[k].slot.pid + fk.nvml_pid_offset;
		if (all && got[k].slot.pidns && got[k].slot.pidns != fk.pidns) {
			unsigned host = reader_pid(&got[k].slot);
			if (host)
				pid = host;
		}
		int v = fk.proc_whole ? (int)pct(got[k].dev, p) : (int)pct(got[k].busy, p) + noise[k];
		out[k] = (nvmlProcessUtilizationSample_t){
			.pid = pid,
			.timeStamp = got[k].end / 1000 + off_us,
			.smUtil = (unsigned)(v < 0 ? 0 : v > 100 ? 100 : v) };
	}
	if (!n)
		return NVML_ERROR_NOT_FOUND;
	if (!out || n > *count) {
		*count = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	*count = n;
	return n ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
}

/* ---- running processes (what a node agent sees: host pids, memory held) ---- */

/* Whether a process (pid in the reader's /proc) has not exited: a zombie holds no device
 * memory, the driver frees it when the process's files close. */
static int running_proc(unsigned long pid)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%lu/status", pid);
	FILE *f = fopen(path, "re");
	int live = 0;
	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, "State:", 6) == 0) {
			live = !strchr(line, 'Z') && !strchr(line, 'X');
			break;
		}
	if (f)
		fclose(f);
	return live;
}

/* The pid, in the reader's namespace, of the process a slot books; 0 if it is gone or not
 * visible here. A slot of the reader's own namespace is its pid; another namespace's is
 * found as the real driver finds it from the task: the process whose pid namespace is the
 * slot's and whose innermost pid (the last of /proc/<pid>/status NSpid) is the slot's. */
static unsigned reader_pid(const struct fk_pidslot *p)
{
	if (p->pidns == fk.pidns || p->pidns == 0)
		return running_proc((unsigned long)p->pid) ? (unsigned)p->pid : 0;
	DIR *d = opendir("/proc");
	if (!d)
		return 0;
	unsigned found = 0;
	for (struct dirent *e; !found && (e = readdir(d)) != NULL;) {
		char *end;
		unsigned long host = strtoul(e->d_name, &end, 10);
		if (*end || host == 0)
			continue;
		char dir[64], path[80], line[256];
		snprintf(dir, sizeof(dir), "/proc/%lu", host);
		if (fk_pidns_of(dir) != p->pidns)
			continue;
		snprintf(path, sizeof(path), "%s/status", dir);
		FILE *f = fopen(path, "re");
		if (!f)
			continue;
		while (fgets(line, sizeof(line), f)) {
			if (strncmp(line, "NSpid:", 6) != 0)
				continue;
			char *last = strrchr(line, '\t');
			if (last && atoi(last + 1) == p->pid && running_proc(host))
				found = (unsigned)host;
			break;
		}
		fclose(f);
	}
	closedir(d);
	return found;
}

/* Whether this process sees every pid namespace (NSpid has one pid: the initial one). */
static int reader_sees_all(void)
{
	FILE *f = fopen("/proc/self/status", "re");
	char line[256];
	int all = 0;
	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, "NSpid:", 6) == 0) {
			all = strchr(line + 6, '\t') == strrchr(line, '\t');
			break;
		}
	if (f)
		fclose(f);
	return all;
}

/* Every live process holding device memory on h, with its pid as this process sees it and
 * what it holds in bytes, like the real call. Too small a buffer: *count says how many and
 * NVML_ERROR_INSUFFICIENT_SIZE. A process that is gone is left out; seen from the initial
 * pid namespace, its slot is reaped (what it held goes back to the GPU). */
static nvmlReturn_t running(nvmlDevice_t h, unsigned int *count, nvmlProcessInfo_t *out,
			    size_t stride)
{
	DEV_OR_FAIL(i, h);
	if (!count)
		return NVML_ERROR_INVALID_ARGUMENT;
	struct fk_state *s = fk.dev[i].st;
	struct fk_pidslot snap[FK_PIDS];
	fk_lock(s);
	memcpy(snap, s->pids, sizeof(snap));
	fk_unlock(s);
	unsigned pids[FK_PIDS], n = 0;
	int all = reader_sees_all();
	for (int k = 0; k < FK_PIDS; k++) {
		pids[k] = 0;
		if (!snap[k].pid || !snap[k].mem)
			continue;
		pids[k] = reader_pid(&snap[k]);
		if (pids[k]) {
			n++;
			continue;
		}
		if (!all)
			continue;
		fk_lock(s); /* gone: reap it, unless the slot changed meanwhile */
		struct fk_pidslot *p = &s->pids[k];
		if (p->pid == snap[k].pid && p->pidns == snap[k].pidns) {
			s->used = s->used >= p->mem ? s->used - p->mem : 0;
			memset(p, 0, sizeof(*p));
		}
		fk_unlock(s);
	}
	if (!out || n > *count) {
		*count = n;
		return n == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
	}
	unsigned j = 0;
	for (int k = 0; k < FK_PIDS && j < n; k++) {
		if (!pids[k])
			continue;
		nvmlProcessInfo_t info = { .pid = pids[k], .usedGpuMemory = snap[k].mem,
					   .gpuInstanceId = 0xFFFFFFFFu, .computeInstanceId = 0xFFFFFFFFu };
		memcpy((char *)out + j * stride, &info, stride);
		j++;
	}
	*count = j;
	return NVML_SUCCESS;
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned int *count,
							       nvmlProcessInfo_t *out)
{
	return running(h, count, out, sizeof(nvmlProcessInfo_t));
}
FK_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t h, unsigned int *count,
							       nvmlProcessInfo_t *out)
{
	return running(h, count, out, sizeof(nvmlProcessInfo_t));
}
FK_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t h, unsigned int *count,
							    nvmlProcessInfo_v1_t *out)
{
	return running(h, count, (nvmlProcessInfo_t *)(void *)out, sizeof(nvmlProcessInfo_v1_t));
}
