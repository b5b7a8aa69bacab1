/*
 * t_node.c - libvcuda under a node controller, scripted here (t_node.h): launches follow the
 * allowance, a stale heartbeat holds the fallback rate, and the limiter reports its work in
 * vcuda.usage. The closed loop with the real controller runs in device-plugin/compute on this
 * same fake driver. Slots: t_slots.c.
 */
#include <math.h>

#include "t_node.h"

void test_node_allowance_obeyed(void)
{
	for (int attempt = 1;; attempt++) {
		struct t_container ct;
		struct node n = { .share = 0.55, .mode = VCUDA_CONTROL_LIMITED, .beats = -1 };
		uint64_t launched;
		double got = t_node_run(&ct, &n, 2500, 1500, &launched);
		t_note("node allows 55%% (config says 30%%): %.1f%%; %llu units reported", got,
		       (unsigned long long)launched);
		if (attempt < ATTEMPTS && fabs(got - 55) > 3)
			continue;
		CHECK(fabs(got - 55) <= 3, "share %.1f%%, want the node's 55 +- 3", got);
		CHECK(launched > 0, "nothing reported in vcuda.usage");
		return;
	}
}

void test_node_unlimited(void)
{
	for (int attempt = 1;; attempt++) {
		struct t_container ct;
		struct node n = { .share = 0.1, .mode = VCUDA_CONTROL_UNLIMITED, .beats = -1 };
		uint64_t launched;
		double got = t_node_run(&ct, &n, 2000, 1000, &launched);
		t_note("node says unlimited (config says 30%%): %.1f%%", got);
		if (attempt < ATTEMPTS && got < 95)
			continue;
		CHECK(got >= 95, "unlimited by the node, got %.1f%%", got);
		return;
	}
}

/* The node sends 5 heartbeats (0.5 s) and falls silent: after the stale window the container
 * holds the node's fallback rate (40%), not the config's 30% and not the whole GPU. */
void test_node_stale_holds_fallback(void)
{
	for (int attempt = 1;; attempt++) {
		struct t_container ct;
		struct node n = { .share = 0.40, .mode = VCUDA_CONTROL_LIMITED, .beats = 5 };
		uint64_t launched;
		double got = t_node_run(&ct, &n, 3000, 1500, &launched);
		t_note("node silent after 0.5 s, fallback 40%%: %.1f%% over 1.5-3 s", got);
		if (attempt < ATTEMPTS && fabs(got - 40) > 3)
			continue;
		CHECK(fabs(got - 40) <= 3, "share %.1f%%, want the fallback 40 +- 3", got);
		return;
	}
}

/* The node answers only after 0.6 s: until then the limiter decides locally, at the config's
 * 90%, and has a local rate by then. Once the node answers its allowance (10%) rules: a launch
 * beyond it waits, and never falls back on the local credit (that let a lone 10% container run
 * the whole GPU beside a node allowing 10%: fake driver, the device plugin's closed loop). */
void test_node_rules_over_local_rate(void)
{
	for (int attempt = 1;; attempt++) {
		struct t_container ct;
		struct node n = { .share = 0.10, .mode = VCUDA_CONTROL_LIMITED, .beats = -1,
				  .delay_ms = 600, .core = 90 };
		uint64_t launched;
		double got = t_node_run(&ct, &n, 3000, 1500, &launched);
		t_note("local 90%% for 0.6 s, then the node allows 10%%: %.1f%% over 1.5-3 s", got);
		if (attempt < ATTEMPTS && fabs(got - 10) > 3)
			continue;
		CHECK(fabs(got - 10) <= 3, "share %.1f%%, want the node's 10 +- 3", got);
		return;
	}
}

/* A held-back container launches in bursts (compute.c VC_QUANTUM_NS): at the node's 30% its
 * 200 us kernels come about 5 ms of its rate at a time (7 kernels, each of its two processes
 * waiting once a burst: 4.0 kernels a wait), so a time-sliced GPU switches to it once a burst.
 * Counted by the waits it reports: paced a kernel at a time, every launch waited (1.0). */
void test_node_bursts(void)
{
	for (int attempt = 1;; attempt++) {
		struct t_container ct;
		struct node n = { .share = 0.30, .mode = VCUDA_CONTROL_LIMITED, .beats = -1 };
		uint64_t launched;
		double got = t_node_run(&ct, &n, 2500, 1500, &launched);
		struct vcuda_usage_device u = t_node_usage(&ct);
		double kernels = (double)u.launched / 1600, per = u.waits ? kernels / (double)u.waits : 0;
		t_note("node allows 30%%: %.1f%%; %.0f kernels, %llu waits (%.1f kernels a wait)", got,
		       kernels, (unsigned long long)u.waits, per);
		int ok = fabs(got - 30) <= 3 && per >= 3;
		if (attempt < ATTEMPTS && !ok)
			continue;
		CHECK(fabs(got - 30) <= 3, "share %.1f%%, want the node's 30 +- 3", got);
		CHECK(per >= 3, "%.1f kernels a wait, want bursts of 3 or more", per);
		return;
	}
}
