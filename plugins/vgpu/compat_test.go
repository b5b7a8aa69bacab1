package vgpu

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// Volcano deviceshare's pod annotations in a whole session: each honoured
// with deviceshare's meaning, or the pod stays pending with a reason naming
// the annotation.

func TestSessionVolcanoAnnotationsHonoured(t *testing.T) {
	tests := []struct {
		name     string
		anno     map[string]string
		wantNode string
		wantGPU  string // "" = any GPU of wantNode
	}{
		{name: "vgpu-use-gpuuuid naming one GPU lands there", anno: map[string]string{api.VolcanoUUIDIncludeKey: "GPU-a100-1"},
			wantNode: "a100", wantGPU: "GPU-a100-1"},
		{name: "vgpu-use-gpuuuid with deviceshare's trailing comma", anno: map[string]string{api.VolcanoUUIDIncludeKey: "GPU-l4-1,"},
			wantNode: "l4", wantGPU: "GPU-l4-1"},
		{name: "vgpu-nouse-gpuuuid", anno: map[string]string{api.VolcanoUUIDExcludeKey: "GPU-a100-0,GPU-a100-1,GPU-l4-0"},
			wantNode: "l4", wantGPU: "GPU-l4-1"},
		{name: "vgpu-nouse-gpuuuid wins over vgpu-use-gpuuuid",
			anno:     map[string]string{api.VolcanoUUIDIncludeKey: "GPU-a100-0,GPU-l4-0", api.VolcanoUUIDExcludeKey: "GPU-a100-0"},
			wantNode: "l4", wantGPU: "GPU-l4-0"},
		{name: "use-gputype in deviceshare's NVIDIA- form", anno: map[string]string{api.DeviceShareTypeIncludeKey: "NVIDIA-NVIDIA L4"}, wantNode: "l4"},
		{name: "nouse-gputype in deviceshare's NVIDIA- form", anno: map[string]string{api.DeviceShareTypeExcludeKey: "NVIDIA-NVIDIA A100"}, wantNode: "l4"},
		{name: "vgpu-mode hami-core runs on time-sliced GPUs", anno: map[string]string{api.VolcanoModeKey: "hami-core", api.DeviceShareTypeIncludeKey: "L4"},
			wantNode: "l4"},
		{name: "deviceshare's own outputs on a migrated pod are ignored", anno: map[string]string{
			"volcano.sh/vgpu-ids-new": "GPU-x,NVIDIA,4096,10:", "volcano.sh/vgpu-node": "old", "volcano.sh/vgpu-time": "1700000000",
			"volcano.sh/devices-to-allocate": "GPU-x,NVIDIA,4096,10:", "volcano.sh/bind-phase": "allocating", "volcano.sh/bind-time": "1700000000",
			api.DeviceShareTypeIncludeKey: "L4"},
			wantNode: "l4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { bindsOneGPU(t, tc.name, tc.anno, tc.wantNode, tc.wantGPU) })
	}
}

func TestSessionVolcanoAnnotationsRefused(t *testing.T) {
	// GPU-n1-0 is held whole by a running pod of another group.
	holder := newPod("ns", "holder").group("pg0").gpus(1, 81920, 100).on("n1", corev1.PodRunning).
		assigned(t, api.DeviceShare{UUID: "GPU-n1-0", MemoryMiB: 81920, Cores: 100}).obj()
	tests := []struct {
		name string
		anno map[string]string
		want string // in Volcano's recorded fit error
	}{
		{name: "vgpu-mode mig on time-sliced GPUs", anno: map[string]string{api.VolcanoModeKey: "mig"},
			want: `1 container "main": volcano.sh/vgpu-mode: mig: no GPU in mig mode on this node.`},
		{name: "vgpu-mode mps on time-sliced GPUs", anno: map[string]string{api.VolcanoModeKey: "mps"},
			want: `1 container "main": volcano.sh/vgpu-mode: mps: no GPU in mps mode on this node.`},
		{name: "vgpu-mode we do not know", anno: map[string]string{api.VolcanoModeKey: "vcuda"},
			want: `1 invalid vGPU request: volcano.sh/vgpu-mode: expected one of hami-core, mps, mig (hami-core = time-sliced sharing), or no annotation for any mode, got "vcuda".`},
		{name: "vgpu-use-gpuuuid naming a held GPU stays unschedulable, never elsewhere", anno: map[string]string{api.VolcanoUUIDIncludeKey: "GPU-n1-0"},
			want: `1 container "main": GPUs held exclusively by other tasks.`},
		{name: "vgpu-use-gpuuuid naming a GPU of no node", anno: map[string]string{api.VolcanoUUIDIncludeKey: "GPU-gone"},
			want: `1 container "main": needs 1 GPU matching the type/UUID filters (UUID in GPU-gone), has fewer.`},
		{name: "unknown volcano.sh/vgpu- key", anno: map[string]string{"volcano.sh/vgpu-type": "A100"},
			want: `1 invalid vGPU request: volcano.sh/vgpu-type: expected one of the Volcano vGPU annotations this scheduler honours`},
		{name: "vgpu-podgroup-policy value Volcano does not define", anno: map[string]string{api.VolcanoPodGroupPolicyKey: "binpack"},
			want: `1 invalid vGPU request: volcano.sh/vgpu-podgroup-policy: expected spread`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newPod("ns", "p").group("pg").gpus(1, 1024, 10)
			for k, v := range tc.anno {
				b.annotate(k, v)
			}
			pod := b.obj()
			runSession(t, sessionCase{
				TestCommonStruct: uthelper.TestCommonStruct{
					Name:  tc.name,
					Nodes: []*corev1.Node{newGPUNode("n1", "A100-80GB", 2, 81920).obj(t)},
					Pods:  []*corev1.Pod{holder, pod},
					PodGroups: []*schedulingv1beta1.PodGroup{
						podGroup("pg", 1), util.BuildPodGroup("pg0", "ns", "q1", 1, nil, schedulingv1beta1.PodGroupRunning),
					},
					ExpectBindMap: map[string]string{}, ExpectBindsNum: 0,
				},
				check: func(t *testing.T, r *sessionRun) {
					if a, ok := assignments(t, r, "ns")["p"]; ok {
						t.Errorf("pod assigned %v", uuids(a))
					}
					if msg := fitError(t, r.ssn, pod); !strings.Contains(msg, tc.want) {
						t.Errorf("fit error %q lacks %q", msg, tc.want)
					}
				},
			})
		})
	}
}

func TestSessionPodGroupSpread(t *testing.T) {
	spread := func(name string) *corev1.Pod {
		return newPod("ns", name).group("pg").gpus(1, 1024, 10).annotate(api.VolcanoPodGroupPolicyKey, "spread").obj()
	}
	t.Run("a gang of two lands on two GPUs, where binpack would stack them", func(t *testing.T) {
		runSession(t, sessionCase{
			TestCommonStruct: uthelper.TestCommonStruct{
				Name:  "spread gang",
				Nodes: []*corev1.Node{newGPUNode("n1", "A100-80GB", 2, 81920).obj(t)},
				Pods:  []*corev1.Pod{spread("w0"), spread("w1")}, PodGroups: []*schedulingv1beta1.PodGroup{podGroup("pg", 2)},
				ExpectBindMap: map[string]string{"ns/w0": "n1", "ns/w1": "n1"}, ExpectBindsNum: 2,
			},
			check: func(t *testing.T, r *sessionRun) {
				as := assignments(t, r, "ns")
				a, b := uuids(as["w0"]), uuids(as["w1"])
				if len(a) != 1 || len(b) != 1 || a[0] == b[0] {
					t.Errorf("w0 on %v, w1 on %v: want one GPU each, different", a, b)
				}
			},
		})
	})
	t.Run("a running sibling's GPU is refused in the predicate", func(t *testing.T) {
		running := newPod("ns", "w0").group("pg").gpus(1, 1024, 10).annotate(api.VolcanoPodGroupPolicyKey, "spread").
			on("n1", corev1.PodRunning).assigned(t, api.DeviceShare{UUID: "GPU-n1-0", MemoryMiB: 1024, Cores: 10}).obj()
		pending := spread("w1")
		runSession(t, sessionCase{
			TestCommonStruct: uthelper.TestCommonStruct{
				Name:  "spread beside a running sibling",
				Nodes: []*corev1.Node{newGPUNode("n1", "A100-80GB", 1, 81920).obj(t)},
				Pods:  []*corev1.Pod{running, pending}, PodGroups: []*schedulingv1beta1.PodGroup{podGroup("pg", 1)},
				ExpectBindMap: map[string]string{}, ExpectBindsNum: 0,
			},
			check: func(t *testing.T, r *sessionRun) {
				want := `1 container "main": no GPU free of other pods of its PodGroup (volcano.sh/vgpu-podgroup-policy: spread).`
				if msg := fitError(t, r.ssn, pending); !strings.Contains(msg, want) {
					t.Errorf("fit error %q lacks %q", msg, want)
				}
			},
		})
	})
	t.Run("beside a running sibling it takes the other GPU", func(t *testing.T) {
		running := newPod("ns", "w0").group("pg").gpus(1, 1024, 10).
			on("n1", corev1.PodRunning).assigned(t, api.DeviceShare{UUID: "GPU-n1-0", MemoryMiB: 1024, Cores: 10}).obj()
		runSession(t, sessionCase{
			TestCommonStruct: uthelper.TestCommonStruct{
				Name:  "spread beside a running sibling, room left",
				Nodes: []*corev1.Node{newGPUNode("n1", "A100-80GB", 2, 81920).obj(t)},
				Pods:  []*corev1.Pod{running, spread("w1")}, PodGroups: []*schedulingv1beta1.PodGroup{podGroup("pg", 1)},
				ExpectBindMap: map[string]string{"ns/w1": "n1"}, ExpectBindsNum: 1,
			},
			check: func(t *testing.T, r *sessionRun) {
				if got := uuids(assignments(t, r, "ns")["w1"]); len(got) != 1 || got[0] != "GPU-n1-1" {
					t.Errorf("w1 on %v, want [GPU-n1-1] (GPU-n1-0 holds its sibling)", got)
				}
			},
		})
	})
}
