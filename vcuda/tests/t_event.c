/*
 * t_event.c - CUDA events and stream-capture status on the fake driver (fake/fake_event.c), as
 * libvcuda uses them to learn how much of a process's queued work has run: an event is done once
 * everything the process queued before the record has run on the fake GPU (FIFO timeline, time
 * slices, an MPS lane), and FAKEGPU_CAPTURING=1 stands for a graph capture the limiter must
 * stay out of. Checked in children (`vctest child event <what> ...`) that run unlimited.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* test queries of the fake driver (fake_event.c, fake_mps.c) */
unsigned long fakegpu_capture_records(void);
unsigned long fakegpu_capture_unsafe(void);
int fakegpu_mps_last(int dev, uint64_t *ns);

#define MS 1000000ull /* a kernel of 1000 blocks at FAKEGPU_NS_PER_BLOCK=1000 */

static CUfunction burn(void)
{
	CUmodule m;
	CUfunction f;
	t_ctx(0);
	CCHECK(cuModuleLoadData(&m, "fake") == CUDA_SUCCESS && cuModuleGetFunction(&f, m, "burn") == CUDA_SUCCESS,
	       "function");
	return f;
}

static void launch_ms(CUfunction f, int n) /* n kernels of 1 ms */
{
	for (int i = 0; i < n; i++)
		CCHECK(cuLaunchKernel(f, 1000, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) == CUDA_SUCCESS, "launch");
}

static CUevent new_event(void)
{
	CUevent e;
	CCHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS, "cuEventCreate");
	return e;
}

/* Polls e until done, within 10 s. Every answer must agree with the process's GPU time on uuid:
 * NOT_READY only while less than want ns of it had run (read before the query), SUCCESS only
 * once it had (read after). Returns the GPU time run when it was done. */
static uint64_t watch(const char *uuid, CUevent e, uint64_t want)
{
	for (double t0 = t_mono_s();; usleep(200)) {
		uint64_t before = t_busy_of(uuid, getpid());
		CUresult rc = cuEventQuery(e);
		uint64_t after = t_busy_of(uuid, getpid());
		if (rc == CUDA_SUCCESS) {
			CCHECK(after >= want, "done with %llu of %llu ns run", (unsigned long long)after,
			       (unsigned long long)want);
			return after;
		}
		CCHECK(rc == CUDA_ERROR_NOT_READY, "cuEventQuery: %d", rc);
		CCHECK(before < want, "not ready with all %llu ns run (%llu)", (unsigned long long)want,
		       (unsigned long long)before);
		CCHECK(t_mono_s() - t0 < 10, "never done (%llu of %llu ns ran)", (unsigned long long)after,
		       (unsigned long long)want);
	}
}

/* args: uuid [pid of a process keeping the engine busy]. 20 ms of work, a record, 80 ms more:
 * the event is done with the first 20 ms, not before, not waiting for the 80. Re-recorded, it
 * waits for the 80 too. */
static int order(int argc, char **argv)
{
	CCHECK(argc >= 1, "args");
	const char *uuid = argv[0];
	CUfunction f = burn();
	CUevent e = new_event();
	if (argc > 1) /* sliced beside a deep queue: wait until the engine alternates */
		for (double t0 = t_mono_s(); t_busy_of(uuid, atoi(argv[1])) < 20 * MS;)
			CCHECK(t_mono_s() - t0 < 5, "the other process never ran");
	uint64_t b0 = t_busy_of(uuid, getpid());
	launch_ms(f, 20);
	CCHECK(cuEventRecord(e, NULL) == CUDA_SUCCESS, "record");
	CCHECK(cuEventQuery(e) == CUDA_ERROR_NOT_READY, "just recorded behind 20 ms of work: want not ready");
	launch_ms(f, 80);
	uint64_t at = watch(uuid, e, b0 + 20 * MS);
	t_note("done with %.1f ms of the process's work run (20 before the record, 100 queued)",
	       (double)(at - b0) / 1e6);
	CCHECK(at < b0 + 60 * MS, "the event waited for the work queued after its record");
	CCHECK(cuEventRecord_ptsz(e, NULL) == CUDA_SUCCESS, "record again");
	CCHECK(cuEventQuery(e) == CUDA_ERROR_NOT_READY, "re-recorded behind 40+ ms of work: want not ready");
	watch(uuid, e, b0 + 100 * MS);
	CCHECK(cuEventDestroy_v2(e) == CUDA_SUCCESS, "destroy");
	return 0;
}

/* An MPS client's lane keeps no per-process GPU time: check against the wall clock. Its 20
 * kernels end at least 20 ms after the first launch, and at most 20 ms after the last. */
static int mps(int argc, char **argv)
{
	(void)argc, (void)argv;
	CUfunction f = burn();
	CUevent e = new_event();
	uint64_t ns;
	double t0 = t_mono_s();
	launch_ms(f, 20);
	double t1 = t_mono_s();
	CCHECK(fakegpu_mps_last(0, &ns) == 0 && ns == MS, "an MPS client alone at 100%%: 1 ms kernels");
	CCHECK(cuEventRecord(e, NULL) == CUDA_SUCCESS, "record");
	launch_ms(f, 80);
	for (;; usleep(200)) {
		double before = t_mono_s();
		CUresult rc = cuEventQuery(e);
		double after = t_mono_s();
		if (rc == CUDA_SUCCESS) {
			t_note("done %.1f ms after the first launch", (after - t0) * 1e3);
			CCHECK(after - t0 >= 0.020, "done %.1f ms after 20 ms of work began", (after - t0) * 1e3);
			CCHECK(after - t0 < 0.100, "waited for the work queued after the record");
			break;
		}
		CCHECK(rc == CUDA_ERROR_NOT_READY, "cuEventQuery: %d", rc);
		CCHECK(before - t1 < 0.020, "not ready %.1f ms after the last of 20 ms was queued",
		       (before - t1) * 1e3);
	}
	CCHECK(cuCtxSynchronize() == CUDA_SUCCESS && cuEventDestroy_v2(e) == CUDA_SUCCESS, "sync, destroy");
	return 0;
}

/* A never-recorded event is done, even with work queued; a recorded one beside it is not. */
static int unrecorded(int argc, char **argv)
{
	(void)argc, (void)argv;
	CUfunction f = burn();
	CUevent idle = new_event(), e = new_event();
	launch_ms(f, 20);
	CCHECK(cuEventRecord(e, NULL) == CUDA_SUCCESS, "record");
	CCHECK(cuEventQuery(idle) == CUDA_SUCCESS, "a never-recorded event: want done");
	CCHECK(cuEventQuery(e) == CUDA_ERROR_NOT_READY, "recorded behind 20 ms of work: want not ready");
	CCHECK(cuCtxSynchronize() == CUDA_SUCCESS && cuEventQuery(e) == CUDA_SUCCESS, "done after a sync");
	CCHECK(cuEventDestroy_v2(idle) == CUDA_SUCCESS && cuEventDestroy_v2(e) == CUDA_SUCCESS, "destroy");
	return 0;
}

static int bad_handle(int argc, char **argv)
{
	(void)argc, (void)argv;
	t_ctx(0);
	uint64_t zeros[8] = { 0 };
	CUstream s;
	CCHECK(cuStreamCreate(&s, 0) == CUDA_SUCCESS, "stream");
	CUevent bad[] = { NULL, (CUevent)zeros, (CUevent)s /* another fake handle */ };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CCHECK(cuEventDestroy_v2(bad[i]) == CUDA_ERROR_INVALID_HANDLE, "destroy of bad handle %zu", i);
		CCHECK(cuEventRecord(bad[i], NULL) == CUDA_ERROR_INVALID_HANDLE, "record of bad handle %zu", i);
		CCHECK(cuEventQuery(bad[i]) == CUDA_ERROR_INVALID_HANDLE, "query of bad handle %zu", i);
	}
	/* by cuGetProcAddress, as the runtime finds them: cuEventDestroy from CUDA 4.0 is _v2 */
	static const char *const names[] = { "cuEventCreate", "cuEventRecord", "cuEventQuery", "cuEventDestroy",
					     "cuStreamIsCapturing", "cuThreadExchangeStreamCaptureMode" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		for (int pt = 0; pt < 2; pt++) {
			void *fn = NULL;
			cuuint64_t fl = pt ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0;
			CCHECK(cuGetProcAddress(names[i], &fn, 12000, fl) == CUDA_SUCCESS && fn,
			       "cuGetProcAddress(%s), per-thread %d", names[i], pt);
		}
	CUresult (*destroy)(CUevent) = NULL;
	CCHECK(cuGetProcAddress("cuEventDestroy", (void **)&destroy, 12000, 0) == CUDA_SUCCESS && destroy,
	       "cuGetProcAddress(cuEventDestroy)");
	CCHECK(destroy(NULL) == CUDA_ERROR_INVALID_HANDLE, "cuEventDestroy of NULL");
	CCHECK(destroy(new_event()) == CUDA_SUCCESS, "cuEventDestroy of an event");
	return 0;
}

static void *no_context_thread(void *arg)
{
	CUevent e;
	*(CUresult *)arg = cuEventCreate(&e, 0);
	return NULL;
}

static int no_context(int argc, char **argv)
{
	(void)argc, (void)argv;
	CUevent e;
	CCHECK(cuInit(0) == CUDA_SUCCESS, "cuInit");
	CCHECK(cuEventCreate(&e, 0) == CUDA_ERROR_INVALID_CONTEXT, "no context: want INVALID_CONTEXT");
	t_ctx(0);
	CCHECK(cuEventCreate(NULL, 0) == CUDA_ERROR_INVALID_VALUE, "NULL event: want INVALID_VALUE");
	CCHECK(cuEventCreate(&e, 0x100) == CUDA_ERROR_INVALID_VALUE, "unknown flag: want INVALID_VALUE");
	CCHECK(cuEventCreate(&e, 0) == CUDA_SUCCESS && cuEventDestroy_v2(e) == CUDA_SUCCESS,
	       "with a context: want an event");
	CUresult rc = CUDA_SUCCESS;
	pthread_t t;
	CCHECK(pthread_create(&t, NULL, no_context_thread, &rc) == 0 && pthread_join(t, NULL) == 0, "thread");
	CCHECK(rc == CUDA_ERROR_INVALID_CONTEXT, "a thread without a current context: got %d", rc);
	return 0;
}

/* args: "1" under FAKEGPU_CAPTURING=1, "0" without. Every entry point, looked up as the
 * runtime does (legacy and per-thread stream), says the same. */
static int capture(int argc, char **argv)
{
	CCHECK(argc == 1, "args");
	int on = strcmp(argv[0], "1") == 0;
	CUfunction f = burn();
	CUstream s;
	CCHECK(cuStreamCreate(&s, 0) == CUDA_SUCCESS, "stream");
	CUresult (*is_cap[2])(CUstream, CUstreamCaptureStatus *);
	CUresult (*rec[2])(CUevent, CUstream);
	for (int pt = 0; pt < 2; pt++) {
		cuuint64_t fl = pt ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0;
		CCHECK(cuGetProcAddress("cuStreamIsCapturing", (void **)&is_cap[pt], 12000, fl) == CUDA_SUCCESS &&
			       cuGetProcAddress("cuEventRecord", (void **)&rec[pt], 12000, fl) == CUDA_SUCCESS,
		       "cuGetProcAddress, per-thread %d", pt);
	}
	CUstream streams[] = { NULL, s };
	for (int i = 0; i < 4; i++) {
		/* the legacy stream (NULL without _ptsz) cannot be captured: while others are, it
		 * answers CUDA_ERROR_STREAM_CAPTURE_IMPLICIT */
		int leg = on && i == 0;
		CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
		CUresult rc = is_cap[i & 1](streams[i >> 1], &st);
		CCHECK(rc == (leg ? CUDA_ERROR_STREAM_CAPTURE_IMPLICIT : CUDA_SUCCESS),
		       "cuStreamIsCapturing, stream %d, per-thread %d: %d, capturing %d", i >> 1, i & 1, rc, on);
		CCHECK(leg || st == (on ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE),
		       "stream %d, per-thread %d: status %d, capturing %d", i >> 1, i & 1, st, on);
	}
	CCHECK(cuStreamIsCapturing(NULL, NULL) == CUDA_ERROR_INVALID_VALUE, "NULL status");
	CUevent e = new_event();
	launch_ms(f, 20);
	unsigned long n0 = fakegpu_capture_records();
	for (int i = 0; i < 4; i++) {
		CUresult rc = rec[i & 1](e, streams[i >> 1]);
		CUresult want = !on ? CUDA_SUCCESS : i == 0 ? CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
						      : CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
		CCHECK(rc == want, "record on stream %d, per-thread %d: %d, capturing %d", i >> 1, i & 1, rc, on);
	}
	unsigned long n = fakegpu_capture_records() - n0;
	CCHECK(n == (on ? 4u : 0u), "%lu refused records counted, capturing %d", n, on);
	CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
	CCHECK(cuThreadExchangeStreamCaptureMode(&m) == CUDA_SUCCESS, "relaxed");
	CUresult q = cuEventQuery(e);
	CCHECK(q == (on ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY),
	       "query: %d; a refused record leaves the event unrecorded (done), capturing %d", q, on);
	CCHECK(cuThreadExchangeStreamCaptureMode(&m) == CUDA_SUCCESS, "restore");
	CCHECK(cuCtxSynchronize() == CUDA_SUCCESS && cuEventDestroy_v2(e) == CUDA_SUCCESS, "sync, destroy");
	return 0;
}

struct mode_probe {
	CUevent e;
	CUstreamCaptureMode got; /* the thread's mode before its exchange */
	CUresult query;          /* its query, in THREAD_LOCAL mode */
};

static void *mode_thread(void *arg)
{
	struct mode_probe *p = arg;
	CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
	if (cuThreadExchangeStreamCaptureMode(&m) != CUDA_SUCCESS)
		return NULL;
	p->got = m;
	p->query = cuEventQuery(p->e);
	return NULL;
}

/* Under FAKEGPU_CAPTURING=1 a query is refused (and counted) unless the calling thread is in
 * RELAXED mode; the mode is per thread, GLOBAL until exchanged, and an exchange restores. */
static int capture_mode(int argc, char **argv)
{
	(void)argc, (void)argv;
	t_ctx(0);
	struct mode_probe p = { new_event(), CU_STREAM_CAPTURE_MODE_RELAXED, CUDA_SUCCESS };
	CUstreamCaptureMode m = (CUstreamCaptureMode)7;
	CCHECK(cuThreadExchangeStreamCaptureMode(NULL) == CUDA_ERROR_INVALID_VALUE, "NULL mode");
	CCHECK(cuThreadExchangeStreamCaptureMode(&m) == CUDA_ERROR_INVALID_VALUE, "mode 7");
	unsigned long u0 = fakegpu_capture_unsafe();
	CCHECK(cuEventQuery(p.e) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "a query in GLOBAL mode");
	CCHECK(fakegpu_capture_unsafe() == u0 + 1, "the refused query is counted");
	m = CU_STREAM_CAPTURE_MODE_RELAXED;
	CCHECK(cuThreadExchangeStreamCaptureMode(&m) == CUDA_SUCCESS && m == CU_STREAM_CAPTURE_MODE_GLOBAL,
	       "a thread starts in GLOBAL mode: got %d", m);
	CCHECK(cuEventQuery(p.e) == CUDA_SUCCESS, "a query in RELAXED mode");
	pthread_t t;
	CCHECK(pthread_create(&t, NULL, mode_thread, &p) == 0 && pthread_join(t, NULL) == 0, "thread");
	CCHECK(p.got == CU_STREAM_CAPTURE_MODE_GLOBAL, "another thread's mode: %d, want its own GLOBAL", p.got);
	CCHECK(p.query == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "its query in THREAD_LOCAL mode: %d", p.query);
	CCHECK(cuEventQuery(p.e) == CUDA_SUCCESS, "this thread is still RELAXED");
	CCHECK(fakegpu_capture_unsafe() == u0 + 2, "refused queries: %lu, want 2", fakegpu_capture_unsafe() - u0);
	m = CU_STREAM_CAPTURE_MODE_GLOBAL; /* restore what the first exchange returned */
	CCHECK(cuThreadExchangeStreamCaptureMode(&m) == CUDA_SUCCESS && m == CU_STREAM_CAPTURE_MODE_RELAXED,
	       "the exchange gives back RELAXED: %d", m);
	CCHECK(cuEventQuery(p.e) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "restored to GLOBAL");
	CCHECK(cuEventDestroy_v2(p.e) == CUDA_SUCCESS, "destroy");
	return 0;
}

int child_event(int argc, char **argv)
{
	static const struct {
		const char *what;
		int (*fn)(int, char **);
	} whats[] = { { "order", order }, { "mps", mps }, { "unrecorded", unrecorded },
		      { "bad_handle", bad_handle }, { "no_context", no_context }, { "capture", capture },
		      { "capture_mode", capture_mode } };
	for (size_t i = 0; argc >= 1 && i < sizeof(whats) / sizeof(whats[0]); i++)
		if (strcmp(argv[0], whats[i].what) == 0)
			return whats[i].fn(argc - 1, argv + 1);
	CCHECK(0, "child event: unknown %s", argc >= 1 ? argv[0] : "(none)");
	return 2;
}

/* Runs `vctest child event <args>` on a fresh fake GPU with extra environment; 0 when it passed. */
static int run_event(const char *const *extra, const char *const *args, char *out, size_t n)
{
	struct t_fake_gpu g;
	if (t_fake_gpu(&g) != 0)
		return snprintf(out, n, "config"), -1;
	const char *env[16] = { g.devices, g.config, "FAKEGPU_NS_PER_BLOCK=1000", "FAKEGPU_MAX_QUEUE_US=300000" };
	const char *argv[8] = { "event" };
	for (int i = 0; extra && extra[i] && i < 10; i++)
		env[4 + i] = extra[i];
	for (int i = 0; args[i] && i < 6; i++)
		argv[1 + i] = strcmp(args[i], "UUID") == 0 ? g.uuid : args[i];
	return t_run(env, argv, out, n);
}

#define RUN_EVENT(extra, ...)                                                                  \
	do {                                                                                   \
		const char *args_[] = { __VA_ARGS__, NULL };                                   \
		char out_[8192];                                                               \
		int rc_ = run_event(extra, args_, out_, sizeof(out_));                         \
		CHECK(rc_ == 0, "child event %s exit %d:\n%s", args_[0], rc_, out_);           \
	} while (0)

void test_event_fifo_done_after_its_work(void) { RUN_EVENT(NULL, "order", "UUID"); }

/* Beside another process's deep queue: the event follows the GPU time served to this process
 * (~half the engine), not the wall clock. */
void test_event_sliced_done_after_its_work(void)
{
	const char *head[] = { "event", "order", NULL };
	char out[8192];
	int drc = -1, rc = t_run_beside_deep("0.6", head, out, sizeof(out), &drc);
	CHECK(rc == 0 && drc == 0, "child exit %d, deep child exit %d:\n%s", rc, drc, out);
}

void test_event_mps_done_after_its_lane(void)
{
	char pipe[300], sock[340], env[340];
	snprintf(pipe, sizeof(pipe), "%s/event-mps", t_tmp());
	snprintf(sock, sizeof(sock), "%s/control", pipe);
	snprintf(env, sizeof(env), "CUDA_MPS_PIPE_DIRECTORY=%s", pipe);
	mkdir(pipe, 0755);
	FILE *f = fopen(sock, "w"); /* stands for the MPS control daemon's socket */
	CHECK(f && fclose(f) == 0, "%s", sock);
	const char *extra[] = { env, NULL };
	RUN_EVENT(extra, "mps");
}

void test_event_unrecorded_is_complete(void) { RUN_EVENT(NULL, "unrecorded"); }
void test_event_destroy_bad_handle(void) { RUN_EVENT(NULL, "bad_handle"); }
void test_event_create_needs_context(void) { RUN_EVENT(NULL, "no_context"); }

void test_event_capture_refuses_record(void)
{
	const char *capturing[] = { "FAKEGPU_CAPTURING=1", NULL };
	RUN_EVENT(capturing, "capture", "1");
	RUN_EVENT(NULL, "capture", "0");
}

void test_event_capture_mode_per_thread(void)
{
	const char *capturing[] = { "FAKEGPU_CAPTURING=1", NULL };
	RUN_EVENT(capturing, "capture_mode");
}
