package placement

import (
	"errors"
	"fmt"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// Sentinel errors. Every Reason unwraps to one of the first group, so callers
// can errors.Is a reason without parsing its text.
var (
	ErrInvalidRequest  = errors.New("invalid GPU request")
	ErrStale           = errors.New("GPU inventory stale")
	ErrTooFewGPUs      = errors.New("too few GPUs")
	ErrUnhealthy       = errors.New("GPU unhealthy")
	ErrFiltered        = errors.New("GPU excluded by filter")
	ErrExclusive       = errors.New("GPU exclusivity")
	ErrSharesFull      = errors.New("GPU tenant limit reached")
	ErrMemory          = errors.New("insufficient GPU memory")
	ErrCores           = errors.New("insufficient GPU cores")
	ErrTopology        = errors.New("required GPU topology unavailable")
	ErrUnknownPolicy   = errors.New("unknown policy")
	ErrUnknownTopology = errors.New("unknown topology mode")
	ErrUnknownMode     = errors.New("unknown GPU sharing mode")
	ErrMode            = errors.New("GPU in another sharing mode")
	ErrGroupShared     = errors.New("GPU holds a task of the same PodGroup")
	ErrMIG             = errors.New("no free MIG instance")

	// Bookkeeping errors (Apply, Release).
	ErrWrongNode  = errors.New("placement is for another node")
	ErrUnknownGPU = errors.New("GPU not on node")
	ErrUnderflow  = errors.New("release exceeds recorded usage")
)

// Code classifies a Reason.
type Code uint8

// Node-level codes (Reason.GPU == "") summarise why a node cannot host the
// pod; GPU-level codes explain one GPU.
const (
	CodeOK Code = iota

	CodeInvalidRequest // Detail says what
	CodeStale          // inventory heartbeat too old
	CodeNoGPUs         // node publishes no GPUs
	CodeTooManyGPUs    // Have: GPUs on node, more than MaxGPUs
	CodeTooFewHealthy  // Want: GPUs asked, Have: healthy GPUs passing the filters, Match: those passing them
	CodeTooFewMatching // Want: GPUs asked, Have: healthy GPUs passing the filters
	CodeTooFewFit      // Want: GPUs asked, Have: GPUs with room
	CodeTopology       // Want: GPUs asked; no set meets TopologyRequired

	CodeUnhealthy     // GPU unhealthy
	CodeTypeFiltered  // model excluded by type include/exclude
	CodeUUIDFiltered  // UUID excluded by UUID include/exclude
	CodeExclusiveHeld // another tenant holds the GPU with 100 cores (node level: Have = such GPUs)
	CodeSharesFull    // Have: tenants, Want: limit (node level: Have = such GPUs)
	CodeShared        // exclusive ask, GPU has Have tenants (node level: Have = such GPUs)
	CodeMemory        // Want, Have: MiB asked / free (node level: Have = largest free, on GPU)
	CodeCores         // Want, Have: percent asked / free (node level: most free, on GPU)

	// GPU level: the GPU is in another sharing mode than Request.Mode.
	CodeModeMismatch
	// Node level: Want: GPUs asked in Request.Mode, Have: GPUs in that mode.
	CodeTooFewInMode
	// The GPU holds a task of the same job and Request.SpreadGroup is set
	// (node level: Have = such GPUs).
	CodeGroupShared
	// GPU level: an MPS GPU, and the container asks for more than one GPU
	// (an MPS client reaches one GPU's server).
	CodeMPSOneGPU
	// GPU level: a MIG GPU, and the task asks a share of a GPU (node level:
	// Have = GPUs outside mig mode, fewer than Want).
	CodeMIGOnly
	// GPU level: no MIG profile of the GPU gives the ask (Detail: what it
	// asks; "" = the GPU publishes no MIG profiles).
	CodeMIGProfile
	// GPU level: every legal placement of the ask's profiles is held
	// (Detail: what it asks).
	CodeMIGNoPlacement
	// Node level: no MIG GPU has a free instance for the ask (Detail: what
	// it asks; Have: MIG GPUs on the node).
	CodeMIGNoFit
	// GPU level: the MIG profile the task names has less memory than the
	// container asks (Detail: the profile, Have: its MiB, Want: MiB asked);
	// node level: so on every MIG GPU (Have: the largest such profile's MiB).
	// Never capped at the profile's memory: the task asks a larger profile
	// or less memory.
	CodeMIGProfileSmall
)

var codeErrs = [...]error{
	CodeOK:              nil,
	CodeInvalidRequest:  ErrInvalidRequest,
	CodeStale:           ErrStale,
	CodeNoGPUs:          ErrTooFewGPUs,
	CodeTooManyGPUs:     ErrTooFewGPUs,
	CodeTooFewHealthy:   ErrTooFewGPUs,
	CodeTooFewMatching:  ErrFiltered,
	CodeTooFewFit:       ErrTooFewGPUs,
	CodeTopology:        ErrTopology,
	CodeUnhealthy:       ErrUnhealthy,
	CodeTypeFiltered:    ErrFiltered,
	CodeUUIDFiltered:    ErrFiltered,
	CodeExclusiveHeld:   ErrExclusive,
	CodeSharesFull:      ErrSharesFull,
	CodeShared:          ErrExclusive,
	CodeMemory:          ErrMemory,
	CodeCores:           ErrCores,
	CodeModeMismatch:    ErrMode,
	CodeTooFewInMode:    ErrMode,
	CodeGroupShared:     ErrGroupShared,
	CodeMPSOneGPU:       ErrMode,
	CodeMIGOnly:         ErrMode,
	CodeMIGProfile:      ErrMIG,
	CodeMIGNoPlacement:  ErrMIG,
	CodeMIGNoFit:        ErrMIG,
	CodeMIGProfileSmall: ErrMIG,
}

// Reason is one typed, human-readable cause of a failed Fit. Fit returns the
// per-GPU reasons of the first container that did not fit, then the node-level
// summaries (GPU == ""), whose Short text is the same on every node that fails
// the same way; Closest picks the refusal nearest to fitting across nodes.
type Reason struct {
	Code      Code
	Container string // container that did not fit ("" when about the node)
	GPU       string // UUID; "" for node-level reasons
	Model     string
	Want      int64 // unit depends on Code (see the Code constants)
	Have      int64
	Count     int     // GPUs the container asks for (node-level reasons)
	Percent   int     // memory asked as a percentage of each GPU, when it was
	Best      string  // node level: UUID of the GPU holding Have (most free memory/cores)
	Match     int64   // CodeTooFewHealthy with filters: GPUs passing them, healthy or not
	Detail    string  // CodeInvalidRequest only
	Mode      GPUMode // CodeModeMismatch: the GPU's; CodeTooFewInMode: the one asked
}

// NodeLevel reports whether r summarises a node rather than explaining one GPU.
func (r Reason) NodeLevel() bool { return r.GPU == "" }

// Unwrap returns the sentinel error of r's code.
func (r Reason) Unwrap() error {
	if int(r.Code) < len(codeErrs) {
		return codeErrs[r.Code]
	}
	return nil
}

// Error is the full message: "GPU-1a2b (A100-80GB): 3072 MiB free, container
// "train" asks 8192 MiB" or "container "train": no GPU with 8192 MiB free
// (largest free 6144 MiB on GPU-1a2b)".
func (r Reason) Error() string {
	if !r.NodeLevel() {
		return fmt.Sprintf("%s (%s): %s", r.GPU, r.Model, r.gpuText())
	}
	return r.nodeText()
}

// Short is the node-level message without the per-node detail, identical on
// every node that fails the same way: the key Volcano's FitErrors histogram and
// kube-scheduler-style events group on.
func (r Reason) Short() string {
	return r.ShortKey().nodeText()
}

// ShortKey is r without its per-node detail: reasons with equal keys have
// the same Short text.
func (r Reason) ShortKey() Reason {
	have := r.Have
	r.Best, r.Have, r.Match = "", -1, min(r.Match, 1)
	if r.Code == CodeMIGProfileSmall {
		r.Have = have // the profile's memory: the same on every node with that model
	}
	return r
}

// asker names who asks: the container when known.
func (r Reason) asker() string {
	if r.Container == "" {
		return "task"
	}
	return fmt.Sprintf("container %q", r.Container)
}

func (r Reason) gpuText() string {
	switch r.Code {
	case CodeUnhealthy:
		return "unhealthy"
	case CodeTypeFiltered:
		return "model excluded by the type filter"
	case CodeUUIDFiltered:
		return "excluded by the UUID filter"
	case CodeModeMismatch:
		return fmt.Sprintf("in %s mode, not the one %s asks", r.Mode, api.VolcanoModeKey)
	case CodeMPSOneGPU:
		return fmt.Sprintf("in %s mode, which serves one GPU per container; %s asks %d", api.ModeMPS, r.asker(), r.Want)
	case CodeGroupShared:
		return fmt.Sprintf("holds another pod of its PodGroup (%s: %s)", api.VolcanoPodGroupPolicyKey, api.VolcanoPodGroupSpread)
	case CodeMIGOnly:
		return fmt.Sprintf("in %s mode: it serves MIG instances (%s: %s), not shares of the GPU", api.ModeMIG, api.VolcanoModeKey, api.ModeMIG.Volcano())
	case CodeMIGProfile:
		if r.Detail == "" {
			return fmt.Sprintf("in %s mode without MIG profiles published", api.ModeMIG)
		}
		return fmt.Sprintf("no MIG profile gives %s", r.Detail)
	case CodeMIGNoPlacement:
		return fmt.Sprintf("no free placement for %s (its memory slices are held by other instances)", r.Detail)
	case CodeMIGProfileSmall:
		return fmt.Sprintf("its %s MIG profile has %d MiB, less than the %d MiB %s asks", r.Detail, r.Have, r.Want, r.asker())
	case CodeExclusiveHeld:
		return "held exclusively by another task"
	case CodeSharesFull:
		return fmt.Sprintf("%d/%d tenants, no room for another", r.Have, r.Want)
	case CodeShared:
		return fmt.Sprintf("shared by %s, an exclusive (100-core) task needs an idle GPU", plural(r.Have, "task"))
	case CodeMemory:
		if r.Percent > 0 {
			return fmt.Sprintf("%d MiB free, %s asks %d%% = %d MiB", r.Have, r.asker(), r.Percent, r.Want)
		}
		return fmt.Sprintf("%d MiB free, %s asks %d MiB", r.Have, r.asker(), r.Want)
	case CodeCores:
		if r.Want == 0 {
			return fmt.Sprintf("all cores booked, %s asks 0 cores and cannot join", r.asker())
		}
		return fmt.Sprintf("%d%% cores free, %s asks %d%%", r.Have, r.asker(), r.Want)
	}
	return r.nodeText()
}

// nodeText renders a node-level reason, naming the container it is about.
// Have < 0 means "no per-node detail".
func (r Reason) nodeText() string {
	if r.Container == "" {
		return r.nodeBody()
	}
	return fmt.Sprintf("container %q: %s", r.Container, r.nodeBody())
}

func (r Reason) nodeBody() string {
	gpus := "no GPU"
	if r.Count > 1 {
		gpus = fmt.Sprintf("fewer than %d GPUs", r.Count)
	}
	switch r.Code {
	case CodeInvalidRequest:
		return "invalid request: " + r.Detail
	case CodeStale:
		return "inventory stale"
	case CodeNoGPUs:
		return "no GPUs"
	case CodeTooManyGPUs:
		return fmt.Sprintf("more than %d GPUs, unsupported", MaxGPUs)
	case CodeTooFewHealthy:
		switch {
		case r.Have < 0 && r.Match > 0:
			return fmt.Sprintf("needs %s matching the type/UUID filters, has fewer", plural(r.Want, "healthy GPU"))
		case r.Have < 0:
			return fmt.Sprintf("needs %s, has fewer", plural(r.Want, "healthy GPU"))
		case r.Match > 0:
			return fmt.Sprintf("needs %s, %d match the type/UUID filters but %d of them healthy", plural(r.Want, "GPU"), r.Match, r.Have)
		}
		return fmt.Sprintf("needs %s, %d healthy", plural(r.Want, "GPU"), r.Have)
	case CodeTooFewMatching:
		filters := "the type/UUID filters"
		if r.Detail != "" {
			filters += " (" + r.Detail + ")"
		}
		if r.Have < 0 {
			return fmt.Sprintf("needs %s matching %s, has fewer", plural(r.Want, "GPU"), filters)
		}
		return fmt.Sprintf("needs %s, %d match %s", plural(r.Want, "GPU"), r.Have, filters)
	case CodeTooFewFit:
		if r.Have < 0 {
			return fmt.Sprintf("needs %s with room, has fewer", plural(r.Want, "GPU"))
		}
		return fmt.Sprintf("needs %s, %d have room", plural(r.Want, "GPU"), r.Have)
	case CodeTopology:
		return fmt.Sprintf("no NVLink-connected set of %d GPUs with room", r.Want)
	case CodeExclusiveHeld:
		return "GPUs held exclusively by other tasks" + countText(r.Have)
	case CodeSharesFull:
		return "GPUs at their tenant limit" + countText(r.Have)
	case CodeShared:
		return gpus + " idle for an exclusive (100-core) task" + countText(r.Have)
	case CodeMemory:
		want := fmt.Sprintf("%d MiB", r.Want)
		if r.Percent > 0 {
			want = fmt.Sprintf("%d%% of its memory", r.Percent)
		}
		if r.Have < 0 {
			return fmt.Sprintf("%s with %s free", gpus, want)
		}
		return fmt.Sprintf("%s with %s free (largest free %d MiB on %s)", gpus, want, r.Have, r.Best)
	case CodeCores:
		if r.Have < 0 {
			return fmt.Sprintf("%s with %d%% cores free", gpus, r.Want)
		}
		return fmt.Sprintf("%s with %d%% cores free (most free %d%% on %s)", gpus, r.Want, r.Have, r.Best)
	case CodeTooFewInMode:
		spelled := fmt.Sprintf("%s: %s", api.VolcanoModeKey, r.Mode.Volcano())
		switch {
		case r.Have == 0 || r.Have < 0 && r.Count <= 1:
			return fmt.Sprintf("%s: no GPU in %s mode on this node", spelled, r.Mode)
		case r.Have < 0:
			return fmt.Sprintf("%s: fewer than %d GPUs in %s mode on this node", spelled, r.Count, r.Mode)
		}
		return fmt.Sprintf("%s: needs %s in %s mode, %d on this node", spelled, plural(r.Want, "GPU"), r.Mode, r.Have)
	case CodeGroupShared:
		return fmt.Sprintf("%s free of other pods of its PodGroup (%s: %s)", gpus, api.VolcanoPodGroupPolicyKey, api.VolcanoPodGroupSpread) + countText(r.Have)
	case CodeMPSOneGPU:
		return fmt.Sprintf("%s outside %s mode (it serves one GPU per container)", gpus, api.ModeMPS) + countText(r.Have)
	case CodeMIGOnly:
		return fmt.Sprintf("%s outside %s mode (MIG GPUs serve pods with %s: %s)", gpus, api.ModeMIG, api.VolcanoModeKey, api.ModeMIG.Volcano()) + countText(r.Have)
	case CodeMIGNoFit:
		if r.Have < 0 {
			return fmt.Sprintf("no MIG GPU with a free placement for %s", r.Detail)
		}
		return fmt.Sprintf("no MIG GPU with a free placement for %s (%s in %s mode)", r.Detail, plural(r.Have, "GPU"), api.ModeMIG)
	case CodeMIGProfileSmall:
		return fmt.Sprintf("the %s MIG profile has %d MiB, %s asks %d MiB: name a larger profile (%s) or ask at most %d MiB",
			r.Detail, r.Have, r.asker(), r.Want, api.MIGProfileKey, r.Have)
	case CodeUnhealthy, CodeTypeFiltered, CodeUUIDFiltered, CodeModeMismatch, CodeMIGProfile, CodeMIGNoPlacement:
		return r.gpuText()
	}
	return fmt.Sprintf("reason code %d", r.Code)
}

func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func countText(n int64) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(" (%d)", n)
}
