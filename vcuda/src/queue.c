/*
 * queue.c - how much of its work a process keeps queued in a confining slot.
 *
 * A confining slot (node.c) ends a container's launches at the slot's end, but what it launched
 * runs when the GPU gets to it. A program that never synchronizes (a training loop that reads
 * no loss back) keeps as much queued as CUDA lets it, 100 ms and more: a whole slot period's
 * credit launched at its slot's start, while the GPU still runs the other tenant's spill, runs
 * past its own slot's end, and the two time-slice as if there were no slots (one program at
 * 50 + 50 got 46.6 + 46.6 of the GPU's time, a probe beside such a PyTorch 45.0 for 50,
 * simulated H200: device-plugin/compute sim_queue_test.go).
 *
 * So in a confining slot this process records an event on a launch's stream after about
 * VC_EVENT_NS of its work (at the node's cost per unit, vcuda_control.h cost_bits), learns what
 * of its queue has run from the events that completed, and holds a launch while what it has
 * queued (less what ran since the last event was seen complete) is more than VC_AHEAD_NS or
 * would run past the slot's end. The launch that goes on may run past it: one kernel, where
 * before a whole queue did. A launch on an empty queue goes on whatever it costs.
 *
 * What it cannot see: work on other streams than the one its last event went to (the bound is
 * then looser, never tighter) and work it launched outside a confining slot. A stream being
 * captured into a graph gets no event (a record there would become part of the graph, and the
 * captured launches do not run now), and the event calls run in relaxed capture mode, so that
 * another thread's global-mode capture is not invalidated by them. Any other failure of an
 * event call turns the bound off for the device in this process (its launches go on as
 * without it) and says so once.
 */
#include "vcuda.h"

/* An event after about this much of the process's work (at the node's cost). */
#define VC_EVENT_NS 1000000.0
/* At most this much of its work queued in a confining slot; a held launch looks again after
 * VC_POLL_NS at most (device-plugin/compute sim_limiter_test.go mirrors both). */
#define VC_AHEAD_NS 4000000.0
#define VC_POLL_NS 1000000.0

static void reset_locked(struct vc_queue *q, CUcontext ctx)
{
	for (int i = 0; i < q->nev; i++)
		REAL(cuEventDestroy_v2)(q->pool[i]); /* of a context perhaps gone: errors ignored */
	q->nev = 0;
	q->head = q->n = 0;
	q->queued = q->done = q->marked = q->seen_ns = 0;
	q->ctx = ctx;
	q->last = NULL;
}

static void fail_locked(struct vc_queue *q, int idx, const char *call, CUresult rc)
{
	q->off = 1;
	vc_say_once(VC_MSG_QUEUE, "vcuda: %s failed (%d) on %s: this process's queued work is not "
		    "bounded in its confining slots from now on", call, (int)rc,
		    vcg.cfg.devices[idx].uuid);
}

/* The process's queue of device idx, locked, its events of the current context; NULL where
 * the bound is off. */
static struct vc_queue *lock_queue(int idx)
{
	struct vc_queue *q = &vcg.queue[idx];
	pthread_mutex_lock(&q->mu);
	if (q->off) {
		pthread_mutex_unlock(&q->mu);
		return NULL;
	}
	CUcontext cur = NULL;
	CUresult rc = REAL(cuCtxGetCurrent)(&cur);
	if (rc != CUDA_SUCCESS) {
		fail_locked(q, idx, "cuCtxGetCurrent", rc);
		pthread_mutex_unlock(&q->mu);
		return NULL;
	}
	if (cur != q->ctx)
		reset_locked(q, cur);
	return q;
}

static int relaxed(CUstreamCaptureMode *m)
{
	*m = CU_STREAM_CAPTURE_MODE_RELAXED;
	return REAL(cuThreadExchangeStreamCaptureMode)(m) == CUDA_SUCCESS;
}

/* An event after what is queued on s; 0 where none could be recorded (a capture, no event
 * free, a failure: then the bound is off). */
static int record_locked(struct vc_queue *q, int idx, CUstream s, int ptsz)
{
	if (q->n == VC_QUEUE_EVENTS)
		return 0;
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	CUresult rc = ptsz ? REAL(cuStreamIsCapturing_ptsz)(s, &st) : REAL(cuStreamIsCapturing)(s, &st);
	if (rc == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) /* the legacy stream while another captures */
		return 0;
	if (rc != CUDA_SUCCESS) {
		fail_locked(q, idx, "cuStreamIsCapturing", rc);
		return 0;
	}
	if (st != CU_STREAM_CAPTURE_STATUS_NONE)
		return 0;
	unsigned slot = (q->head + q->n) % VC_QUEUE_EVENTS;
	if (slot >= (unsigned)q->nev) { /* the pool fills in order: slot == nev */
		rc = REAL(cuEventCreate)(&q->pool[slot], CU_EVENT_DISABLE_TIMING);
		if (rc != CUDA_SUCCESS) {
			fail_locked(q, idx, "cuEventCreate", rc);
			return 0;
		}
		q->nev++;
	}
	rc = ptsz ? REAL(cuEventRecord_ptsz)(q->pool[slot], s) : REAL(cuEventRecord)(q->pool[slot], s);
	if (rc != CUDA_SUCCESS) {
		fail_locked(q, idx, "cuEventRecord", rc);
		return 0;
	}
	q->at[slot] = q->queued;
	q->n++;
	q->marked = q->queued;
	return 1;
}

/* What of the queue has run: the events that completed, oldest first, seen now. */
static void poll_locked(struct vc_queue *q, int idx, uint64_t now)
{
	while (q->n) {
		CUresult rc = REAL(cuEventQuery)(q->pool[q->head]);
		if (rc == CUDA_ERROR_NOT_READY)
			return;
		if (rc != CUDA_SUCCESS) {
			fail_locked(q, idx, "cuEventQuery", rc);
			return;
		}
		q->done = q->at[q->head];
		q->seen_ns = now;
		q->head = (q->head + 1) % VC_QUEUE_EVENTS;
		q->n--;
	}
}

void vc_queue_cost(int idx, double cost)
{
	__atomic_store_n(&vcg.queue[idx].cost_bits, vc_d2bits(cost > 0 ? cost : 0), __ATOMIC_RELAXED);
}

uint64_t vc_queue_wait(int idx, uint64_t now, uint64_t end)
{
	double ns = vc_bits2d(__atomic_load_n(&vcg.queue[idx].cost_bits, __ATOMIC_RELAXED));
	if (ns <= 0)
		return 0;
	struct vc_queue *q = lock_queue(idx);
	if (!q)
		return 0;
	CUstreamCaptureMode m;
	uint64_t wait = 0;
	if (!relaxed(&m)) {
		fail_locked(q, idx, "cuThreadExchangeStreamCaptureMode", CUDA_ERROR_UNKNOWN);
		goto out;
	}
	poll_locked(q, idx, now);
	if (q->off || q->done >= q->queued)
		goto restore;
	/* the oldest chunk not seen complete has been running since the last one was seen, for
	 * as long as it is */
	uint64_t chunk = (q->n ? q->at[q->head] : q->queued) - q->done;
	double ran = (double)(now > q->seen_ns ? now - q->seen_ns : 0);
	if (ran > (double)chunk * ns)
		ran = (double)chunk * ns;
	double back = (double)(q->queued - q->done) * ns - ran, w;
	double left = (double)(end > now ? end - now : 0);
	if (back <= 0)
		goto restore;
	if (back > left) /* not in this slot: look again, until its end */
		w = left < VC_POLL_NS ? left : VC_POLL_NS;
	else if (back > VC_AHEAD_NS)
		w = back - VC_AHEAD_NS < VC_POLL_NS ? back - VC_AHEAD_NS : VC_POLL_NS;
	else
		goto restore;
	/* an event after what is queued tells when it has run; where none is pending and
	 * none can be recorded, what is queued is taken as run */
	if (q->marked < q->queued && q->last)
		record_locked(q, idx, q->last, q->last_ptsz);
	if (q->off || !q->n) {
		q->done = q->queued;
		goto restore;
	}
	wait = w < 20000 ? 20000 : (uint64_t)w;
restore:
	REAL(cuThreadExchangeStreamCaptureMode)(&m);
out:
	pthread_mutex_unlock(&q->mu);
	return wait;
}

void vc_queue_launched(int idx, uint64_t cost, CUstream s, int ptsz)
{
	double ns = vc_bits2d(__atomic_load_n(&vcg.queue[idx].cost_bits, __ATOMIC_RELAXED));
	struct vc_queue *q = lock_queue(idx);
	if (!q)
		return;
	q->queued += cost;
	q->last = s;
	q->last_ptsz = ptsz;
	CUstreamCaptureMode m;
	if (ns > 0 && (double)(q->queued - q->marked) * ns >= VC_EVENT_NS) {
		if (relaxed(&m)) {
			record_locked(q, idx, s, ptsz);
			REAL(cuThreadExchangeStreamCaptureMode)(&m);
		} else {
			fail_locked(q, idx, "cuThreadExchangeStreamCaptureMode", CUDA_ERROR_UNKNOWN);
		}
	}
	pthread_mutex_unlock(&q->mu);
}

/* At init, and in a fork child: the parent's events are not its own, and its locks may have
 * been held. */
void vc_queue_init(void)
{
	for (int i = 0; i < VCUDA_MAX_DEVICES; i++) {
		struct vc_queue *q = &vcg.queue[i];
		pthread_mutex_init(&q->mu, NULL);
		q->nev = 0;
		q->head = q->n = 0;
		q->queued = q->done = q->marked = q->seen_ns = 0;
		q->ctx = NULL;
		q->last = NULL;
	}
}
