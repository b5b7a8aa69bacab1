/* fake_event.c - CUDA events and stream-capture status on the fake GPUs.
 *
 * The fake has one queue of work per process per device (streams are handles only), so an
 * event completes once everything the process had queued on the event's device before the
 * record has run. What "has run" means depends on where the work went (fk_enqueue), and a
 * record keeps the point it must reach in the same terms:
 *   FK_EV_AT      one FIFO timeline, or an MPS client's own lane: the end time of the
 *                 process's last kernel (fk_dev.last_end), reached when the clock passes it
 *                 (fk_sync waits for the same);
 *   FK_EV_SERVED  time slicing: the GPU time the process's pid slot will have been served once
 *                 all it has queued has run (sched_ns + queued[slot]), reached when the
 *                 timeline, played forward to now, has served that much, or the queue is empty
 *                 (fk_slice_sync waits for the latter).
 * There is no graph capture: FAKEGPU_CAPTURING=1 stands for an application capturing its
 * streams in global mode (fake.h). Every stream then reports a capture, but the legacy stream
 * (NULL through the entry points without _ptsz, or CU_STREAM_LEGACY), which cannot be captured
 * and is unusable while a blocking stream is, answers CUDA_ERROR_STREAM_CAPTURE_IMPLICIT as a
 * real driver does. A record refuses, as a limiter must never put its own events into the
 * application's graph, and so does a query outside CU_STREAM_CAPTURE_MODE_RELAXED, as real CUDA
 * refuses potentially unsafe calls during a global capture; both are counted for tests.
 */
#include <stdlib.h>

#include "fake.h"
#include "fake_mps.h"

#define FK_EV_MAGIC 0x54564546u /* "FEVT": not FK_MAGIC, so no other fake handle passes */
#define FK_EV_FLAGS 0x7u        /* BLOCKING_SYNC | DISABLE_TIMING | INTERPROCESS */

enum fk_ev_kind { FK_EV_NONE, FK_EV_AT, FK_EV_SERVED };

struct fk_event {
	uint32_t magic;
	int dev;               /* the device of the context current at creation */
	pthread_mutex_t mu;    /* guards the record below: records and queries may race */
	enum fk_ev_kind kind;  /* FK_EV_NONE: never recorded, complete */
	int slot;              /* FK_EV_SERVED: the process's pid slot */
	uint64_t target;       /* FK_EV_AT: CLOCK_MONOTONIC ns; FK_EV_SERVED: served GPU ns */
};

static struct fk_event *event_of(CUevent e)
{
	struct fk_event *ev = (struct fk_event *)e;
	return ev && ev->magic == FK_EV_MAGIC ? ev : NULL;
}

FK_EXPORT CUresult cuEventCreate(CUevent *e, unsigned int flags)
{
	int dev = fk_cur_dev();
	if (dev < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!e || (flags & ~FK_EV_FLAGS))
		return CUDA_ERROR_INVALID_VALUE;
	struct fk_event *ev = calloc(1, sizeof(*ev));
	if (!ev)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_init(&ev->mu, NULL);
	ev->dev = dev;
	ev->kind = FK_EV_NONE;
	ev->magic = FK_EV_MAGIC;
	*e = (CUevent)ev;
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuEventDestroy_v2(CUevent e)
{
	struct fk_event *ev = event_of(e);
	if (!ev)
		return CUDA_ERROR_INVALID_HANDLE;
	ev->magic = 0;
	pthread_mutex_destroy(&ev->mu);
	free(ev);
	return CUDA_SUCCESS;
}
FK_EXPORT CUresult cuEventDestroy(CUevent e) { return cuEventDestroy_v2(e); }

/* The point the process's queue on d has reached now, as a record keeps it. */
static void record_point(struct fk_dev *d, enum fk_ev_kind *kind, int *slot, uint64_t *target)
{
	struct fk_state *s = d->st;
	if (fk_mps_on() || !fk_sliced(s)) { /* fk_enqueue's order: an MPS lane, then FIFO */
		*kind = FK_EV_AT;
		*target = __atomic_load_n(&d->last_end, __ATOMIC_RELAXED);
		return;
	}
	fk_lock(s);
	fk_slice_run_locked(s, fk_now());
	int i = fk_slot_locked(s, fk.pid, fk.pidns);
	*kind = i < 0 || !s->queued[i] ? FK_EV_NONE : FK_EV_SERVED; /* nothing queued: complete */
	*slot = i;
	*target = i < 0 ? 0 : s->pids[i].sched_ns + s->queued[i];
	fk_unlock(s);
}

/* Whether the sliced timeline has served pid slot `slot` up to target; played forward first.
 * A slot no longer this process's had its queue dropped: nothing is left to run. */
static int served(struct fk_dev *d, int slot, uint64_t target)
{
	struct fk_state *s = d->st;
	fk_lock(s);
	fk_slice_run_locked(s, fk_now());
	const struct fk_pidslot *p = &s->pids[slot];
	int done = p->pid != fk.pid || p->pidns != fk.pidns || !s->queued[slot] ||
		   p->sched_ns >= target;
	fk_unlock(s);
	return done;
}

/* The legacy stream: NULL through an entry point without _ptsz, or CU_STREAM_LEGACY. */
static int legacy(CUstream s, int ptsz)
{
	return s == (CUstream)0x1 || (!s && !ptsz);
}

/* one queue per process and device: every stream is that queue */
static CUresult record(CUevent e, CUstream stream, int ptsz)
{
	struct fk_event *ev = event_of(e);
	if (!ev)
		return CUDA_ERROR_INVALID_HANDLE;
	if (fk.capturing) { /* a real driver would add the record to the graph being captured */
		__atomic_add_fetch(&fk.capture_records, 1, __ATOMIC_RELAXED);
		return legacy(stream, ptsz) ? CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
					    : CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	}
	enum fk_ev_kind kind;
	int slot = -1;
	uint64_t target;
	record_point(&fk.dev[ev->dev], &kind, &slot, &target);
	pthread_mutex_lock(&ev->mu); /* a new record replaces the last one, as in CUDA */
	ev->kind = kind;
	ev->slot = slot;
	ev->target = target;
	pthread_mutex_unlock(&ev->mu);
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuEventRecord(CUevent e, CUstream s) { return record(e, s, 0); }
FK_EXPORT CUresult cuEventRecord_ptsz(CUevent e, CUstream s) { return record(e, s, 1); }

FK_EXPORT CUresult cuEventQuery(CUevent e)
{
	struct fk_event *ev = event_of(e);
	if (!ev)
		return CUDA_ERROR_INVALID_HANDLE;
	if (fk.capturing && fk_capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
		__atomic_add_fetch(&fk.capture_unsafe, 1, __ATOMIC_RELAXED);
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	}
	pthread_mutex_lock(&ev->mu);
	enum fk_ev_kind kind = ev->kind;
	int slot = ev->slot;
	uint64_t target = ev->target;
	pthread_mutex_unlock(&ev->mu);
	int done = kind == FK_EV_NONE ||
		   (kind == FK_EV_AT ? fk_now() >= target : served(&fk.dev[ev->dev], slot, target));
	return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

/* ---- stream capture ---- */

static CUresult is_capturing(CUstream stream, int ptsz, CUstreamCaptureStatus *status)
{
	CUresult rc = fk_init();
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!status)
		return CUDA_ERROR_INVALID_VALUE;
	if (fk.capturing && legacy(stream, ptsz))
		return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT; /* *status unspecified, as in CUDA */
	*status = fk.capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st) { return is_capturing(s, 0, st); }
FK_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus *st) { return is_capturing(s, 1, st); }

/* Swaps the calling thread's capture mode (GLOBAL until changed) with *mode. */
FK_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
	if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	CUstreamCaptureMode old = fk_capture_mode;
	fk_capture_mode = *mode;
	*mode = old;
	return CUDA_SUCCESS;
}

/* ---- test query API (not part of CUDA) ---- */

/* Event records refused because the stream was being captured (FAKEGPU_CAPTURING=1). */
FK_EXPORT unsigned long fakegpu_capture_records(void)
{
	return __atomic_load_n(&fk.capture_records, __ATOMIC_RELAXED);
}

/* Event queries refused during a capture because the thread's mode was not RELAXED. */
FK_EXPORT unsigned long fakegpu_capture_unsafe(void)
{
	return __atomic_load_n(&fk.capture_unsafe, __ATOMIC_RELAXED);
}
