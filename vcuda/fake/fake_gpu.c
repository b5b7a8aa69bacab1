/* fake_gpu.c - the simulated GPUs: shared state files, memory, the kernel timeline. */

#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../include/vcuda_config.h"
#include "fake.h"
#include "fake_mps.h"

uint64_t fk_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void fk_sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

/* A synchronize's wait for about ns more of its work: asleep, then the last FK_SPIN_NS
 * spinning (yielding), as a driver does where it has cores to spare (CUDA's default schedule):
 * a process that synchronizes every 0.3 ms of work (the H200's probe) kept the card 97% busy;
 * woken by a timer, it would come back 60-100 us late every time. */
#define FK_SPIN_NS 150000ull
void fk_wait_ns(uint64_t ns)
{
	if (ns > FK_SPIN_NS) {
		fk_sleep_ns(ns - FK_SPIN_NS);
		return;
	}
	sched_yield();
}

void fk_lock(struct fk_state *s)
{
	if (pthread_mutex_lock(&s->lock) == EOWNERDEAD)
		pthread_mutex_consistent(&s->lock);
}

void fk_unlock(struct fk_state *s)
{
	pthread_mutex_unlock(&s->lock);
}

static uint64_t env_u64(const char *name, uint64_t def)
{
	const char *v = getenv(name);
	return v && *v ? strtoull(v, NULL, 10) : def;
}

/* A robust, process-shared mutex in a state file: a holder that dies leaves it usable. */
void fk_shared_mutex_init(pthread_mutex_t *m)
{
	pthread_mutexattr_t a;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(m, &a);
	pthread_mutexattr_destroy(&a);
}

struct fk_state *fk_map(const char *uuid, uint64_t total, int create)
{
	char path[640];
	snprintf(path, sizeof(path), "%s/%s.fakegpu", fk.dir, uuid);
	int fd = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0666);
	if (fd < 0)
		return NULL;
	struct fk_state *s = MAP_FAILED;
	struct stat sb;
	if (flock(fd, LOCK_EX) != 0 || fstat(fd, &sb) != 0)
		goto out;
	if ((size_t)sb.st_size < sizeof(*s) && (!create || ftruncate(fd, sizeof(*s)) != 0))
		goto out;
	s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (s != MAP_FAILED && s->magic != FK_MAGIC) {
		if (!create) {
			munmap(s, sizeof(*s));
			s = MAP_FAILED;
			goto out;
		}
		memset(s, 0, sizeof(*s));
		snprintf(s->uuid, sizeof(s->uuid), "%s", uuid);
		s->total = total;
		s->size = sizeof(*s);
		fk_shared_mutex_init(&s->lock);
		s->cur = -1;
		__atomic_store_n(&s->magic, FK_MAGIC, __ATOMIC_RELEASE);
	}
	/* Every process of a device must agree. A process that sets FAKEGPU_SLICE_US (0 too) sets
	 * the device's mode for the processes after it: the state file outlives them, and a suite
	 * that ran sliced tenants would otherwise leave the device sliced for the next ones. */
	if (s != MAP_FAILED && fk.slice_set) {
		fk_lock(s);
		s->slice_ns = fk.slice_ns;
		s->switch_ns = fk.switch_ns;
		fk_unlock(s);
	}
out:
	flock(fd, LOCK_UN);
	close(fd);
	return s == MAP_FAILED ? NULL : s;
}

static int parse_devices(const char *spec)
{
	char buf[4096];
	snprintf(buf, sizeof(buf), "%s", spec);
	char *save = NULL;
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *colon = strrchr(tok, ':');
		if (!colon || fk.ndev == FK_MAX_DEV)
			return -1;
		*colon = '\0';
		struct fk_dev *d = &fk.dev[fk.ndev];
		if (vcuda_uuid_parse(tok, d->raw) != 0)
			return -1;
		snprintf(d->uuid, sizeof(d->uuid), "%s", tok);
		d->total = strtoull(colon + 1, NULL, 10) << 20;
		fk_ctx_init(&fk.ctx[fk.ndev], fk.ndev);
		fk.bump[fk.ndev] = (uint64_t)(fk.ndev + 1) << 40;
		fk.ndev++;
	}
	return fk.ndev > 0 ? 0 : -1;
}

void fk_ctx_init(struct fk_ctx *c, int dev)
{
	c->magic = FK_MAGIC;
	c->dev = dev;
	c->held = 0;
	c->limit[0] = 1024;     /* CU_LIMIT_STACK_SIZE, bytes per thread */
	c->limit[1] = 1 << 20;  /* CU_LIMIT_PRINTF_FIFO_SIZE */
	c->limit[2] = 8 << 20;  /* CU_LIMIT_MALLOC_HEAP_SIZE */
}

/* CUDA contexts do not cross fork: the child holds none of its parent's. */
void fk_ctx_after_fork(void)
{
	pthread_mutex_init(&fk.ctx_mu, NULL);
	for (int i = 0; i < fk.ndev; i++) {
		fk_ctx_init(&fk.ctx[i], i);
		fk.primary_refs[i] = 0;
		fk.ctx_held[i] = 0;
	}
	for (int i = 0; i < FK_MAX_CTX; i++)
		fk.created[i].magic = 0;
}

/* The inode of a process's pid namespace (<dir>/ns/pid, dir = "/proc/self" or "/proc/<pid>"). */
uint64_t fk_pidns_of(const char *dir)
{
	char p[128];
	struct stat sb;
	snprintf(p, sizeof(p), "%s/ns/pid", dir);
	return stat(p, &sb) == 0 ? (uint64_t)sb.st_ino : 0;
}

static void fk_after_fork(void)
{
	fk.pid = getpid();
	fk.pidns = fk_pidns_of("/proc/self");
	fk_ctx_after_fork();
}

static void init_once(void)
{
	fk.pid = getpid();
	fk.pidns = fk_pidns_of("/proc/self");
	pthread_atfork(NULL, NULL, fk_after_fork);
	const char *dir = getenv("FAKEGPU_DIR");
	if (dir && *dir)
		snprintf(fk.dir, sizeof(fk.dir), "%s", dir);
	else
		snprintf(fk.dir, sizeof(fk.dir), "/tmp/fakegpu-%u", (unsigned)getuid());
	mkdir(fk.dir, 0777);
	fk.ns_per_block = env_u64("FAKEGPU_NS_PER_BLOCK", 1000);
	fk.max_queue_ns = env_u64("FAKEGPU_MAX_QUEUE_US", 20000) * 1000;
	/* Time slicing between contexts, as a real GPU without MPS runs them: a slice of
	 * FAKEGPU_SLICE_US, then the next context with work, a switch costing FAKEGPU_SWITCH_US. */
	fk.slice_ns = env_u64("FAKEGPU_SLICE_US", 0) * 1000;
	fk.slice_set = getenv("FAKEGPU_SLICE_US") != NULL;
	fk.switch_ns = env_u64("FAKEGPU_SWITCH_US", 0) * 1000;
	fk.launch_ns = env_u64("FAKEGPU_LAUNCH_NS", 4000);
	fk.memset_ns_per_mib = env_u64("FAKEGPU_MEMSET_NS_PER_MIB", 1000);
	fk.memcpy_ns_per_mib = env_u64("FAKEGPU_MEMCPY_NS_PER_MIB", 40000);
	fk.sample_delay_ns = env_u64("FAKEGPU_SAMPLE_DELAY_US", 0) * 1000;
	fk.sample_window_ns = env_u64("FAKEGPU_SAMPLE_WINDOW_US", 166667) * 1000;
	/* Defaults model a real H100 (driver 580): device utilization ~10 samples/s; per-process
	 * samples once a second, off by up to 20 points, keyed by host pids (never getpid()). */
	fk.sample_ns = env_u64("FAKEGPU_SAMPLE_US", 100000) * 1000;
	fk.proc_sample_ns = env_u64("FAKEGPU_PROC_SAMPLE_US", 1000000) * 1000;
	fk.sample_phase_ns = env_u64("FAKEGPU_SAMPLE_PHASE_US", 0) * 1000;
	fk.proc_noise = (unsigned)env_u64("FAKEGPU_PROC_NOISE", 20);
	fk.proc_whole = env_u64("FAKEGPU_PROC_WHOLE", 0) != 0;
	fk.nvml_pid_offset = (unsigned)env_u64("FAKEGPU_NVML_PID_OFFSET", 4000000);
	fk.context_bytes = env_u64("FAKEGPU_CONTEXT_MIB", 0) << 20;
	fk.capturing = env_u64("FAKEGPU_CAPTURING", 0) == 1;
	const char *boost = getenv("FAKEGPU_BOOST");
	double b = boost ? strtod(boost, NULL) : 0;
	fk.boost_ppm = b > 0 && b < 10 ? (uint64_t)(b * 1e6) : 0;
	fk.boost_knee_pct = env_u64("FAKEGPU_BOOST_KNEE", 60);
	if (fk.boost_knee_pct >= 100)
		fk.boost_knee_pct = 99;
	fk.clock_mhz = env_u64("FAKEGPU_CLOCK_MHZ", 1500);
	/* What this process's kernels draw (FAKEGPU_POWER, a fraction of a dense GEMM's: an H200
	 * drew 236 W running a memory-bound elementwise loop 97% of the time, 691 W PyTorch's
	 * matmuls) and the part of their time a faster clock does not shorten (FAKEGPU_MEMBOUND:
	 * the elementwise loop all of it, the matmuls about a quarter). */
	const char *pw = getenv("FAKEGPU_POWER");
	double pv = pw ? strtod(pw, NULL) : 0;
	fk.power_pct = pv > 0 && pv <= 1 ? (uint32_t)(pv * 100 + 0.5) : 0;
	if (pw && !fk.power_pct)
		fk.power_pct = 1;
	const char *mb = getenv("FAKEGPU_MEMBOUND");
	double mv = mb ? strtod(mb, NULL) : 0;
	fk.membound_ppm = mv > 0 && mv <= 1 ? (uint64_t)(mv * 1e6) : 0;
	if (fk.proc_sample_ns == 0)
		fk.proc_sample_ns = 1000000000ull;
	if (fk.sample_ns == 0)
		fk.sample_ns = 1000000;
	if (fk.sample_window_ns < fk.sample_ns)
		fk.sample_window_ns = fk.sample_ns;
	fk.sample_phase_ns %= fk.sample_ns;
	fk.bump32 = 0x10000000u;
	fk.next_handle = 1;
	const char *spec = getenv("FAKEGPU_DEVICES");
	if (!spec || parse_devices(spec) != 0) {
		if (spec) /* unset is fine for a process that only queries state files */
			fprintf(stderr, "fakegpu: FAKEGPU_DEVICES must be \"GPU-<uuid>:<MiB>,...\"\n");
		fk.init_rc = CUDA_ERROR_NO_DEVICE;
		return;
	}
	for (int i = 0; i < fk.ndev; i++) {
		fk.dev[i].st = fk_map(fk.dev[i].uuid, fk.dev[i].total, 1);
		if (!fk.dev[i].st) {
			fprintf(stderr, "fakegpu: cannot map state for %s in %s\n", fk.dev[i].uuid,
				fk.dir);
			fk.init_rc = CUDA_ERROR_OPERATING_SYSTEM;
			return;
		}
		fk.dev[i].total = fk.dev[i].st->total;
	}
}

int fk_init(void)
{
	pthread_once(&fk.once, init_once);
	return fk.init_rc;
}

struct fk_state *fk_peek(const char *uuid)
{
	if (fk_init() == CUDA_ERROR_OPERATING_SYSTEM)
		return NULL;
	struct fk_state *s = NULL;
	pthread_mutex_lock(&fk.peek_mu);
	for (int i = 0; i < fk.npeek && !s; i++)
		if (strcmp(fk.peek[i].uuid, uuid) == 0)
			s = fk.peek[i].st;
	if (!s && fk.npeek < FK_MAX_PEEK && (s = fk_map(uuid, 0, 0)) != NULL) {
		snprintf(fk.peek[fk.npeek].uuid, sizeof(fk.peek[0].uuid), "%s", uuid);
		fk.peek[fk.npeek++].st = s;
	}
	pthread_mutex_unlock(&fk.peek_mu);
	return s;
}

int fk_cur_dev(void)
{
	return fk_cur ? fk_cur->dev : -1;
}


int fk_mem_take(int dev, uint64_t size)
{
	struct fk_state *s = fk.dev[dev].st;
	int ok;
	fk_lock(s);
	ok = s->used + size <= s->total &&
	     fk_mps_mem_ok(dev, fk_pid_slot(&fk.dev[dev], fk.pid)->mem + size); /* fake_mps.c */
	if (ok) {
		s->used += size;
		if (s->used > s->peak)
			s->peak = s->used;
		fk_pid_slot(&fk.dev[dev], fk.pid)->mem += size;
	}
	fk_unlock(s);
	return ok ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

void fk_mem_give(int dev, uint64_t size)
{
	struct fk_state *s = fk.dev[dev].st;
	fk_lock(s);
	s->used = s->used >= size ? s->used - size : 0;
	struct fk_pidslot *p = fk_pid_slot(&fk.dev[dev], fk.pid);
	p->mem = p->mem >= size ? p->mem - size : 0;
	fk_unlock(s);
}

/* A slot is free when empty, or when its process, of this process's pid namespace, is gone
 * (what it still held goes back to the GPU, as the driver frees a dead process's memory).
 * A slot of another namespace is never taken here: its pid means nothing in ours. */
struct fk_pidslot *fk_pid_slot(struct fk_dev *d, int pid)
{
	struct fk_state *s = d->st;
	if (d->slot_pid == pid && s->pids[d->slot].pid == pid && s->pids[d->slot].pidns == fk.pidns)
		return &s->pids[d->slot];
	int free_i = -1;
	for (int i = 0; i < FK_PIDS; i++) {
		struct fk_pidslot *p = &s->pids[i];
		if (p->pid == pid && p->pidns == fk.pidns) {
			free_i = i;
			break;
		}
		if (free_i < 0 && (p->pid == 0 || (p->pidns == fk.pidns && kill(p->pid, 0) != 0 &&
						   errno == ESRCH)))
			free_i = i;
	}
	if (free_i < 0)
		free_i = 0;
	struct fk_pidslot *p = &s->pids[free_i];
	if (p->pid != pid || p->pidns != fk.pidns) {
		if (p->pid && p->pidns == fk.pidns && kill(p->pid, 0) != 0 && errno == ESRCH)
			s->used = s->used >= p->mem ? s->used - p->mem : 0;
		p->pid = pid;
		p->pidns = fk.pidns;
		p->power_pct = fk.power_pct;
		p->sched_ns = 0;
		p->mem = 0;
		s->queued[free_i] = 0; /* a dead process's queued work never runs */
	}
	d->slot_pid = pid;
	d->slot = free_i;
	return p;
}

/* dur ns of GPU work on the device's timeline, after what is queued. */
void fk_enqueue(int dev, uint64_t dur)
{
	struct fk_dev *d = &fk.dev[dev];
	struct fk_state *s = d->st;
	int pid = fk.pid;
	if (fk_mps_on()) { /* an MPS client: its own lane (fake_mps.c) */
		fk_mps_launch(dev, dur);
		return;
	}
	if (fk_sliced(s)) {
		fk_slice_enqueue(d, dur);
		return;
	}
	for (;;) {
		fk_lock(s);
		uint64_t now = fk_now();
		if (s->busy_until > now + fk.max_queue_ns) {
			uint64_t wait = s->busy_until - fk.max_queue_ns - now;
			fk_unlock(s);
			fk_sleep_ns(wait);
			continue;
		}
		uint64_t start = s->busy_until > now ? s->busy_until : now;
		struct fk_kern *k = &s->ring[s->nkern % FK_RING];
		k->start = start;
		k->end = start + dur;
		struct fk_pidslot *ps = fk_pid_slot(d, pid);
		k->pid = pid;
		k->slot = (uint32_t)(ps - s->pids);
		s->nkern++;
		s->busy_until = start + dur;
		s->sched_all += dur;
		ps->sched_ns += dur;
		__atomic_store_n(&d->last_end, start + dur, __ATOMIC_RELAXED);
		fk_unlock(s);
		return;
	}
}

void fk_sync(int dev)
{
	struct fk_dev *d = &fk.dev[dev];
	if (d->st && fk_sliced(d->st)) {
		fk_slice_sync(d);
		return;
	}
	for (;;) {
		uint64_t end = __atomic_load_n(&fk.dev[dev].last_end, __ATOMIC_RELAXED), now = fk_now();
		if (end <= now)
			return;
		fk_wait_ns(end - now);
	}
}

/* The pid slot of (pid, pid namespace) on a device, -1 if it has none. */
int fk_slot_locked(struct fk_state *s, int pid, uint64_t pidns)
{
	for (int i = 0; i < FK_PIDS; i++)
		if (s->pids[i].pid == pid && s->pids[i].pidns == pidns)
			return i;
	return -1;
}

/* GPU time the process of a pid slot (-1: all) had used by time t. Kernels ending after t
 * are the newest ones (one engine, FIFO), so walk back from the newest until one ended by t. */
uint64_t fk_busy_locked(struct fk_state *s, int slot, uint64_t t)
{
	if (fk_sliced(s))
		fk_slice_run_locked(s, fk_now());
	uint64_t busy = slot < 0 ? s->sched_all : s->pids[slot].sched_ns;
	for (uint64_t i = s->nkern; i > 0 && s->nkern - i < FK_RING; i--) {
		struct fk_kern *k = &s->ring[(i - 1) % FK_RING];
		if (k->end <= t)
			break;
		if (slot >= 0 && (k->slot != (uint32_t)slot || k->pid != s->pids[slot].pid))
			continue;
		uint64_t from = k->start > t ? k->start : t;
		uint64_t d = k->end - from;
		busy = busy > d ? busy - d : 0;
	}
	return busy;
}
