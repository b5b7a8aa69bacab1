/* htab.c - see htab.h. Linear probing, grows at 1/2 load, rebuilds away deleted entries. */
#include "htab.h"

#include <stdlib.h>

#define DELETED UINT32_MAX

static size_t slot_of(uint32_t kind, uint64_t key, size_t cap)
{
	uint64_t h = key ^ ((uint64_t)kind * 0x9E3779B97F4A7C15ull);
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	return (size_t)h & (cap - 1);
}

static struct vc_htab_ent *find(struct vc_htab *t, uint32_t kind, uint64_t key)
{
	if (!t->cap)
		return NULL;
	for (size_t i = slot_of(kind, key, t->cap), n = 0; n < t->cap; i = (i + 1) & (t->cap - 1), n++) {
		struct vc_htab_ent *e = &t->e[i];
		if (e->kind == 0)
			return NULL;
		if (e->kind == kind && e->key == key)
			return e;
	}
	return NULL;
}

static int rebuild(struct vc_htab *t, size_t cap)
{
	struct vc_htab_ent *ne = calloc(cap, sizeof(*ne));
	if (!ne)
		return -1;
	size_t used = 0;
	for (size_t i = 0; i < t->cap; i++) {
		struct vc_htab_ent *e = &t->e[i];
		if (e->kind == 0 || e->kind == DELETED)
			continue;
		size_t j = slot_of(e->kind, e->key, cap);
		while (ne[j].kind)
			j = (j + 1) & (cap - 1);
		ne[j] = *e;
		used++;
	}
	free(t->e);
	t->e = ne;
	t->cap = cap;
	t->used = used;
	return 0;
}

int vc_htab_put(struct vc_htab *t, uint32_t kind, uint64_t key, int dev, uint64_t val)
{
	int rc = 0;
	pthread_mutex_lock(&t->mu);
	struct vc_htab_ent *e = find(t, kind, key);
	if (!e) {
		if ((t->used + 1) * 2 > t->cap) {
			size_t live = 0;
			for (size_t i = 0; i < t->cap; i++)
				live += t->e[i].kind != 0 && t->e[i].kind != DELETED;
			size_t cap = t->cap ? t->cap : 64;
			while ((live + 1) * 4 > cap)
				cap *= 2;
			if (rebuild(t, cap) != 0) {
				rc = -1;
				goto out;
			}
		}
		size_t i = slot_of(kind, key, t->cap);
		while (t->e[i].kind && t->e[i].kind != DELETED)
			i = (i + 1) & (t->cap - 1);
		if (t->e[i].kind == 0)
			t->used++;
		e = &t->e[i];
	}
	e->kind = kind;
	e->key = key;
	e->dev = dev;
	e->val = val;
out:
	pthread_mutex_unlock(&t->mu);
	return rc;
}

static int lookup(struct vc_htab *t, uint32_t kind, uint64_t key, int *dev, uint64_t *val, int del)
{
	pthread_mutex_lock(&t->mu);
	struct vc_htab_ent *e = find(t, kind, key);
	if (e) {
		if (dev)
			*dev = e->dev;
		if (val)
			*val = e->val;
		if (del)
			e->kind = DELETED;
	}
	pthread_mutex_unlock(&t->mu);
	return e != NULL;
}

int vc_htab_take(struct vc_htab *t, uint32_t kind, uint64_t key, int *dev, uint64_t *val)
{
	return lookup(t, kind, key, dev, val, 1);
}

int vc_htab_get(struct vc_htab *t, uint32_t kind, uint64_t key, int *dev, uint64_t *val)
{
	return lookup(t, kind, key, dev, val, 0);
}

void vc_htab_after_fork(struct vc_htab *t)
{
	pthread_mutex_init(&t->mu, NULL);
}
