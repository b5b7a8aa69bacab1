package reference

import (
	"cmp"
	"math/rand/v2"
	"slices"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/metrics"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/trace"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

// Host is a node's allocatable CPU and memory, for Volcano's nodeorder scores.
type Host struct {
	CPUMilli  int64
	MemoryMiB int64
}

// ReplayOptions shape Replay.
type ReplayOptions struct {
	Seed uint64 // node order and ties
	// Weight is vgpu.weight (the plugin's node score is multiplied by it);
	// 0 means 10, as in config/scheduler/volcano-scheduler.conf.
	Weight float64
}

// Replay places the trace the way vc-scheduler with the vgpu plugin would,
// offline and in seconds, so scoring changes can be tried before the
// end-to-end benchmark measures them. It is an approximation of one
// scheduling cycle per pod, not the scheduler: jobs arrive in trace order;
// every pod is tried on nodes from where the last pod's search stopped until
// Volcano's default number of feasible nodes is found (all nodes up to 100,
// then 50% less 1% per 125 nodes, at least 100); each feasible node scores the
// plugin's binpack node score times Weight plus nodeorder's leastrequested and
// balancedresource (weight 1 each) on CPU and memory; the best wins, ties at
// random; gangs are all or nothing. Not modelled: sessions, preemption,
// Volcano's job order beyond arrival, pods that take time to arrive.
func Replay(jobs []trace.Job, nodes map[string]api.Inventory, hosts map[string]Host, o ReplayOptions) ([]metrics.Pod, int64, error) {
	weight := cmp.Or(o.Weight, 10)
	names := make([]string, 0, len(nodes))
	for n, inv := range nodes {
		if len(inv.GPUs) > 0 {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	rng := rand.New(rand.NewPCG(o.Seed, 0x7265706c6179)) // "replay"
	rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	ns := make([]*placement.Node, len(names))
	used := make([]Host, len(names))
	for i, n := range names {
		ns[i] = nodeOf(n, nodes[n])
	}
	toFind := nodesToFind(len(ns))
	next := 0 // where the next search starts
	var f placement.Fitter
	var pods []metrics.Pod
	var mem int64
	type choice struct {
		i  int
		at placement.Placement
	}
	var best []choice
	for ji, j := range jobs {
		req, err := requestOf(j)
		if err != nil {
			return nil, 0, err
		}
		pod := Host{CPUMilli: j.CPUMilli, MemoryMiB: j.HostMiB}
		gang := &placement.GangView{Placed: map[string]placement.Siblings{}}
		var placed []choice
		for k := range j.Pods {
			gang.Pending = nil
			if rest := j.Pods - k - 1; rest > 0 {
				gang.Pending = []placement.Pending{{Request: &req, Count: rest}}
			}
			best = best[:0]
			top := -1.0
			found, tried := 0, 0
			for ; tried < len(ns) && found < toFind; tried++ {
				i := (next + tried) % len(ns)
				p, reasons := f.Fit(&req, ns[i], gang)
				if len(reasons) > 0 {
					continue
				}
				found++
				p = p.Clone()
				s := weight*f.ScoreNode(&req, ns[i], p, gang, placement.Binpack) + hostScore(hosts[names[i]], used[i], pod)
				switch {
				case s > top:
					best, top = append(best[:0], choice{i, p}), s
				case s == top:
					best = append(best, choice{i, p})
				}
			}
			next = (next + tried) % len(ns)
			if len(best) == 0 {
				break
			}
			c := best[rng.IntN(len(best))]
			if err := placement.Apply(ns[c.i], c.at); err != nil {
				return nil, 0, err
			}
			used[c.i].CPUMilli += pod.CPUMilli
			used[c.i].MemoryMiB += pod.MemoryMiB
			sib := gang.Placed[names[c.i]]
			sib.Tasks++
			sib.GPUs = append(sib.GPUs, c.at.UUIDs()...)
			gang.Placed[names[c.i]] = sib
			gang.PlacedTasks++
			placed = append(placed, c)
		}
		if len(placed) < j.Pods { // all or nothing
			for _, c := range placed {
				if err := placement.Release(ns[c.i], c.at); err != nil {
					return nil, 0, err
				}
				used[c.i].CPUMilli -= pod.CPUMilli
				used[c.i].MemoryMiB -= pod.MemoryMiB
			}
			placed = nil
		}
		for r := range j.Pods {
			p := metrics.Pod{Job: ji}
			if r < len(placed) {
				p.Node = names[placed[r].i]
				p.Containers = shares(placed[r].at)
				mem += placedMiB(placed[r].at)
			}
			pods = append(pods, p)
		}
	}
	return pods, mem, nil
}

// nodesToFind is Volcano's default number of feasible nodes a task's search
// stops at (vc-scheduler's minimum-feasible-nodes 100,
// minimum-percentage-nodes-to-find 5, percentage-nodes-to-find 0: adaptive).
func nodesToFind(n int) int {
	if n <= 100 {
		return n
	}
	pct := max(50-n/125, 5)
	return max(n*pct/100, 100)
}

// hostScore is nodeorder's leastrequested plus balancedresource, each 0..100
// at weight 1, for pod joining a node that has used of h.
func hostScore(h, used, pod Host) float64 {
	if h.CPUMilli <= 0 || h.MemoryMiB <= 0 {
		return 0
	}
	least := func(req, capacity int64) int64 { return max(capacity-req, 0) * 100 / capacity }
	cpu, mem := used.CPUMilli+pod.CPUMilli, used.MemoryMiB+pod.MemoryMiB
	lr := (least(cpu, h.CPUMilli) + least(mem, h.MemoryMiB)) / 2
	fc, fm := min(float64(cpu)/float64(h.CPUMilli), 1), min(float64(mem)/float64(h.MemoryMiB), 1)
	std := max(fc-fm, fm-fc) / 2
	return float64(lr) + float64(int64((1-std)*100))
}
