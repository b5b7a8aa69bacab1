/* fake_objects.c - fake arrays, mipmapped arrays, modules, streams and graphs. */
#include <stdlib.h>
#include <string.h>

#include "fake.h"

struct fk_array {
	uint32_t magic;
	int dev;
	uint64_t size;
};

struct fk_graph {
	uint32_t magic;
	int n, cap;
	struct fk_node **nodes;
};

struct fk_node {
	uint32_t magic;
	CUDA_KERNEL_NODE_PARAMS_v2 p;
};

struct fk_exec {
	uint32_t magic;
	int n;
	uint64_t blocks[]; /* per kernel node */
};

static uint64_t elem_bytes(CUarray_format f)
{
	switch (f) {
	case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: return 1;
	case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF:
		return 2;
	case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32: case CU_AD_FORMAT_FLOAT:
		return 4;
	default: return 16;
	}
}

static uint64_t dim(uint64_t v, unsigned level)
{
	v >>= level;
	return v ? v : 1;
}

static CUresult make_array(void **out, uint64_t w, uint64_t h, uint64_t d, CUarray_format f,
			   unsigned ch, unsigned levels)
{
	int dev = fk_cur_dev();
	if (dev < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (w == 0 || ch == 0 || levels == 0)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t size = 0;
	for (unsigned l = 0; l < levels; l++)
		size += dim(w, l) * dim(h, l) * dim(d, l) * ch * elem_bytes(f);
	struct fk_array *a = malloc(sizeof(*a));
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult rc = fk_mem_take(dev, size);
	if (rc != CUDA_SUCCESS) {
		free(a);
		return rc;
	}
	a->magic = FK_MAGIC;
	a->dev = dev;
	a->size = size;
	*out = a;
	return CUDA_SUCCESS;
}

static CUresult drop_array(void *p)
{
	struct fk_array *a = p;
	if (!a || a->magic != FK_MAGIC)
		return CUDA_ERROR_INVALID_HANDLE;
	fk_mem_give(a->dev, a->size);
	a->magic = 0;
	free(a);
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d)
{
	return make_array((void **)a, d->Width, d->Height, 1, d->Format, d->NumChannels, 1);
}
FK_EXPORT CUresult cuArrayCreate(CUarray *a, const CUDA_ARRAY_DESCRIPTOR_v1 *d)
{
	return make_array((void **)a, d->Width, d->Height, 1, d->Format, d->NumChannels, 1);
}
FK_EXPORT CUresult cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	return make_array((void **)a, d->Width, d->Height, d->Depth, d->Format, d->NumChannels, 1);
}
FK_EXPORT CUresult cuArray3DCreate(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR_v1 *d)
{
	return make_array((void **)a, d->Width, d->Height, d->Depth, d->Format, d->NumChannels, 1);
}
FK_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *a, const CUDA_ARRAY3D_DESCRIPTOR *d,
					  unsigned int levels)
{
	return make_array((void **)a, d->Width, d->Height, d->Depth, d->Format, d->NumChannels,
			  levels);
}
FK_EXPORT CUresult cuArrayDestroy(CUarray a) { return drop_array(a); }
FK_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray a) { return drop_array(a); }

/* ---- modules and streams: handles only ---- */

FK_EXPORT CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
	(void)image;
	*m = (CUmodule)&fk.module_obj;
	return fk_init();
}
FK_EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
	(void)m;
	(void)name;
	*f = (CUfunction)&fk.function_obj;
	return CUDA_SUCCESS;
}
FK_EXPORT CUresult cuStreamCreate(CUstream *s, unsigned int flags)
{
	(void)flags;
	*s = (CUstream)&fk.stream_obj;
	return CUDA_SUCCESS;
}
FK_EXPORT CUresult cuStreamDestroy_v2(CUstream s)
{
	(void)s;
	return CUDA_SUCCESS;
}

/* ---- graphs ---- */

FK_EXPORT CUresult cuGraphCreate(CUgraph *g, unsigned int flags)
{
	(void)flags;
	struct fk_graph *gr = calloc(1, sizeof(*gr));
	if (!gr)
		return CUDA_ERROR_OUT_OF_MEMORY;
	gr->magic = FK_MAGIC;
	*g = (CUgraph)gr;
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
					   size_t ndeps, const CUDA_KERNEL_NODE_PARAMS_v2 *p)
{
	(void)deps;
	(void)ndeps;
	struct fk_graph *gr = (struct fk_graph *)g;
	if (gr->n == gr->cap) {
		int cap = gr->cap ? gr->cap * 2 : 8;
		struct fk_node **nn = realloc(gr->nodes, (size_t)cap * sizeof(*nn));
		if (!nn)
			return CUDA_ERROR_OUT_OF_MEMORY;
		gr->nodes = nn;
		gr->cap = cap;
	}
	struct fk_node *n = calloc(1, sizeof(*n));
	if (!n)
		return CUDA_ERROR_OUT_OF_MEMORY;
	n->magic = FK_MAGIC;
	n->p = *p;
	gr->nodes[gr->n++] = n;
	*node = (CUgraphNode)n;
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuGraphGetNodes(CUgraph g, CUgraphNode *nodes, size_t *n)
{
	struct fk_graph *gr = (struct fk_graph *)g;
	if (nodes)
		for (size_t i = 0; i < *n && i < (size_t)gr->n; i++)
			nodes[i] = (CUgraphNode)gr->nodes[i];
	*n = (size_t)gr->n;
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType *t)
{
	(void)node;
	*t = CU_GRAPH_NODE_TYPE_KERNEL;
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS_v2 *p)
{
	*p = ((struct fk_node *)node)->p;
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuGraphDestroy(CUgraph g)
{
	struct fk_graph *gr = (struct fk_graph *)g;
	for (int i = 0; i < gr->n; i++)
		free(gr->nodes[i]);
	free(gr->nodes);
	free(gr);
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long fl)
{
	(void)fl;
	struct fk_graph *gr = (struct fk_graph *)g;
	struct fk_exec *x = malloc(sizeof(*x) + (size_t)gr->n * sizeof(uint64_t));
	if (!x)
		return CUDA_ERROR_OUT_OF_MEMORY;
	x->magic = FK_MAGIC;
	x->n = gr->n;
	for (int i = 0; i < gr->n; i++) {
		const CUDA_KERNEL_NODE_PARAMS_v2 *p = &gr->nodes[i]->p;
		x->blocks[i] = (uint64_t)p->gridDimX * p->gridDimY * p->gridDimZ;
	}
	*e = (CUgraphExec)x;
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuGraphInstantiate(CUgraphExec *e, CUgraph g, CUgraphNode *err, char *log,
				      size_t loglen)
{
	(void)err;
	if (log && loglen)
		log[0] = '\0';
	return cuGraphInstantiateWithFlags(e, g, 0);
}
FK_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *e, CUgraph g, CUgraphNode *err, char *log,
					 size_t loglen)
{
	return cuGraphInstantiate(e, g, err, log, loglen);
}
FK_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *e, CUgraph g,
						CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
	CUresult rc = cuGraphInstantiateWithFlags(e, g, p ? p->flags : 0);
	if (p)
		p->result_out = 0;
	return rc;
}
FK_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *e, CUgraph g,
						     CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
	return cuGraphInstantiateWithParams(e, g, p);
}

FK_EXPORT CUresult cuGraphExecDestroy(CUgraphExec e)
{
	free(e);
	return CUDA_SUCCESS;
}

FK_EXPORT CUresult cuGraphLaunch(CUgraphExec e, CUstream s)
{
	(void)s;
	int dev = fk_cur_dev();
	if (dev < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	struct fk_exec *x = (struct fk_exec *)e;
	for (int i = 0; i < x->n; i++)
		fk_launch(dev, x->blocks[i]);
	return CUDA_SUCCESS;
}
FK_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream s) { return cuGraphLaunch(e, s); }
