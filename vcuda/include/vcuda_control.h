/*
 * vcuda_control.h - the two files between the node's compute controller and libvcuda.so.
 *
 * vcuda.control  written ONLY by the device plugin (one controller per GPU, on the host),
 *                mounted read-only into the container next to vcuda.config. It carries the
 *                launch allowance per device and a heartbeat. A container cannot write it.
 * vcuda.usage    in the container's shared dir, written by libvcuda.so: the cost units each
 *                device's launches added up to and how often a launch had to wait. The node
 *                reads it as an untrusted report (it only decides how the GPU's measured busy
 *                time is split; a container that under-reports is charged what it was allowed).
 *
 * Go mirror: api/control.go (checked byte for byte against this header by
 * api/control_test.go). Little-endian, fixed size, no pointers. Header-only.
 *
 * Consistency: the node bumps seq to an odd value, writes the device entry, then bumps seq
 * to the next even value (a seqlock); readers retry while seq is odd or changed under them.
 * A reader that sees seq stop changing for VCUDA_CONTROL_STALE_PERIODS node periods (by its
 * own clock) treats the node controller as gone and holds fallback_rate.
 */
#ifndef VCUDA_CONTROL_H
#define VCUDA_CONTROL_H

#include <stddef.h>
#include <stdint.h>

#include "vcuda_config.h"

#define VCUDA_CONTROL_MAGIC 0x4C544356u /* bytes "VCTL" */
#define VCUDA_CONTROL_VERSION 2u
/* Version 1 ends before cost_bits, its entries where they are: the device plugin keeps writing
 * the files of containers started before version 2 as they are, and libvcuda reads them without
 * costs. */
#define VCUDA_CONTROL_SIZE_V1 (64 + 64 * VCUDA_MAX_DEVICES)
#define VCUDA_CONTROL_FILE "vcuda.control" /* beside the config file */
#define VCUDA_CONTROL_STALE_PERIODS 5
#define VCUDA_SLOT_CONFINE 1u /* slot_flags: launch only within the slot */
#define VCUDA_USAGE_MAGIC 0x47535556u /* bytes "VUSG" */
#define VCUDA_USAGE_VERSION 1u
#define VCUDA_USAGE_FILE "vcuda.usage" /* in the shared dir */

enum vcuda_control_mode {
	VCUDA_CONTROL_NONE = 0,      /* no decision yet: the limiter decides locally */
	VCUDA_CONTROL_LIMITED = 1,   /* admit launches while launched <= allowed(now) */
	VCUDA_CONTROL_UNLIMITED = 2, /* admit everything (balance: nobody else needs the GPU) */
};

struct vcuda_control_device {
	uint64_t seq;           /* seqlock + heartbeat, see above */
	uint64_t allowance;     /* cumulative cost units the container may have launched at stamp_ns */
	uint64_t rate_bits;     /* double, cost units per ns from stamp_ns on */
	uint64_t fallback_bits; /* double, cost units per ns to hold when the node is gone */
	uint64_t stamp_ns;      /* the node's CLOCK_MONOTONIC when allowance was set */
	uint32_t mode;          /* enum vcuda_control_mode */
	uint32_t period_us;     /* the node controller's period */
	/* Launch slots (0: none). Where several held-back containers share the GPU, the node gives
	 * each a slot of every slot_period_us of CLOCK_MONOTONIC, [slot_start_us, + slot_len_us),
	 * the slots one after the other: the limiter takes a slot period's credit at once, at its
	 * slot's start, and a launch beyond it waits for the next start. The containers' queued
	 * work then takes turns instead of time-slicing, which pays a context switch every slice.
	 * Without VCUDA_SLOT_CONFINE in slot_flags, slot_len_us is the node's plan (the target's
	 * part of the period) and the limiter reads only the start; with it, the limiter also
	 * launches only within [start, start + len): a launch after the slot's end waits for the
	 * next start, credit or not (where every tenant of the GPU has a slot, so that their
	 * queues take turns although each has credit to spare). */
	uint32_t slot_period_us;
	uint32_t slot_start_us;
	uint32_t slot_len_us;
	uint32_t slot_flags; /* VCUDA_SLOT_* */
};

struct vcuda_control {
	uint32_t magic;        /* VCUDA_CONTROL_MAGIC */
	uint32_t version;      /* VCUDA_CONTROL_VERSION */
	uint32_t size;         /* sizeof(struct vcuda_control) */
	uint32_t device_count; /* as in the config */
	uint64_t reserved[6];  /* 0 */
	struct vcuda_control_device dev[VCUDA_MAX_DEVICES]; /* same order as the config */
	/* double each, under dev[i].seq: the node's estimate of the GPU time (ns) one cost unit of
	 * this container's launches takes on device i (0: none yet). In a confining slot the
	 * limiter keeps no more of its work queued than that says the slot has left, and at most a
	 * few milliseconds of it (queue.c): queued work that ran past the slot's end would
	 * time-slice with the next slot's. After the entries, which stay where version 1 has
	 * them. */
	uint64_t cost_bits[VCUDA_MAX_DEVICES];
};

struct vcuda_usage_device {
	uint64_t launched; /* cost units of every admitted launch (atomic add, the hot path) */
	uint64_t waits;    /* launches that had to wait for allowance */
	uint64_t reserved[6];
};

struct vcuda_usage {
	uint32_t magic;        /* VCUDA_USAGE_MAGIC */
	uint32_t version;      /* VCUDA_USAGE_VERSION */
	uint32_t size;         /* sizeof(struct vcuda_usage) */
	uint32_t device_count; /* as in the config */
	uint64_t reserved[6];
	struct vcuda_usage_device dev[VCUDA_MAX_DEVICES];
};

_Static_assert(sizeof(struct vcuda_control_device) == 64, "control device entry is one line");
_Static_assert(offsetof(struct vcuda_control_device, allowance) == 8, "allowance at 8");
_Static_assert(offsetof(struct vcuda_control_device, rate_bits) == 16, "rate at 16");
_Static_assert(offsetof(struct vcuda_control_device, fallback_bits) == 24, "fallback at 24");
_Static_assert(offsetof(struct vcuda_control_device, stamp_ns) == 32, "stamp at 32");
_Static_assert(offsetof(struct vcuda_control_device, mode) == 40, "mode at 40");
_Static_assert(offsetof(struct vcuda_control_device, period_us) == 44, "period at 44");
_Static_assert(offsetof(struct vcuda_control_device, slot_period_us) == 48, "slot period at 48");
_Static_assert(offsetof(struct vcuda_control_device, slot_start_us) == 52, "slot start at 52");
_Static_assert(offsetof(struct vcuda_control_device, slot_len_us) == 56, "slot length at 56");
_Static_assert(offsetof(struct vcuda_control_device, slot_flags) == 60, "slot flags at 60");
_Static_assert(offsetof(struct vcuda_control, dev) == 64, "control devices at 64");
_Static_assert(offsetof(struct vcuda_control, cost_bits) == VCUDA_CONTROL_SIZE_V1, "costs after the entries");
_Static_assert(sizeof(struct vcuda_control) == 64 + 72 * VCUDA_MAX_DEVICES, "control size");
_Static_assert(sizeof(struct vcuda_usage_device) == 64, "usage device entry is one line");
_Static_assert(offsetof(struct vcuda_usage_device, waits) == 8, "waits at 8");
_Static_assert(offsetof(struct vcuda_usage, dev) == 64, "usage devices at 64");
_Static_assert(sizeof(struct vcuda_usage) == 64 + 64 * VCUDA_MAX_DEVICES, "usage size");

#endif
