/*
 * t_node.h - the scripted node controller of the node and slot cases (t_node_run.c): it writes
 * a container's vcuda.control (beside its config) the way the device plugin's controller does,
 * runs burn processes in the container on their own fake GPU, and watches their launches.
 *
 * Kernels: 200 blocks x 256 threads = 1600 cost units, 200 us on the fake GPU
 * (FAKEGPU_NS_PER_BLOCK=1000): 125 GPU ns per unit.
 */
#ifndef T_NODE_H
#define T_NODE_H

#include <pthread.h>
#include <stdint.h>

#include "../include/vcuda_control.h"
#include "harness.h"

#define NS_PER_UNIT 125.0
#define ATTEMPTS 3

/* Watches the container's launches while the node runs: where in the slot period they came. */
struct watch {
	char usage[300];
	uint32_t period_us, start_us, len_us;
	uint64_t in, out; /* units seen launched inside the slot (and 1 ms after it), outside */
	uint64_t unplaced; /* units seen after the watcher slept past 2 ms: when they came is not known */
	int stop;         /* atomic */
};

struct node {
	struct vcuda_control *c;
	double share;        /* what the scripted node allows */
	uint32_t mode;
	long beats;          /* heartbeats to send, then fall silent (-1: forever) */
	long delay_ms;       /* silent this long first (the limiter decides locally meanwhile) */
	int core;            /* the config's share (0: 30) */
	char usage[300];     /* the container's vcuda.usage: the allowance starts from its count */
	uint32_t slot[3];    /* the slot it gives: period, start, length (us; 0: none) */
	uint32_t slot_flags; /* VCUDA_SLOT_* */
	long queue_us;       /* the fake GPU's queue (FAKEGPU_MAX_QUEUE_US; 0: its default, 20 ms) */
	double cost;         /* the GPU ns per unit it publishes (0: none) */
	int procs;           /* burn processes in the container (0: 2) */
	int capturing;       /* FAKEGPU_CAPTURING=1: every stream reports a graph capture */
	int v1;              /* a version 1 control file (before the costs) */
	char out[2048];      /* the first process's output, with capturing */
	struct watch *watch; /* watches the container's launches while the node runs */
	pthread_t watch_th;
	int stop; /* atomic */
	pthread_t th;
};

/* One container of 2 burn processes (n->procs) on its own fake GPU for ms, under node n; share
 * measured over the last measure_ms (-1 where something failed), and what it reported. */
double t_node_run(struct t_container *ct, struct node *n, long ms, long measure_ms, uint64_t *launched);
/* Device 0 of the container's vcuda.usage (zeros where it cannot be read). */
struct vcuda_usage_device t_node_usage(const struct t_container *ct);

#endif
