package admission

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// Handler serves admission.k8s.io/v1 AdmissionReviews for pod creation at
// any path it is mounted on, counting each answer in m (nil: not counted).
func Handler(o Options, m *Metrics) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer m.observe(time.Now())
		body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		if err != nil {
			m.fail(ErrorReadBody)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
			m.fail(ErrorNotReview)
			http.Error(w, fmt.Sprintf("expected an admission.k8s.io/v1 AdmissionReview: %v", err), http.StatusBadRequest)
			return
		}
		review.Response = review1(review.Request, o)
		review.Request = nil
		out, err := json.Marshal(review)
		if err != nil {
			m.fail(ErrorResponseEncode)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if kind := errorKind(review.Response); kind != "" {
			m.fail(kind)
		} else {
			m.count(result(review.Response))
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	})
}

func review1(req *admissionv1.AdmissionRequest, o Options) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if req.Kind.Kind != "Pod" || req.Operation != admissionv1.Create {
		return resp
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		resp.Allowed = false
		resp.Result = &metav1.Status{Message: "decoding the pod: " + err.Error(), Code: http.StatusBadRequest}
		return resp
	}
	ops, warnings, err := Mutate(&pod, o)
	logger := klog.Background().WithValues("pod", klog.KRef(req.Namespace, podName(&pod)))
	if err != nil {
		logger.V(2).Info("Refused", "reason", err.Error())
		resp.Allowed = false
		resp.Result = &metav1.Status{Message: err.Error(), Reason: metav1.StatusReasonInvalid, Code: http.StatusUnprocessableEntity}
		return resp
	}
	resp.Warnings = warnings
	if len(ops) > 0 {
		patch, err := json.Marshal(ops)
		if err != nil {
			resp.Allowed = false
			resp.Result = &metav1.Status{Message: err.Error(), Code: http.StatusInternalServerError}
			return resp
		}
		pt := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = patch, &pt
		logger.V(4).Info("Admitted with totals", "patch", string(patch))
	}
	return resp
}

// result is the reviews counter's label for a response.
func result(r *admissionv1.AdmissionResponse) string {
	switch {
	case !r.Allowed && r.Result != nil && r.Result.Code == http.StatusUnprocessableEntity:
		return ResultDenied
	case !r.Allowed:
		return ResultError
	case len(r.Patch) > 0:
		return ResultPatched
	}
	return ResultAllowed
}

func podName(p *corev1.Pod) string {
	if p.Name != "" {
		return p.Name
	}
	return p.GenerateName + "*"
}

// SmallestGPU returns a GPUMemoryMiB function over the nodes list returns:
// the smallest GPU, among those whose model passes the filters, of the
// inventories published on them. Each node's inventory is decoded once per
// published value (a heartbeat republishes the same value), not per pod: a
// burst of pods would otherwise decode every node's inventory each.
func SmallestGPU(list func() ([]*corev1.Node, error)) func(include, exclude []string) (int64, bool) {
	c := &inventoryCache{byNode: map[string]decoded{}}
	return func(include, exclude []string) (int64, bool) {
		nodes, err := list()
		if err != nil {
			return 0, false
		}
		var best int64
		for _, n := range nodes {
			value, ok := n.Annotations[api.InventoryKey]
			if !ok {
				continue
			}
			for _, g := range c.gpus(n.Name, value) {
				if matches(g.model, include, exclude) && (best == 0 || g.memoryMiB < best) {
					best = g.memoryMiB
				}
			}
		}
		return best, best > 0
	}
}

// inventoryCache keeps each node's decoded inventory with the value it came from.
type inventoryCache struct {
	mu     sync.Mutex
	byNode map[string]decoded
}

type decoded struct {
	value string
	gpus  []gpuSize // nil when the value does not decode
}

// gpuSize is what the lookup needs of a GPU: its model and memory.
type gpuSize struct {
	model     string
	memoryMiB int64
}

func (c *inventoryCache) gpus(node, value string) []gpuSize {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d, ok := c.byNode[node]; ok && d.value == value {
		return d.gpus
	}
	d := decoded{value: value}
	if inv, err := api.DecodeInventory(value); err == nil {
		for _, g := range inv.GPUs {
			d.gpus = append(d.gpus, gpuSize{model: g.Model, memoryMiB: g.MemoryMiB})
		}
	}
	c.byNode[node] = d
	return d.gpus
}

// matches: the model matches one include (when any) and no exclude, as the
// scheduler matches them (api.ModelMatches: case-insensitive substrings of
// the model or of deviceshare's "NVIDIA-" + model).
func matches(model string, include, exclude []string) bool {
	ok := len(include) == 0
	for _, s := range include {
		ok = ok || api.ModelMatches(model, s)
	}
	for _, s := range exclude {
		ok = ok && !api.ModelMatches(model, s)
	}
	return ok
}
