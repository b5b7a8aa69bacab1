/*
 * htab.h - a small mutex-protected open-addressing map (kind, key) -> (dev, val).
 * Used by the limiter (allocation sizes, graph costs) and by the fake driver.
 * The map lives in the caller's storage; it owns only its entry array.
 */
#ifndef VCUDA_HTAB_H
#define VCUDA_HTAB_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct vc_htab_ent {
	uint64_t key;
	uint64_t val;
	uint32_t kind; /* 0 = empty, UINT32_MAX = deleted */
	int32_t dev;
};

struct vc_htab {
	pthread_mutex_t mu;
	struct vc_htab_ent *e;
	size_t cap, used; /* used counts live and deleted entries */
};

#define VC_HTAB_INIT { PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0 }

/* kind must be in 1..UINT32_MAX-1. put replaces an existing entry. 0 ok, -1 out of memory. */
int vc_htab_put(struct vc_htab *t, uint32_t kind, uint64_t key, int dev, uint64_t val);
/* take removes the entry; get only reads it. 1 found, 0 not found. */
int vc_htab_take(struct vc_htab *t, uint32_t kind, uint64_t key, int *dev, uint64_t *val);
int vc_htab_get(struct vc_htab *t, uint32_t kind, uint64_t key, int *dev, uint64_t *val);
/* after fork in the child: the lock may have been held by a thread that is gone. */
void vc_htab_after_fork(struct vc_htab *t);

#endif
