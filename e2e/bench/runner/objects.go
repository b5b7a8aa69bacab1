package runner

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/trace"
)

// Labels on every benchmark pod: its job's trace index.
const LabelJob = "volcano-vgpu.io/bench-job"

// podName names replica r of job j.
func podName(j trace.Job, r int) string { return fmt.Sprintf("%s-%d", j.Name, r) }

// resources is what one pod of j asks: CPU and memory always, the vGPU
// resources only when gpu is set (off for the CPU-only baseline).
//
// Whole GPUs ask vgpu-memory-percentage 100 and vgpu-cores 100, which both
// plugins read as "the whole GPU, exclusively" whatever its memory.
func resources(j trace.Job, gpu bool) corev1.ResourceRequirements {
	r := corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(j.CPUMilli, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(j.HostMiB<<20, resource.BinarySI),
	}}
	if !gpu {
		return r
	}
	n := api.DefaultResourceNames()
	q := func(v int64) resource.Quantity { return *resource.NewQuantity(v, resource.DecimalSI) }
	r.Limits = corev1.ResourceList{
		corev1.ResourceName(n.Number): q(int64(j.GPUs)),
		corev1.ResourceName(n.Cores):  q(int64(j.Cores)),
	}
	if j.MemoryMiB > 0 {
		r.Limits[corev1.ResourceName(n.Memory)] = q(j.MemoryMiB)
	} else {
		r.Limits[corev1.ResourceName(n.MemoryPercentage)] = q(100)
	}
	return r
}

// PodGroup is the PodGroup of job j, as Volcano's job controller would
// create it for a Job of the same tasks: minMember the job's pods,
// minResources their summed requests (extended resources default their
// requests to their limits).
func PodGroup(j trace.Job, ns string, gpu bool) *schedv1beta1.PodGroup {
	res := resources(j, gpu)
	min := corev1.ResourceList{}
	for _, l := range []corev1.ResourceList{res.Requests, res.Limits} {
		for name, v := range l {
			total := v.DeepCopy()
			for range j.Pods - 1 {
				total.Add(v)
			}
			min[name] = total
		}
	}
	return &schedv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: j.Name, Namespace: ns},
		Spec:       schedv1beta1.PodGroupSpec{MinMember: int32(j.Pods), Queue: "default", MinResources: &min},
	}
}

// Pod is replica r of job j: one container, scheduled by Volcano in j's
// PodGroup.
func Pod(j trace.Job, r int, ns string, gpu bool) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: podName(j, r), Namespace: ns,
			Labels:      map[string]string{LabelJob: strconv.Itoa(j.Index)},
			Annotations: map[string]string{schedv1beta1.KubeGroupNameAnnotationKey: j.Name},
		},
		Spec: corev1.PodSpec{
			SchedulerName:                 "volcano",
			TerminationGracePeriodSeconds: new(int64),
			Containers:                    []corev1.Container{{Name: "main", Image: "bench", Resources: resources(j, gpu)}},
		},
	}
}
