/*
 * harness.h - a tiny test runner for vctest.
 *
 * vctest runs every case (or those named on the command line) and ends with the line
 * "N passed, M failed". Cases run in the parent, which never initializes libvcuda itself:
 * anything that needs the limiter runs in a child, `vctest child <mode> args...`, spawned
 * with its own environment (config path, fake devices), so each child reads its config once
 * like a real container process.
 */
#ifndef VCTEST_HARNESS_H
#define VCTEST_HARNESS_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "../include/cuda_api.h"
#include "../include/nvml_api.h"
#include "../include/vcuda_config.h"

#define MiB (1024ull * 1024ull)

struct t_case {
	const char *name;
	void (*fn)(void);
};

struct t_child {
	const char *mode;
	int (*fn)(int argc, char **argv); /* returns the child's exit code */
};

/* failing a check records it and returns from the case */
void t_fail_at(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			t_fail_at(__FILE__, __LINE__, "check failed: " #cond " -- " __VA_ARGS__); \
			return;                                                \
		}                                                              \
	} while (0)
/* in children: print and exit 1 */
#define CCHECK(cond, ...)                                                      \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "%s:%d: check failed: %s -- ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                          \
			fprintf(stderr, "\n");                                 \
			_exit_child(1);                                        \
		}                                                              \
	} while (0)
void _exit_child(int code) __attribute__((noreturn));
void t_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* a fresh device UUID, unique within the run */
void t_uuid(char out[64]);
/* a container: its shared dir and its config file, under the run's temp dir */
struct t_container {
	char dir[256];
	char cfg[256];
	struct vcuda_config c;
};
void t_container(struct t_container *ct, int policy);
void t_container_dev(struct t_container *ct, const char *uuid, uint64_t mib, unsigned core);
int t_container_write(struct t_container *ct);
/* a fake GPU (80 GiB) and a container unlimited on it (core 100, 1 GiB cap), for the cases that
 * check the fake's own model: its uuid and the environment entries that name both */
struct t_fake_gpu {
	char uuid[64];
	char devices[128]; /* FAKEGPU_DEVICES=<uuid>:81920 */
	char config[300];  /* VCUDA_CONFIG=<the container's config> */
};
int t_fake_gpu(struct t_fake_gpu *g); /* 0, or -1 when the config could not be written */

/* environment for a child: NULL-terminated "K=V" overrides on top of ours */
pid_t t_spawn(const char *const *env, const char *const *args, int *out_fd);
int t_wait(pid_t pid);                     /* exit code, or 128 + signal */
int t_run(const char *const *env, const char *const *args, char *out, size_t outlen);
const char *t_tmp(void);
const char *t_self(void);
int t_sanitized(void); /* running an ASan or TSan build */

/* fake GPU accounting (exported by the fake libcuda.so.1) */
int fakegpu_busy_ns(const char *uuid, const int *pids, int npids, uint64_t *busy_ns, uint64_t *now_ns);
/* t_fake.c: child mode head... UUID PID beside a deep-queued process on a time-sliced fake GPU. */
int t_run_beside_deep(const char *deep_secs, const char *const *head, char *out, size_t outlen, int *deep_rc);
/* CLOCK_MONOTONIC in seconds. */
double t_mono_s(void);
/* In a child: the GPU time process pid (0: every process) has had on the fake GPU uuid. */
uint64_t t_busy_of(const char *uuid, int pid);
int fakegpu_mem(const char *uuid, uint64_t *used, uint64_t *peak);

/* shared child helpers */
void t_ctx(int ordinal); /* cuInit + context on the device, or exit */

#endif
