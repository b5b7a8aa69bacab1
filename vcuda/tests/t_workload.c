/* t_workload.c - the workload tool under LD_PRELOAD=libvcuda.so, as the e2e emulator runs it. */
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* ---- --stamps and --slot: the fake standing in for the real `slicing` program ---- */

#define SLICE_NS 2000000ull  /* FAKEGPU_SLICE_US=2000 */
#define SWITCH_NS 170000ull  /* FAKEGPU_SWITCH_US=170 */
#define MAX_RUNS 8192

struct runs {
	uint64_t start[MAX_RUNS], end[MAX_RUNS];
	int who[MAX_RUNS]; /* 0 or 1: the process */
	size_t n;
};

/* Appends FILE's "START_NS END_NS" lines as process who's; -1 on a malformed line. */
static int read_stamps(const char *path, int who, struct runs *r)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	unsigned long long s, e;
	int rc = 0;
	while (rc == 0 && r->n < MAX_RUNS && fscanf(f, "%llu %llu", &s, &e) == 2) {
		rc = e > s ? 0 : -1;
		r->start[r->n] = s, r->end[r->n] = e, r->who[r->n++] = who;
	}
	rc = rc == 0 && feof(f) ? 0 : -1;
	fclose(f);
	return rc;
}

/* Both processes' runs by start time (insertion sort: a few hundred, nearly sorted). */
static void sort_runs(struct runs *r)
{
	for (size_t i = 1; i < r->n; i++)
		for (size_t j = i; j > 0 && r->start[j - 1] > r->start[j]; j--) {
			uint64_t s = r->start[j], e = r->end[j];
			int w = r->who[j];
			r->start[j] = r->start[j - 1], r->end[j] = r->end[j - 1], r->who[j] = r->who[j - 1];
			r->start[j - 1] = s, r->end[j - 1] = e, r->who[j - 1] = w;
		}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	return n ? v[n / 2] : 0;
}

/* Back to back, both saturating: where both ran (from the later first run to the earlier last
 * one), runs take turns, a slice long, with a switch between. */
static int check_turns(struct runs *r, char *why, size_t len)
{
	uint64_t from = 0, to = UINT64_MAX, first[2] = { 0, 0 }, last[2] = { 0, 0 };
	static uint64_t runs[MAX_RUNS], gaps[MAX_RUNS];
	size_t nr = 0, ng = 0, pairs = 0, turns = 0;
	for (size_t i = 0; i < r->n; i++) {
		if (!first[r->who[i]])
			first[r->who[i]] = r->start[i];
		last[r->who[i]] = r->end[i];
	}
	from = first[0] > first[1] ? first[0] : first[1];
	to = last[0] < last[1] ? last[0] : last[1];
	for (size_t i = 0; i < r->n; i++) {
		if (r->start[i] < from || r->end[i] > to)
			continue;
		runs[nr++] = r->end[i] - r->start[i];
		if (i + 1 < r->n && r->end[i + 1] <= to) {
			pairs++;
			if (r->who[i + 1] != r->who[i])
				turns++, gaps[ng++] = r->start[i + 1] - r->end[i];
		}
	}
	uint64_t run = median(runs, nr), gap = median(gaps, ng);
	snprintf(why, len, "%zu runs while both ran, %zu of %zu neighbours take turns, median run %llu us, "
		 "median hand-off %llu us", nr, turns, pairs, (unsigned long long)run / 1000,
		 (unsigned long long)gap / 1000);
	t_note("back to back: %s", why);
	/* 0.5 s both saturating: ~230 runs of 2 ms + 170 us */
	return nr >= 50 && turns * 10 >= pairs * 9 && run >= SLICE_NS * 8 / 10 && run <= SLICE_NS * 12 / 10 &&
			       gap >= SWITCH_NS * 8 / 10 && gap <= SWITCH_NS * 12 / 10 ? 0 : -1;
}

/* ns of [s, e) inside the windows [k*period + at, k*period + at + len). */
static uint64_t inside(uint64_t s, uint64_t e, uint64_t period, uint64_t at, uint64_t len)
{
	uint64_t in = 0;
	for (uint64_t w = (s - at) / period * period + at; w < e; w += period) {
		uint64_t a = s > w ? s : w, b = e < w + len ? e : w + len;
		in += b > a ? b - a : 0;
	}
	return in;
}

/* --slot 40000,0,20000,0.9 and 40000,20000,20000,0.9: each ran 18 ms of every 40, almost all of
 * it inside its own 20 ms window (a late wake-up spills a little into the other's). */
static int check_slots(struct runs *r, char *why, size_t len)
{
	uint64_t total[2] = { 0, 0 }, in[2] = { 0, 0 };
	for (size_t i = 0; i < r->n; i++) {
		int w = r->who[i];
		total[w] += r->end[i] - r->start[i];
		in[w] += inside(r->start[i], r->end[i], 40000000ull, w ? 20000000ull : 0, 20000000ull);
	}
	snprintf(why, len, "ran %.1f and %.1f ms, %.3f and %.3f of it in its own window", total[0] / 1e6,
		 total[1] / 1e6, total[0] ? (double)in[0] / (double)total[0] : 0,
		 total[1] ? (double)in[1] / (double)total[1] : 0);
	t_note("slots: %s", why);
	/* 0.6 s: 15 slots x 18 ms = 270 ms each */
	return total[0] >= 100000000ull && total[1] >= 100000000ull && in[0] * 10 >= total[0] * 8 &&
			       in[1] * 10 >= total[1] * 8 ? 0 : -1;
}

/* A child's output until it closes it (then closes fd). */
static void read_all(int fd, char *out, size_t cap)
{
	size_t len = 0;
	ssize_t n;
	while (len + 1 < cap && ((n = read(fd, out + len, cap - 1 - len)) > 0 || (n < 0 && errno == EINTR)))
		len += n > 0 ? (size_t)n : 0;
	out[len] = '\0';
	close(fd);
}

void test_workload_stamps_and_slots(void)
{
	struct {
		const char *name;
		const char *slot[2]; /* --slot of each process; NULL: back to back */
		int (*check)(struct runs *r, char *why, size_t len);
	} cases[] = {
		{ "back to back: 2 ms slices in turn, 170 us hand-offs", { NULL, NULL }, check_turns },
		{ "slots: each in its own half of 40 ms", { "40000,0,20000,0.9", "40000,20000,20000,0.9" },
		  check_slots },
	};
	char self[512], lib[600], bin[600], devs[128], uuid[64];
	snprintf(self, sizeof(self), "%s", t_self());
	const char *dir = dirname(self);
	snprintf(lib, sizeof(lib), "LD_LIBRARY_PATH=%s/fake", dir);
	snprintf(bin, sizeof(bin), "%s/workload", dir);
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		static struct runs r;
		char stamps[2][600], why[512];
		pid_t pid[2];
		int fd[2];
		t_uuid(uuid);
		snprintf(devs, sizeof(devs), "FAKEGPU_DEVICES=%s:81920", uuid);
		/* the fake alone (no libvcuda): its own time slicing */
		const char *env[] = { devs, lib, "FAKEGPU_NS_PER_BLOCK=1000", "FAKEGPU_SLICE_US=2000",
				      "FAKEGPU_SWITCH_US=170", "LD_PRELOAD", NULL };
		for (int p = 0; p < 2; p++) {
			snprintf(stamps[p], sizeof(stamps[p]), "%s/stamps-%zu-%d", t_tmp(), c, p);
			const char *args[] = { bin, "--chunk-mib", "64", "--max-alloc-mib", "64", "--seconds", "0.6",
					       "--stamps", stamps[p], cases[c].slot[p] ? "--slot" : NULL,
					       cases[c].slot[p], NULL };
			pid[p] = t_spawn(env, args, &fd[p]);
			CHECK(pid[p] > 0, "%s: spawn", cases[c].name);
		}
		r.n = 0;
		for (int p = 0; p < 2; p++) {
			char out[4096];
			read_all(fd[p], out, sizeof(out));
			int rc = t_wait(pid[p]);
			CHECK(rc == 0 && strstr(out, "{\"ok\":true"), "%s: workload %d exit %d:\n%s", cases[c].name,
			      p, rc, out);
			CHECK(json_num(out, "kernel_ns") == 200000, "%s: kernel_ns %.0f, want 200000 (200 blocks x 1000 ns)",
			      cases[c].name, json_num(out, "kernel_ns"));
			CHECK(read_stamps(stamps[p], p, &r) == 0, "%s: stamps of workload %d", cases[c].name, p);
		}
		sort_runs(&r);
		for (size_t i = 1; i < r.n; i++) /* one engine: nothing overlaps, ever */
			CHECK(r.start[i] >= r.end[i - 1], "%s: runs overlap: %llu-%llu (%d), %llu-%llu (%d)",
			      cases[c].name, (unsigned long long)r.start[i - 1], (unsigned long long)r.end[i - 1],
			      r.who[i - 1], (unsigned long long)r.start[i], (unsigned long long)r.end[i], r.who[i]);
		CHECK(cases[c].check(&r, why, sizeof(why)) == 0, "%s: %s", cases[c].name, why);
	}
}

/* --slot is validated at startup: a bad one exits 2 and says what it wants. */
void test_workload_slot_flag_checked(void)
{
	struct {
		const char *name, *slot;
	} cases[] = {
		{ "start past the period", "40000,40000,20000,0.9" },
		{ "fill missing", "40000,0,20000" },
		{ "fill above 1", "40000,0,20000,1.5" },
		{ "window longer than the period", "40000,0,50000,0.9" },
		{ "negative", "40000,-1,20000,0.9" },
		{ "trailing junk", "40000,0,20000,0.9x" },
	};
	char self[512], lib[600], bin[600], out[4096];
	snprintf(self, sizeof(self), "%s", t_self());
	const char *dir = dirname(self);
	snprintf(lib, sizeof(lib), "LD_LIBRARY_PATH=%s/fake", dir);
	snprintf(bin, sizeof(bin), "%s/workload", dir);
	const char *env[] = { lib, "LD_PRELOAD", NULL };
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *args[] = { bin, "--slot", cases[i].slot, NULL };
		int rc = t_run(env, args, out, sizeof(out));
		CHECK(rc == 2 && strstr(out, "--slot wants PERIOD_US,START_US,LEN_US,FILL"),
		      "%s (%s): exit %d, want 2 and the expected form:\n%s", cases[i].name, cases[i].slot, rc, out);
	}
}
