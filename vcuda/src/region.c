/*
 * region.c - the per-container shared region (<shared_dir>/vcuda.region).
 *
 * Memory is reserved under one robust process-shared mutex: check and add happen in the same
 * critical section, so no two processes can both pass the check (no check-then-allocate
 * window). Each process's share is also kept in its proc slot; a process that dies is reaped
 * and its share returned. Liveness is an OFD lock each process holds on its slot's byte of
 * <shared_dir>/vcuda.slots: the kernel drops it when the process dies (SIGKILL too), in
 * whatever pid namespace it ran, so a container restarted into a new pid namespace (pid 1
 * again) neither keeps its dead instance's memory booked nor mistakes it for itself. Without
 * the lock file, pid + start time are the fallback. Every reap rebuilds the totals from the
 * live slots; if a process dies while holding the mutex, the next locker does the same.
 */

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vcuda.h"

/* Start time of pid in clock ticks (field 22 of /proc/<pid>/stat), 0 if unknown. */
static uint64_t starttime_of(int pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	char *p = strrchr(buf, ')');
	if (!p)
		return 0;
	unsigned long long v = 0;
	/* after ")": state is field 3; starttime is field 22 */
	if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d "
			  "%*d %*d %llu", &v) != 1)
		return 0;
	return v;
}

/* 1: someone holds slot i's lock byte; 0: nobody (its process is gone); -1: cannot tell. */
static int slot_locked(int i)
{
	if (vcg.slots_fd < 0)
		return -1;
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = i, .l_len = 1 };
	if (fcntl(vcg.slots_fd, F_OFD_GETLK, &fl) != 0)
		return -1;
	return fl.l_type != F_UNLCK;
}

static int alive_by_pid(const struct vc_region_proc *p)
{
	if (kill(p->pid, 0) != 0 && errno == ESRCH)
		return 0;
	uint64_t st = starttime_of(p->pid);
	return st == 0 || p->starttime == 0 || st == p->starttime;
}

static void rebuild_totals(struct vc_region *r)
{
	for (uint32_t d = 0; d < r->ndev; d++) {
		uint64_t sum = 0;
		for (int i = 0; i < VC_MAX_PROCS; i++)
			if (r->proc[i].pid)
				sum += r->proc[i].used[d];
		__atomic_store_n(&r->dev[d].used, sum, __ATOMIC_RELAXED);
	}
}

static void lock_region(struct vc_region *r)
{
	if (pthread_mutex_lock(&r->lock) == EOWNERDEAD) {
		rebuild_totals(r);
		pthread_mutex_consistent(&r->lock);
	}
}

static void drop_slot(struct vc_region *r, struct vc_region_proc *p)
{
	for (uint32_t d = 0; d < r->ndev; d++) {
		uint64_t u = __atomic_load_n(&r->dev[d].used, __ATOMIC_RELAXED);
		__atomic_store_n(&r->dev[d].used, u > p->used[d] ? u - p->used[d] : 0,
				 __ATOMIC_RELAXED);
	}
	memset(p->used, 0, sizeof(p->used));
	p->starttime = 0;
	__atomic_store_n(&p->pid, 0, __ATOMIC_RELEASE);
}

static void reap_locked(struct vc_region *r)
{
	for (int i = 0; i < VC_MAX_PROCS; i++) {
		struct vc_region_proc *p = &r->proc[i];
		if (!p->pid || i == vcg.slot)
			continue;
		int held = slot_locked(i);
		if (held == 0 || (held < 0 && !alive_by_pid(p)))
			drop_slot(r, p);
	}
	rebuild_totals(r);
}

/* Opens the lock file once per process image (after fork: again, see init.c). */
static void open_slots(void)
{
	if (vcg.slots_fd >= 0)
		return;
	char path[VCUDA_PATH_LEN + 32];
	snprintf(path, sizeof(path), "%s/%s", vcg.cfg.shared_dir, VC_SLOTS_FILE);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
	if (fd < 0)
		return; /* liveness falls back to pid + start time */
	fchmod(fd, 0666);
	vcg.slots_fd = fd;
}

/* Takes slot i's lock byte; 0 when someone else holds it (a live process we did not see). */
static int lock_slot(int i)
{
	if (vcg.slots_fd < 0)
		return 1;
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = i, .l_len = 1 };
	return fcntl(vcg.slots_fd, F_OFD_SETLK, &fl) == 0;
}

void vc_reap(void)
{
	lock_region(vcg.region);
	reap_locked(vcg.region);
	pthread_mutex_unlock(&vcg.region->lock);
}

void vc_reap_sometimes(void)
{
	uint64_t now = vc_now(), last = __atomic_load_n(&vcg.view_reap_ns, __ATOMIC_RELAXED);
	if (now < last + 100000000ull ||
	    !__atomic_compare_exchange_n(&vcg.view_reap_ns, &last, now, 0, __ATOMIC_RELAXED,
					 __ATOMIC_RELAXED))
		return;
	vc_reap();
}

/* Under the lock: make sure this process has a slot (again, after fork). */
static int own_slot_locked(struct vc_region *r)
{
	if (vcg.slot >= 0)
		return vcg.slot;
	int me = getpid();
	open_slots();
	reap_locked(r);
	for (int i = 0; i < VC_MAX_PROCS; i++) {
		if (r->proc[i].pid == 0 && lock_slot(i)) {
			memset(&r->proc[i], 0, sizeof(r->proc[i]));
			r->proc[i].starttime = starttime_of(me);
			__atomic_store_n(&r->proc[i].pid, me, __ATOMIC_RELEASE);
			vcg.slot = i;
			return i;
		}
	}
	vc_say_once(VC_MSG_REGION, "vcuda: more than %d GPU processes in this container; "
		    "allocations of the others are refused", VC_MAX_PROCS);
	return -1;
}

static void init_region(struct vc_region *r)
{
	memset(r, 0, sizeof(*r));
	r->version = VC_REGION_VERSION;
	r->size = sizeof(*r);
	r->ndev = (uint32_t)vcg.ndev;
	pthread_mutexattr_t a;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(&r->lock, &a);
	pthread_mutexattr_destroy(&a);
	for (int d = 0; d < vcg.ndev; d++)
		r->dev[d].boot_budget = 1;
	__atomic_store_n(&r->magic, VC_REGION_MAGIC, __ATOMIC_RELEASE);
}

int vc_region_attach(char *err, size_t errlen)
{
	char path[VCUDA_PATH_LEN + 32];
	snprintf(path, sizeof(path), "%s/%s", vcg.cfg.shared_dir, VC_REGION_FILE);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
	if (fd < 0) {
		snprintf(err, errlen, "cannot open the shared region %s: %s (the device plugin "
			 "mounts the per-container dir writable)", path, strerror(errno));
		return -1;
	}
	struct vc_region *r = MAP_FAILED;
	off_t size = -1;
	int rc = -1;
	fchmod(fd, 0666); /* every user in the container shares it (su, ssh) */
	if (flock(fd, LOCK_EX) != 0 || (size = vc_fd_size(fd)) < 0) {
		snprintf(err, errlen, "cannot lock %s: %s", path, strerror(errno));
		goto out;
	}
	if (size != 0 && size != (off_t)sizeof(*r)) {
		snprintf(err, errlen, "shared region %s has %lld bytes, want %zu (another vcuda "
			 "version?)", path, (long long)size, sizeof(*r));
		goto out;
	}
	if (size == 0 && ftruncate(fd, sizeof(*r)) != 0) {
		snprintf(err, errlen, "cannot size %s: %s", path, strerror(errno));
		goto out;
	}
	r = mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (r == MAP_FAILED) {
		snprintf(err, errlen, "cannot map %s: %s", path, strerror(errno));
		goto out;
	}
	if (__atomic_load_n(&r->magic, __ATOMIC_ACQUIRE) != VC_REGION_MAGIC)
		init_region(r);
	if (r->version != VC_REGION_VERSION || r->size != sizeof(*r) ||
	    r->ndev != (uint32_t)vcg.ndev) {
		snprintf(err, errlen, "shared region %s: version %u, %u devices; want version %u, "
			 "%d devices", path, r->version, r->ndev, VC_REGION_VERSION, vcg.ndev);
		goto out;
	}
	vcg.region = r;
	lock_region(r);
	rc = own_slot_locked(r) >= 0 ? 0 : -1;
	pthread_mutex_unlock(&r->lock);
	if (rc != 0)
		snprintf(err, errlen, "no free process slot in %s", path);
out:
	if (rc != 0 && r != MAP_FAILED)
		munmap(r, sizeof(*r));
	if (rc != 0)
		vcg.region = NULL;
	flock(fd, LOCK_UN);
	close(fd);
	return rc;
}

/* 0: reserved; -1: over the cap (after reaping dead processes once). */
int vc_mem_reserve(int idx, uint64_t bytes)
{
	struct vc_region *r = vcg.region;
	struct vc_region_dev *d = &r->dev[idx];
	int ok = 0;
	lock_region(r);
	int slot = own_slot_locked(r);
	if (slot >= 0) {
		uint64_t used = __atomic_load_n(&d->used, __ATOMIC_RELAXED);
		if (used + bytes > vcg.dev[idx].cap || used + bytes < used) {
			reap_locked(r);
			used = __atomic_load_n(&d->used, __ATOMIC_RELAXED);
		}
		ok = used + bytes <= vcg.dev[idx].cap && used + bytes >= used;
		if (ok) {
			__atomic_store_n(&d->used, used + bytes, __ATOMIC_RELAXED);
			r->proc[slot].used[idx] += bytes;
		}
	}
	pthread_mutex_unlock(&r->lock);
	return ok ? 0 : -1;
}

void vc_mem_release(int idx, uint64_t bytes)
{
	struct vc_region *r = vcg.region;
	struct vc_region_dev *d = &r->dev[idx];
	lock_region(r);
	int slot = own_slot_locked(r);
	if (slot >= 0) {
		uint64_t mine = r->proc[slot].used[idx];
		uint64_t x = bytes < mine ? bytes : mine; /* never below zero */
		uint64_t used = __atomic_load_n(&d->used, __ATOMIC_RELAXED);
		r->proc[slot].used[idx] = mine - x;
		__atomic_store_n(&d->used, used > x ? used - x : 0, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&r->lock);
}

uint64_t vc_mem_used(int idx)
{
	return __atomic_load_n(&vcg.region->dev[idx].used, __ATOMIC_RELAXED);
}
