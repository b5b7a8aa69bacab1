package placement

import (
	"fmt"
	"strings"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// Policy is a binpack/spread strategy, for GPUs within a node
// (Request.DevicePolicy) and for nodes (ScoreNode). It is api.Policy: one
// vocabulary from the annotation and the plugin arguments to the core.
// Implementations live in the scorer tables (score.go).
type Policy = api.Policy

// Policies.
const (
	Binpack = api.PolicyBinpack // fill the fullest GPU/node that fits
	Spread  = api.PolicySpread  // prefer the emptiest GPU/node
)

// TopologyMode says how much multi-GPU containers care about links; it is
// api.Topology.
type TopologyMode = api.Topology

// Topology modes.
const (
	// TopologyPrefer picks the best-linked set that fits (default).
	TopologyPrefer = api.TopologyPrefer
	// TopologyRequired fails a node rather than place on a set that is not
	// NVLink-connected or whose weakest pair has fewer NVLinks than the best
	// set of that size the node's healthy, filter-matching GPUs could form.
	TopologyRequired = api.TopologyRequired
	// TopologyNone ignores links: policy and fragmentation only.
	TopologyNone = api.TopologyNone
)

var topologyModes = map[TopologyMode]bool{TopologyPrefer: true, TopologyRequired: true, TopologyNone: true}

// Container is the GPU ask of one container.
type Container struct {
	Name string
	Init bool // init container: runs alone, before the app containers
	// Restartable: an init container with restartPolicy Always (a native
	// sidecar). It starts before the app containers and then runs beside them
	// and beside every init container declared after it.
	Restartable bool
	// Number of distinct GPUs. 0: the container uses no GPU.
	Number int
	// Memory per GPU, in MiB, or as a percentage of each GPU's capacity. The
	// percentage wins when both are set (Volcano's rule). Neither set: the whole GPU.
	MemoryMiB     int64
	MemoryPercent int
	// Cores is the percentage of each GPU's compute; 100 holds the GPU
	// exclusively. Normalize turns 0 (with no memory set) into Defaults.Cores.
	Cores int
}

// memoryOn is the container's memory on a GPU with capMiB of memory.
func (c *Container) memoryOn(capMiB int64) int64 {
	switch {
	case c.MemoryPercent > 0:
		return capMiB * int64(c.MemoryPercent) / 100
	case c.MemoryMiB > 0:
		return c.MemoryMiB
	default:
		return capMiB
	}
}

func (c *Container) exclusive() bool { return c.Cores >= 100 }

// whole: the container takes each of its GPUs whole, all of its cores and
// memory.
func (c *Container) whole() bool {
	return c.exclusive() && (c.MemoryPercent >= 100 || c.MemoryPercent == 0 && c.MemoryMiB == 0)
}

// wholeGPUs: every container that asks GPUs takes them whole (and one does).
func (r *Request) wholeGPUs() bool {
	asks := false
	for i := range r.Containers {
		c := &r.Containers[i]
		if c.Number == 0 {
			continue
		}
		if !c.whole() {
			return false
		}
		asks = true
	}
	return asks
}

// beside: the container runs together with the app containers (an app
// container or a sidecar), so its ask adds to theirs.
func (c *Container) beside() bool { return !c.Init || c.Restartable }

// Request is one pod's GPU ask. Fit never modifies it.
type Request struct {
	Containers []Container
	// Model filters: case-insensitive substrings of GPU.Model, or of
	// deviceshare's type "NVIDIA-" + GPU.Model (api.ModelMatches). A GPU must
	// match one include (when any) and no exclude.
	TypeInclude, TypeExclude []string
	// UUID filters: exact UUIDs, same rules.
	UUIDInclude, UUIDExclude []string
	Topology                 TopologyMode // "" = prefer
	DevicePolicy             Policy       // "" = binpack
	// Mode: every GPU of the pod must be shared this way (Volcano's
	// vgpu-mode); "" = any mode.
	Mode GPUMode
	// SpreadGroup: no GPU that holds an already-placed task of the same job
	// (Volcano's vgpu-podgroup-policy: spread). Fit sees those tasks in its
	// GangView: without one it has nothing to keep apart.
	SpreadGroup bool
	// MIGProfile: with Mode mig, the profile every GPU container gets;
	// "" = the smallest profile that holds the container's memory.
	MIGProfile string
}

// GPUMode is how a GPU is shared between tenants; it is api.GPUMode.
type GPUMode = api.GPUMode

// Defaults fill what a pod leaves out; they come from plugin arguments.
type Defaults struct {
	Cores        int // cores for a container that sets neither cores nor memory
	DevicePolicy Policy
	Topology     TopologyMode
}

// Normalize applies defaults and validates. Call it once per task, before Fit.
func (r *Request) Normalize(d Defaults) error {
	for i := range r.Containers {
		c := &r.Containers[i]
		if c.Number > 0 && c.Cores == 0 && c.MemoryMiB == 0 && c.MemoryPercent == 0 {
			c.Cores = d.Cores
		}
	}
	if r.DevicePolicy == "" {
		r.DevicePolicy = d.DevicePolicy
	}
	if r.Topology == "" {
		r.Topology = d.Topology
	}
	r.TypeInclude, r.TypeExclude = cleanList(r.TypeInclude), cleanList(r.TypeExclude)
	r.UUIDInclude, r.UUIDExclude = cleanList(r.UUIDInclude), cleanList(r.UUIDExclude)
	return r.validate()
}

func cleanList(in []string) []string {
	var out []string
	for _, s := range in {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// validate allocates only when it fails.
func (r *Request) validate() error {
	for i := range r.Containers {
		c := &r.Containers[i]
		switch {
		case c.Number < 0:
			return fmt.Errorf("%w: container %q: negative GPU number %d", ErrInvalidRequest, c.Name, c.Number)
		case c.Number > MaxGPUs:
			return fmt.Errorf("%w: container %q: %d GPUs, at most %d", ErrInvalidRequest, c.Name, c.Number, MaxGPUs)
		case c.Cores < 0 || c.Cores > 100:
			return fmt.Errorf("%w: container %q: cores %d outside 0..100", ErrInvalidRequest, c.Name, c.Cores)
		case c.MemoryPercent < 0 || c.MemoryPercent > 100:
			return fmt.Errorf("%w: container %q: memory percentage %d outside 0..100", ErrInvalidRequest, c.Name, c.MemoryPercent)
		case c.MemoryMiB < 0:
			return fmt.Errorf("%w: container %q: negative memory %d MiB", ErrInvalidRequest, c.Name, c.MemoryMiB)
		case c.Restartable && !c.Init:
			return fmt.Errorf("%w: container %q: only an init container can be restartable (a sidecar)", ErrInvalidRequest, c.Name)
		case r.Mode == api.ModeMPS && c.Number > 1:
			return fmt.Errorf("%w: container %q: %s: mps serves one GPU per container (an MPS client reaches one GPU's server), the container asks %d: ask for 1 GPU per container, or hami-core", ErrInvalidRequest, c.Name, api.VolcanoModeKey, c.Number)
		case r.Mode == api.ModeMIG && c.Number > 1:
			return fmt.Errorf("%w: container %q: %s: mig serves one MIG instance per container (CUDA sees one MIG device per process), the container asks %d: ask for 1 GPU per container, or hami-core", ErrInvalidRequest, c.Name, api.VolcanoModeKey, c.Number)
		}
	}
	if r.DevicePolicy != "" {
		if _, ok := deviceScorers[r.DevicePolicy]; !ok {
			return fmt.Errorf("%w: %w %q", ErrInvalidRequest, ErrUnknownPolicy, r.DevicePolicy)
		}
	}
	if r.Topology != "" && !topologyModes[r.Topology] {
		return fmt.Errorf("%w: %w %q", ErrInvalidRequest, ErrUnknownTopology, r.Topology)
	}
	switch r.Mode {
	case "", api.ModeTimeSliced, api.ModeMPS, api.ModeMIG:
	default:
		return fmt.Errorf("%w: %w %q", ErrInvalidRequest, ErrUnknownMode, r.Mode)
	}
	if r.MIGProfile != "" && r.Mode != api.ModeMIG {
		return fmt.Errorf("%w: MIG profile %s asked outside mig mode (%q)", ErrInvalidRequest, r.MIGProfile, r.Mode)
	}
	return nil
}

// filtered: the request narrows the GPUs by model or UUID.
func (r *Request) filtered() bool {
	return len(r.TypeInclude)+len(r.TypeExclude)+len(r.UUIDInclude)+len(r.UUIDExclude) > 0
}

// filterText names the request's type and UUID filters for a reason:
// "type in A100,H100; UUID not in GPU-1a2b".
func (r *Request) filterText() string {
	var parts []string
	for _, f := range [...]struct {
		what string
		list []string
	}{{"type in ", r.TypeInclude}, {"type not in ", r.TypeExclude}, {"UUID in ", r.UUIDInclude}, {"UUID not in ", r.UUIDExclude}} {
		if len(f.list) > 0 {
			parts = append(parts, f.what+strings.Join(f.list, ","))
		}
	}
	return strings.Join(parts, "; ")
}

func (r *Request) policy() Policy {
	if r.DevicePolicy == "" {
		return Binpack
	}
	return r.DevicePolicy
}

func (r *Request) topology() TopologyMode {
	if r.Topology == "" {
		return TopologyPrefer
	}
	return r.Topology
}

// admits applies the mode, model and UUID filters to a GPU. A MIG GPU
// admits MIG asks only: a share of the whole GPU cannot run on it.
func (r *Request) admits(g *GPU) Code {
	if r.Mode != "" && g.mode() != r.Mode {
		return CodeModeMismatch
	}
	if r.Mode == "" && g.mode() == api.ModeMIG {
		return CodeMIGOnly
	}
	if len(r.TypeInclude) > 0 && !anyModel(g.Model, r.TypeInclude) {
		return CodeTypeFiltered
	}
	if anyModel(g.Model, r.TypeExclude) {
		return CodeTypeFiltered
	}
	if len(r.UUIDInclude) > 0 && !anyEqual(g.UUID, r.UUIDInclude) {
		return CodeUUIDFiltered
	}
	if anyEqual(g.UUID, r.UUIDExclude) {
		return CodeUUIDFiltered
	}
	return CodeOK
}

func anyEqual(s string, list []string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// anyModel: one of the type filters matches the model (api.ModelMatches:
// the bare model or deviceshare's "NVIDIA-" + model, case-insensitively).
func anyModel(model string, filters []string) bool {
	for _, f := range filters {
		if api.ModelMatches(model, f) {
			return true
		}
	}
	return false
}
