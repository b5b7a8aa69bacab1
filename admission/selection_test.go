package admission

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8sadmission "k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// TestMatchConditions evaluates the conditions with kube-apiserver's own
// matcher (compiled as for a MutatingWebhookConfiguration): the pods that
// ask for a vGPU or carry a vGPU annotation are sent, no other.
func TestMatchConditions(t *testing.T) {
	custom := api.ResourceNames{Number: "vgpu.example/number", Memory: "vgpu.example/memory",
		MemoryPercentage: "vgpu.example/memory-percentage", Cores: "vgpu.example/cores"}
	limits := func(names ...string) corev1.ResourceRequirements {
		l := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
		for _, n := range names {
			l[corev1.ResourceName(n)] = resource.MustParse("1")
		}
		return corev1.ResourceRequirements{Limits: l}
	}
	requests := func(names ...string) corev1.ResourceRequirements {
		r := limits(names...)
		return corev1.ResourceRequirements{Requests: r.Limits}
	}
	podWith := func(annotations map[string]string, containers, inits []corev1.ResourceRequirements) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Annotations: annotations}}
		for _, r := range containers {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "c", Image: "i", Resources: r})
		}
		for _, r := range inits {
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "i", Image: "i", Resources: r})
		}
		return p
	}
	tests := []struct {
		name  string
		names api.ResourceNames
		pod   *corev1.Pod
		want  bool
	}{
		{name: "CPU pod", names: names, pod: podWith(nil, []corev1.ResourceRequirements{limits()}, nil), want: false},
		{name: "pod with no resources at all", names: names, pod: podWith(nil, []corev1.ResourceRequirements{{}}, nil), want: false},
		{name: "other GPU resource", names: names, pod: podWith(nil, []corev1.ResourceRequirements{limits("nvidia.com/gpu")}, nil), want: false},
		{name: "unrelated annotations", names: names, pod: podWith(map[string]string{"volcano.sh/job-name": "j", "example.io/x": "y"},
			[]corev1.ResourceRequirements{limits()}, nil), want: false},
		{name: "vgpu-number in limits", names: names, pod: podWith(nil, []corev1.ResourceRequirements{limits(), limits(names.Number)}, nil), want: true},
		{name: "vgpu-memory in requests only", names: names, pod: podWith(nil, []corev1.ResourceRequirements{requests(names.Memory)}, nil), want: true},
		{name: "vgpu-memory-percentage", names: names, pod: podWith(nil, []corev1.ResourceRequirements{limits(names.MemoryPercentage)}, nil), want: true},
		{name: "vgpu-cores in an init container", names: names, pod: podWith(nil, []corev1.ResourceRequirements{limits()},
			[]corev1.ResourceRequirements{limits(names.Cores)}), want: true},
		{name: "our annotation without resources", names: names, pod: podWith(map[string]string{api.TopologyKey: "nvlink"},
			[]corev1.ResourceRequirements{limits()}, nil), want: true},
		{name: "Volcano deviceshare annotation", names: names, pod: podWith(map[string]string{"volcano.sh/vgpu-type": "A100"},
			[]corev1.ResourceRequirements{limits()}, nil), want: true},
		{name: "custom names: the default name is not ours", names: custom, pod: podWith(nil,
			[]corev1.ResourceRequirements{limits(api.DefaultResourceNumber)}, nil), want: false},
		{name: "custom names: custom number", names: custom, pod: podWith(nil,
			[]corev1.ResourceRequirements{limits(custom.Number)}, nil), want: true},
	}
	compiler := cel.NewConditionCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion(), true))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fail := admissionregv1.Fail
			hook := &admissionregv1.MutatingWebhook{Name: "pods.admission.volcano-vgpu.io", FailurePolicy: &fail,
				MatchConditions: MatchConditions(tc.names)}
			matcher := webhook.NewMutatingWebhookAccessor("uid", "config", hook).GetCompiledMatcher(compiler)
			gvk := schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
			attr := k8sadmission.NewAttributesRecord(tc.pod, nil, gvk, "ns", "p", schema.GroupVersionResource{Version: "v1", Resource: "pods"},
				"", k8sadmission.Create, &metav1.CreateOptions{}, false, nil)
			versioned := &k8sadmission.VersionedAttributes{Attributes: attr, VersionedKind: gvk, VersionedObject: tc.pod}
			got := matcher.Match(context.Background(), versioned, nil, nil)
			if got.Error != nil {
				t.Fatalf("condition %q: %v", got.FailedConditionName, got.Error)
			}
			if diff := cmp.Diff(tc.want, got.Matches); diff != "" {
				t.Errorf("sent to the webhook (-want +got):\n%s", diff)
			}
		})
	}
}
