/*
 * t_slots.c - launch slots from the node (t_node.h): a held-back container launches its credit
 * at its slot's start, a confining slot ends its launches at the slot's end, and bounds its queue
 * there.
 */
#include <math.h>
#include <string.h>

#include "t_node.h"

/* Given a slot (40 ms periods, from 10 ms for 12), a held-back container launches its
 * period's credit at the slot's start and waits for the next: nearly all its launches come
 * inside the slot, and its share holds. Without the slot, its bursts of VC_QUANTUM_NS come at
 * any time (about 30% of them inside: the slot's part of the period). */
void test_node_slots(void)
{
	for (int attempt = 1;; attempt++) {
		struct t_container ct;
		struct watch w = { .period_us = 40000, .start_us = 10000, .len_us = 12000 };
		struct node n = { .share = 0.30, .mode = VCUDA_CONTROL_LIMITED, .beats = -1,
				  .slot = { 40000, 10000, 12000 }, .watch = &w };
		uint64_t launched;
		double got = t_node_run(&ct, &n, 2500, 1500, &launched);
		double inside = w.in + w.out ? 100.0 * (double)w.in / (double)(w.in + w.out) : 0;
		uint64_t seen = w.in + w.out + w.unplaced;
		double unplaced = seen ? 100.0 * (double)w.unplaced / (double)seen : 0;
		t_note("node allows 30%% in a 12 ms slot of 40: %.1f%%; %.0f%% of the launches in the slot (%.0f%% not placed: the watcher late)",
		       got, inside, unplaced);
		int ok = fabs(got - 30) <= 3 && inside >= 90;
		if (attempt < ATTEMPTS && !ok)
			continue;
		CHECK(fabs(got - 30) <= 3, "share %.1f%%, want the node's 30 +- 3", got);
		CHECK(inside >= 90, "%.0f%% of the launches in the slot, want 90%% or more", inside);
		return;
	}
}

/* A confining slot ends the launches at the slot's end, credit or not. The node allows 90% and
 * gives a 12 ms slot of every 40: plain, the container spends its credit whenever (a third of
 * its launches in the slot, 90% of the GPU); confining, all its launches come in the slot, and
 * with 2 ms queued at most (a program that synchronizes) it gets the slot and that queue: 35%.
 * (Launches queue ahead of the GPU: with the fake's 20 ms, 80%. The node's credit, not the
 * slot, holds a share.) */
void test_node_slot_confines(void)
{
	for (int attempt = 1;; attempt++) {
		double got[2], inside[2];
		for (int confine = 0; confine < 2; confine++) {
			struct t_container ct;
			struct watch w = { .period_us = 40000, .start_us = 10000, .len_us = 12000 };
			struct node n = { .share = 0.90, .mode = VCUDA_CONTROL_LIMITED, .beats = -1,
					  .slot = { 40000, 10000, 12000 },
					  .slot_flags = confine ? VCUDA_SLOT_CONFINE : 0, .queue_us = 2000,
					  .watch = &w };
			uint64_t launched;
			got[confine] = t_node_run(&ct, &n, 2500, 1500, &launched);
			inside[confine] = w.in + w.out ? 100.0 * (double)w.in / (double)(w.in + w.out) : 0;
			t_note("node allows 90%% in a 12 ms slot of 40, %s: %.1f%%; %.0f%% of the launches in the slot",
			       confine ? "confining" : "plain", got[confine], inside[confine]);
		}
		int ok = fabs(got[1] - 35) <= 4 && inside[1] >= 90 && got[0] >= 80 && inside[0] < 60;
		if (attempt < ATTEMPTS && !ok)
			continue;
		CHECK(fabs(got[1] - 35) <= 4, "confining: share %.1f%%, want the slot and the queue's 35 +- 4", got[1]);
		CHECK(inside[1] >= 90, "confining: %.0f%% of the launches in the slot, want 90%% or more", inside[1]);
		CHECK(got[0] >= 80 && inside[0] < 60, "plain: share %.1f%%, %.0f%% in the slot; want the node's 90%% spent anywhere",
		      got[0], inside[0]);
		return;
	}
}

/* With the node's cost per unit, a confining slot also bounds what the container keeps queued
 * (queue.c): the node allows 90% in a 12 ms slot of 40, and the fake GPU queues 20 ms (a program
 * that never synchronizes, as deep as its queue lets it). Without the cost the whole queue runs
 * past the slot's end (about 80%); with it, one process gets about the slot (30%) and a kernel
 * past it. Each process bounds its own queue: two of one container, each ending its queue at the
 * slot's end as if alone, queue behind each other and spill about 4 ms a period more (42%).
 * Where the stream is being captured into a graph, no event is recorded there (it would join the
 * graph) and none is queried outside relaxed capture mode; the legacy stream these processes
 * launch on answers CUDA_ERROR_STREAM_CAPTURE_IMPLICIT meanwhile (a real driver's answer while
 * another stream captures): the bound lets go, and nothing fails. A version 1 control file (a container started before the costs) is read without
 * them: the node's slot, no bound (the local controller, had the file been refused, would hold
 * the config's 30%). */
void test_node_slot_bounds_queue(void)
{
	for (int attempt = 1;; attempt++) {
		double got[5];
		int refused = 0;
		for (int i = 0; i < 5; i++) {
			struct t_container ct;
			struct node n = { .share = 0.90, .mode = VCUDA_CONTROL_LIMITED, .beats = -1,
					  .slot = { 40000, 10000, 12000 }, .slot_flags = VCUDA_SLOT_CONFINE,
					  .queue_us = 20000, .cost = i ? NS_PER_UNIT : 0, .procs = i == 2 ? 2 : 1,
					  .capturing = i == 3, .v1 = i == 4 };
			uint64_t launched;
			got[i] = t_node_run(&ct, &n, 2500, 1500, &launched);
			t_note("node allows 90%% in a confining 12 ms slot of 40, 20 ms queued, %d process%s, %s%s%s: %.1f%%",
			       n.procs, n.procs > 1 ? "es" : "", i ? "its cost published" : "no cost",
			       n.capturing ? ", every stream capturing" : "",
			       n.v1 ? ", a version 1 control file" : "", got[i]);
			if (n.capturing && strstr(n.out, "failed")) {
				refused = 1;
				t_note("capturing: %s", n.out);
			}
		}
		int ok = got[0] >= 60 && got[1] >= 27 && got[1] <= 36 && got[2] >= 27 && got[2] <= 50 &&
			 got[3] >= 60 && !refused && got[4] >= 60;
		if (attempt < ATTEMPTS && !ok)
			continue;
		CHECK(got[0] >= 60, "no cost: share %.1f%%, want the queue past the slot (60 or more)", got[0]);
		CHECK(got[1] >= 27 && got[1] <= 36, "bounded, one process: share %.1f%%, want the slot's 30 and a kernel (27..36)", got[1]);
		CHECK(got[2] >= 27 && got[2] <= 50, "bounded, two processes: share %.1f%%, want 27..50", got[2]);
		CHECK(got[3] >= 60 && !refused, "capturing: share %.1f%%, %s; want the queue let go (60 or more), no call refused",
		      got[3], refused ? "a call refused" : "nothing refused");
		CHECK(got[4] >= 60, "version 1 control file: share %.1f%%, want the node's slot without a bound (60 or more)", got[4]);
		return;
	}
}
