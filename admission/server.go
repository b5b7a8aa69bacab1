package admission

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// Handler serves admission.k8s.io/v1 AdmissionReviews for pod creation at
// any path it is mounted on.
func Handler(o Options) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
			http.Error(w, fmt.Sprintf("expected an admission.k8s.io/v1 AdmissionReview: %v", err), http.StatusBadRequest)
			return
		}
		review.Response = review1(review.Request, o)
		review.Request = nil
		out, err := json.Marshal(review)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
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

func podName(p *corev1.Pod) string {
	if p.Name != "" {
		return p.Name
	}
	return p.GenerateName + "*"
}

// SmallestGPU returns a GPUMemoryMiB function over the nodes list returns:
// the smallest GPU, among those whose model passes the filters, of the
// inventories published on them.
func SmallestGPU(list func() ([]*corev1.Node, error)) func(include, exclude []string) (int64, bool) {
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
			inv, err := api.DecodeInventory(value)
			if err != nil {
				continue
			}
			for _, g := range inv.GPUs {
				if matches(g.Model, include, exclude) && (best == 0 || g.MemoryMiB < best) {
					best = g.MemoryMiB
				}
			}
		}
		return best, best > 0
	}
}

// matches: the model contains one include (when any) and no exclude,
// case-insensitively (the scheduler's rule).
func matches(model string, include, exclude []string) bool {
	m := strings.ToLower(model)
	ok := len(include) == 0
	for _, s := range include {
		ok = ok || strings.Contains(m, strings.ToLower(s))
	}
	for _, s := range exclude {
		ok = ok && !strings.Contains(m, strings.ToLower(s))
	}
	return ok
}
