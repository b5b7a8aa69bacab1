package podrequest

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

var names = api.DefaultResourceNames()

func container(name string, res map[string]int64) corev1.Container {
	l := corev1.ResourceList{}
	for k, v := range res {
		l[corev1.ResourceName(k)] = *resource.NewQuantity(v, resource.DecimalSI)
	}
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Limits: l}}
}

func admitted(t *testing.T, containers []corev1.Container, reqs ...api.ContainerRequest) *corev1.Pod {
	t.Helper()
	v, err := api.EncodeRequests(api.Requests{Containers: reqs})
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{api.RequestsKey: v}}, Spec: corev1.PodSpec{Containers: containers}}
}

func TestParse(t *testing.T) {
	num, mem, cores := names.Number, names.Memory, names.Cores
	train := api.ContainerRequest{Name: "train", Number: 2, MemoryMiB: 8192, Cores: 25}
	tests := []struct {
		name         string
		pod          *corev1.Pod
		want         []Ask
		wantAdmitted bool
		wantErr      string
	}{
		{name: "per GPU, no admission",
			pod:  &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{container("train", map[string]int64{num: 2, mem: 8192, cores: 25})}}},
			want: []Ask{{ContainerRequest: train}}},
		{name: "totals with the per-GPU asks recorded",
			pod:  admitted(t, []corev1.Container{container("train", map[string]int64{num: 2, mem: 16384, cores: 50})}, train),
			want: []Ask{{ContainerRequest: train}}, wantAdmitted: true},
		{name: "whole GPUs counted at 40960 MiB and 100 cores each",
			pod: admitted(t, []corev1.Container{container("train", map[string]int64{num: 2, mem: 81920, cores: 200})},
				api.ContainerRequest{Name: "train", Number: 2, GPUMemoryMiB: 40960}),
			want: []Ask{{ContainerRequest: api.ContainerRequest{Name: "train", Number: 2, GPUMemoryMiB: 40960}}}, wantAdmitted: true},
		{name: "resources raised after admission",
			pod:     admitted(t, []corev1.Container{container("train", map[string]int64{num: 2, mem: 4096, cores: 50})}, train),
			wantErr: `app container "train" has volcano.sh/vgpu-memory=4096 but volcano-vgpu.io/requests says its asks add up to 16384`},
		{name: "container missing from the annotation",
			pod:     admitted(t, []corev1.Container{container("train", map[string]int64{num: 2, mem: 16384, cores: 50}), container("eval", map[string]int64{num: 1})}, train),
			wantErr: `volcano-vgpu.io/requests lists no app container "eval"`},
		{name: "cores over 100 per GPU without admission",
			pod:     &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{container("train", map[string]int64{num: 2, cores: 150})}}},
			wantErr: "volcano.sh/vgpu-cores=150, expected 0 to 100"},
		{name: "memory without number",
			pod:     &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{container("train", map[string]int64{mem: 1024})}}},
			wantErr: "add volcano.sh/vgpu-number: 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, adm, err := Parse(tc.pod, names)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if adm != tc.wantAdmitted {
				t.Errorf("admitted = %t, want %t", adm, tc.wantAdmitted)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}
