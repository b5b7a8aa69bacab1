// Package placement is the pure core of the vgpu scheduler plugin: it decides
// which GPUs of a node a pod's containers get, how good a node is for the pod,
// and why a node does not fit. Plain values in, values out: no Kubernetes or
// Volcano types, no clients, no logging. The Volcano adapter (plugins/vgpu)
// translates sessions into these types.
//
// # Model
//
// A Node has GPUs (inventory and usage: memory, cores in percent of one GPU,
// tenants, exclusive holders), a pairwise link matrix (NVLink lanes and PCIe
// level per pair, indexed like Node.GPUs) and a Stale flag. A Request is one
// pod: containers asking Number distinct GPUs with MemoryMiB (or MemoryPercent
// of each GPU's capacity; neither = the whole GPU, as Volcano does) and Cores
// per GPU (100 = exclusive: the GPU must be idle and then admits nobody else;
// 0 cores with no memory becomes Defaults.Cores in Normalize; a 0-core ask
// never joins a GPU whose cores are fully booked, as Volcano). Filters:
// model substrings (of the model or of deviceshare's "NVIDIA-" + model) and
// UUIDs, include and exclude; the GPU sharing mode (Request.Mode against
// GPU.Mode, "" on a GPU = time-sliced); and SpreadGroup, which keeps the task
// off GPUs its GangView shows holding a task of the same job.
//
// # Containers of one pod
//
// App containers run together, so their asks add up: each container is placed
// against the usage left by the pod's earlier app containers. Native sidecars
// (init containers with restartPolicy Always, Container.Restartable) start
// before the app containers and keep running beside them, so they add up with
// them the same way and choose their own GPUs like app containers. Classic
// init containers run one at a time before the app containers, so each is
// placed against the node as it is without this pod plus the sidecars declared
// before it, and prefers GPUs the app containers hold. The pod's footprint on
// a GPU is max(Σ app + Σ sidecars, max over init i of (init i + Σ sidecars
// declared before i)) for memory, cores and tenants: kube-scheduler's
// effective-request rule applied per GPU. Apply and Release book exactly that
// footprint.
//
// # Choosing a container's GPUs
//
// The set of Number GPUs that fit is chosen by lexicographic keys, higher wins:
//
//  1. init containers only: GPUs shared with the pod's app containers;
//  2. the weakest pair's NVLink count (maximin: a set whose every pair is
//     NVLinked beats one with more lanes in total but a PCIe-only pair);
//  3. total NVLinks over all pairs;
//  4. the worst, then the summed peer cost of the pairs: 0 for an NVLinked
//     pair (its peer traffic does not cross PCIe), else its PCIe level;
//  5. gang affinity: binpack prefers GPUs NVLinked to (or the same as) the
//     GPUs of already-placed tasks of the same job; spread avoids their GPUs;
//  6. the device policy summed over the set: binpack prefers GPUs on which
//     the ask strands the least memory (free memory the GPU's remaining cores
//     or tenant slots could not carry, see strandedMiB), then fuller GPUs;
//     spread emptier ones (utilisation after placement, mean of memory and
//     cores fractions), then fewer tenants;
//  7. fewer NUMA nodes spanned;
//  8. fragmentation: the sum of squared sizes of the NVLink islands formed by
//     the idle GPUs left over. Higher keeps bigger islands whole for future
//     multi-GPU pods: on pairs (0,1)(2,3)(4,5)(6,7) with GPU 0 busy, a 1-GPU
//     task goes to GPU 1 (leaves 4+4+4 = 12) rather than GPU 2 (1+1+4+4 = 10);
//  9. the lowest GPU positions.
//
// Link and NUMA keys (2-4, 7) apply only to Number > 1 with TopologyMode
// prefer or required. Policy comes before fragmentation, so binpack still
// stacks onto a partly used GPU that fits; fragmentation decides among equally
// full GPUs. On an NVSwitch node every pair ties on the link keys, so binpack
// and spread decide there; on NVLink pairs the pair comes first.
//
// TopologyRequired fails a node unless the chosen set is one NVLink island
// and its weakest pair has as many NVLinks as the best set of Number GPUs the
// node's healthy, filter-matching GPUs could form ignoring usage. A node with
// a fully NVLinked set of that size therefore only accepts fully NVLinked
// sets; a PCIe-only node never satisfies it.
//
// One GPU is a linear scan. More is a depth-first branch and bound over the
// candidates in position order: optimistic bounds of every key (including an
// upper bound of the fragmentation measure) cut subtrees that could at best
// tie with the set already found, which wins ties by lower positions. A
// randomized test checks the result equals an unpruned enumeration. 8 choose
// 4 visits ~30 search nodes; 16-GPU nodes (16 choose 8 = 12870 sets) need
// ~50-320 on NVSwitch, NVLink pairs or PCIe trees. A visit budget (16384)
// bounds pathological link matrices; the best set found so far is then used.
//
// # Scoring nodes
//
// ScoreNode returns 0..MaxScore (Volcano's MaxNodeScore); callers apply
// weights. binpack: 100 × ((colocate−1) + tie) / total, where total counts the
// job's tasks (placed + this + pending), colocate the ones that would share
// this node (siblings already there + this task + pending tasks that still fit
// after this placement, by simulating Fit and Apply), and tie ∈ [0,1] is the
// node's utilisation after placement (with siblings: 0.75 utilisation + 0.25
// share of the chosen GPUs in an NVLink island with sibling GPUs); for an ask
// of whole GPUs, tie averages that with how large the chosen GPUs are
// (m/(m+32 GiB) of their memory m), so the largest GPUs go whole. Keeping the
// gang together dominates; fullness orders nodes that keep as many together.
// Then binpack ranks by stranded memory: a placement that strands none maps to
// [50, 100], one that strands some to [0, 50), lower the more MiB it strands.
// Multi-GPU containers are ranked by link quality before all of this.
// spread: 100 × ((placed − siblings here) + (1 − utilisation)) / (placed + 1):
// fewer siblings first, then the emptiest node.
//
// # Reasons
//
// A failed Fit returns typed Reasons that unwrap to sentinel errors, naming
// the container: one per GPU ("GPU-1a2b (A100-80GB): 3072 MiB free,
// container "train" asks 8192 MiB") and node-level summaries ("container
// "train": no GPU with 8192 MiB free (largest free 6144 MiB on GPU-…)").
// Reason.Short is the node-level text without node-specific numbers, the
// same on every node that fails the same way (Volcano counts those); Closest
// picks, across nodes, the refusal nearest to fitting with its node, GPU and
// numbers.
//
// # Performance
//
// A Fitter holds scratch buffers; reused per goroutine, Fit and ScoreNode do
// not allocate in steady state. The Placement it returns borrows those
// buffers until its next call (Placement.Clone to keep one).
package placement
