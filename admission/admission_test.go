package admission

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/podrequest"
)

var names = api.DefaultResourceNames()

// gpuNode publishes n GPUs of model with memMiB each.
func gpuNode(t *testing.T, name, model string, n int, memMiB int64) *corev1.Node {
	t.Helper()
	inv := api.Inventory{Heartbeat: metav1.Now().Time, NVLinks: make([][]int, n), PCIe: make([][]api.PCIeLevel, n)}
	for i := range n {
		inv.GPUs = append(inv.GPUs, api.GPU{Index: i, UUID: "GPU-" + name + "-" + string(rune('a'+i)), Model: model, MemoryMiB: memMiB, Healthy: true, MaxShares: 10})
		inv.NVLinks[i], inv.PCIe[i] = make([]int, n), make([]api.PCIeLevel, n)
	}
	v, err := api.EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{api.InventoryKey: v}}}
}

func pod(annotations map[string]string, res map[string]int64) *corev1.Pod {
	l := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	for k, v := range res {
		l[corev1.ResourceName(k)] = *resource.NewQuantity(v, resource.DecimalSI)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Annotations: annotations},
		Spec: corev1.PodSpec{SchedulerName: corev1.DefaultSchedulerName, Containers: []corev1.Container{{
			Name: "train", Resources: corev1.ResourceRequirements{Limits: l, Requests: l.DeepCopy()}}}},
	}
}

func apply(t *testing.T, p *corev1.Pod, ops []Op) *corev1.Pod {
	t.Helper()
	doc, _ := json.Marshal(p)
	raw, _ := json.Marshal(ops)
	patch, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		t.Fatal(err)
	}
	out, err := patch.Apply(doc)
	if err != nil {
		t.Fatalf("patch %s does not apply: %v", raw, err)
	}
	var got corev1.Pod
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	return &got
}

func TestMutate(t *testing.T) {
	num, mem, pct, cores := names.Number, names.Memory, names.MemoryPercentage, names.Cores
	nodes := []*corev1.Node{gpuNode(t, "a", "NVIDIA A100-SXM4-80GB", 2, 81920), gpuNode(t, "b", "NVIDIA A100-PCIE-40GB", 2, 40960), gpuNode(t, "l", "NVIDIA L4", 2, 23034)}
	o := Options{Names: names, SchedulerName: "volcano", GPUMemoryMiB: SmallestGPU(func() ([]*corev1.Node, error) { return nodes, nil })}
	tests := []struct {
		name            string
		pod             *corev1.Pod
		opts            *Options
		wantMem, wantC  int64 // totals on the container after admission; -1: not set
		wantAsk         api.ContainerRequest
		wantDenied      string
		wantWarning     string
		wantUnrewritten bool
	}{
		{name: "2 GPUs × 8192 MiB × 25%", pod: pod(nil, map[string]int64{num: 2, mem: 8192, cores: 25}),
			wantMem: 16384, wantC: 50, wantAsk: api.ContainerRequest{Name: "train", Number: 2, MemoryMiB: 8192, Cores: 25}},
		{name: "whole A100s counted at the smallest A100", pod: pod(map[string]string{api.GPUTypeIncludeKey: "A100"}, map[string]int64{num: 2}),
			wantMem: 81920, wantC: 200, wantAsk: api.ContainerRequest{Name: "train", Number: 2, GPUMemoryMiB: 40960}},
		{name: "half of any GPU counted at the smallest (L4)", pod: pod(nil, map[string]int64{num: 1, pct: 50, cores: 10}),
			wantMem: 11517, wantC: 10, wantAsk: api.ContainerRequest{Name: "train", Number: 1, MemoryPercent: 50, Cores: 10, GPUMemoryMiB: 23034}},
		{name: "memory without number is one GPU, as deviceshare reads it", pod: pod(nil, map[string]int64{mem: 4096, cores: 20}),
			wantMem: 4096, wantC: 20, wantAsk: api.ContainerRequest{Name: "train", Number: 1, MemoryMiB: 4096, Cores: 20}},
		{name: "malformed request refused with the fix", pod: pod(nil, map[string]int64{pct: 10}),
			wantDenied: "invalid vGPU request: container \"train\" asks volcano.sh/vgpu-memory-percentage/volcano.sh/vgpu-cores without volcano.sh/vgpu-number"},
		{name: "malformed annotation refused", pod: pod(map[string]string{api.TopologyKey: "nvlink"}, map[string]int64{num: 1}),
			wantDenied: "invalid vGPU request: " + api.TopologyKey + ": expected one of prefer, required, none"},
		{name: "whole A100s named in deviceshare's NVIDIA- form", pod: pod(map[string]string{api.DeviceShareTypeIncludeKey: "NVIDIA-NVIDIA A100-SXM4"}, map[string]int64{num: 1}),
			wantMem: 81920, wantC: 100, wantAsk: api.ContainerRequest{Name: "train", Number: 1, GPUMemoryMiB: 81920}},
		{name: "Volcano's annotations admitted", pod: pod(map[string]string{api.VolcanoModeKey: "hami-core", api.VolcanoUUIDIncludeKey: "GPU-a-a,",
			api.VolcanoUUIDExcludeKey: "GPU-a-b", api.VolcanoPodGroupPolicyKey: "spread"}, map[string]int64{num: 1, mem: 4096, cores: 10}),
			wantMem: 4096, wantC: 10, wantAsk: api.ContainerRequest{Name: "train", Number: 1, MemoryMiB: 4096, Cores: 10}},
		{name: "vgpu-mode mig admitted: it waits for a GPU in MIG mode", pod: pod(map[string]string{api.VolcanoModeKey: "mig"}, map[string]int64{num: 1, mem: 3000}),
			wantMem: 3000, wantC: 0, wantAsk: api.ContainerRequest{Name: "train", Number: 1, MemoryMiB: 3000}},
		{name: "an ask past a named MIG profile's nominal memory refused", // 1g.10gb: at most 10 × 1024 = 10240 MiB on any GPU
			pod:        pod(map[string]string{api.VolcanoModeKey: "mig", api.MIGProfileKey: "1g.10gb"}, map[string]int64{num: 1, mem: 16384}),
			wantDenied: `invalid vGPU request: container "train" asks 16384 MiB of GPU memory, more than the 1g.10gb MIG profile (volcano-vgpu.io/mig-profile) has on any GPU (at most 10240 MiB): name a larger profile or ask less memory`},
		{name: "an ask between a profile's real and nominal memory admitted: the scheduler knows the real", // 9856 < 10000 ≤ 10240
			pod:     pod(map[string]string{api.VolcanoModeKey: "mig", api.MIGProfileKey: "1g.10gb"}, map[string]int64{num: 1, mem: 10000}),
			wantMem: 10000, wantC: 0, wantAsk: api.ContainerRequest{Name: "train", Number: 1, MemoryMiB: 10000}},
		{name: "a media-engine profile's nominal memory", pod: pod(map[string]string{api.MIGProfileKey: "1g.5gb+me"}, map[string]int64{num: 1, mem: 6000}),
			wantDenied: "more than the 1g.5gb+me MIG profile (volcano-vgpu.io/mig-profile) has on any GPU (at most 5120 MiB)"}, // 6000 > 5 × 1024
		{name: "a pod migrated from deviceshare keeps its outputs", pod: pod(map[string]string{"volcano.sh/vgpu-ids-new": "GPU-x,NVIDIA,4096,10:",
			"volcano.sh/vgpu-node": "old", "volcano.sh/vgpu-time": "1700000000", "volcano.sh/devices-to-allocate": ";", "volcano.sh/bind-phase": "success"},
			map[string]int64{num: 1, mem: 4096, cores: 10}),
			wantMem: 4096, wantC: 10, wantAsk: api.ContainerRequest{Name: "train", Number: 1, MemoryMiB: 4096, Cores: 10}},
		{name: "vgpu-mode we do not know refused", pod: pod(map[string]string{api.VolcanoModeKey: "exclusive"}, map[string]int64{num: 1}),
			wantDenied: `invalid vGPU request: volcano.sh/vgpu-mode: expected one of hami-core, mps, mig (hami-core = time-sliced sharing), or no annotation for any mode, got "exclusive"`},
		{name: "unknown volcano.sh/vgpu- key refused", pod: pod(map[string]string{"volcano.sh/vgpu-nouse-gputype": "T4"}, map[string]int64{num: 1}),
			wantDenied: "invalid vGPU request: volcano.sh/vgpu-nouse-gputype: expected one of the Volcano vGPU annotations this scheduler honours"},
		{name: "vgpu-podgroup-policy value Volcano does not define refused", pod: pod(map[string]string{api.VolcanoPodGroupPolicyKey: "pack"}, map[string]int64{num: 1}),
			wantDenied: `invalid vGPU request: volcano.sh/vgpu-podgroup-policy: expected spread (no two pods of one PodGroup on one GPU), the only value Volcano defines, got "pack"`},
		{name: "vgpu-use-gpuuuid naming no GPU refused", pod: pod(map[string]string{api.VolcanoUUIDIncludeKey: ","}, map[string]int64{num: 1}),
			wantDenied: "invalid vGPU request: volcano.sh/vgpu-use-gpuuuid: expected a comma-separated list of GPU UUIDs (remove the annotation to allow any GPU)"},
		{name: "no inventory yet: per GPU, with a warning", pod: pod(map[string]string{api.GPUTypeIncludeKey: "H100"}, map[string]int64{num: 1}),
			wantWarning: "no GPU node publishes an inventory matching", wantUnrewritten: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ops, warnings, err := Mutate(tc.pod, o)
			if tc.wantDenied != "" {
				var d *Denied
				if !errors.As(err, &d) || !strings.Contains(d.Reason, tc.wantDenied) {
					t.Fatalf("err = %v, want a denial containing %q", err, tc.wantDenied)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := apply(t, tc.pod, ops)
			if got.Spec.SchedulerName != "volcano" {
				t.Errorf("schedulerName = %q, want volcano", got.Spec.SchedulerName)
			}
			if tc.wantWarning != "" && (len(warnings) != 1 || !strings.Contains(warnings[0], tc.wantWarning)) {
				t.Errorf("warnings = %q, want %q", warnings, tc.wantWarning)
			}
			if tc.wantUnrewritten {
				if _, ok := got.Annotations[api.RequestsKey]; ok {
					t.Error("rewritten without an inventory")
				}
				return
			}
			c := got.Spec.Containers[0]
			for _, l := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
				m, k := l[corev1.ResourceName(mem)], l[corev1.ResourceName(cores)]
				if m.Value() != tc.wantMem || k.Value() != tc.wantC {
					t.Errorf("resources %v: memory %d, cores %d; want %d, %d", l, m.Value(), k.Value(), tc.wantMem, tc.wantC)
				}
			}
			// The scheduler reads back exactly the per-GPU ask.
			asks, admitted, err := podrequest.Parse(got, names)
			if err != nil || !admitted || len(asks) != 1 {
				t.Fatalf("Parse after admission = %+v, %t, %v", asks, admitted, err)
			}
			if d := cmp.Diff(tc.wantAsk, asks[0].ContainerRequest); d != "" {
				t.Errorf("per-GPU ask (-want +got):\n%s", d)
			}
			// A pod created again from the admitted manifest stays as it is.
			again, _, err := Mutate(got, o)
			if err != nil || len(again) != 0 {
				t.Errorf("second admission = %v, %v; want no change", again, err)
			}
		})
	}
}

func TestMutateLeavesOtherPodsAlone(t *testing.T) {
	cpu := pod(nil, nil)
	ops, warnings, err := Mutate(cpu, Options{Names: names, SchedulerName: "volcano"})
	if err != nil || len(ops) != 0 || len(warnings) != 0 {
		t.Errorf("pod without vGPU: ops %v, warnings %v, err %v", ops, warnings, err)
	}
}

func TestHandler(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	h := Handler(Options{Names: names}, m)
	review := func(p *corev1.Pod) admissionv1.AdmissionReview {
		raw, _ := json.Marshal(p)
		body, _ := json.Marshal(admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{UID: "u1", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
				Operation: admissionv1.Create, Namespace: "ns", Object: runtime.RawExtension{Raw: raw}},
		})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/pods/mutate", bytes.NewReader(body)))
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
			t.Fatalf("response %q: %v", rec.Body.String(), err)
		}
		return out
	}
	ok := review(pod(nil, map[string]int64{names.Number: 2, names.Memory: 8192}))
	if r := ok.Response; !r.Allowed || r.UID != "u1" || r.PatchType == nil || !strings.Contains(string(r.Patch), `"16384"`) {
		t.Errorf("valid pod: %+v (patch %s)", r, r.Patch)
	}
	bad := review(pod(nil, map[string]int64{names.Number: 2, names.Cores: 150}))
	if r := bad.Response; r.Allowed || r.Result == nil || !strings.Contains(r.Result.Message, "volcano.sh/vgpu-cores=150") {
		t.Errorf("invalid pod: %+v", r)
	}
	review(pod(nil, nil))
	got := map[string]float64{}
	for _, r := range []string{ResultAllowed, ResultPatched, ResultDenied, ResultError} {
		got[r] = testutil.ToFloat64(m.Reviews.WithLabelValues(r))
	}
	if diff := cmp.Diff(map[string]float64{ResultAllowed: 1, ResultPatched: 1, ResultDenied: 1, ResultError: 0}, got); diff != "" {
		t.Errorf("reviews counted (-want +got):\n%s", diff)
	}
}

func TestNominalMiB(t *testing.T) {
	for _, tc := range []struct {
		profile string
		want    int64 // 0: the name carries no memory
	}{
		{"1g.10gb", 10240}, {"7g.80gb", 81920}, {"1g.5gb+me", 5120}, {"1g.10gb-me", 10240}, {"4g.24gb", 24576},
		{"1g", 0}, {"g.10gb", 0}, {"1g.10GB", 0}, {"1c.2g.10gb", 0}, {"", 0},
	} {
		got, ok := nominalMiB(tc.profile)
		if got != tc.want || ok != (tc.want > 0) {
			t.Errorf("nominalMiB(%q) = %d, %t; want %d", tc.profile, got, ok, tc.want)
		}
	}
}
