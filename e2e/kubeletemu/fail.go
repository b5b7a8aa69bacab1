package kubeletemu

import (
	"context"
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// admissionReason is the pod status reason kubelet gives a pod whose device
// plugin Allocate failed.
const admissionReason = "UnexpectedAdmissionError"

// failPod marks a rejected pod Failed, as kubelet does (phase Failed, reason
// UnexpectedAdmissionError, the message of the Event). kwok's pod-ready stage
// may have made the pod Running already, or act on a stale copy after this
// patch (it lags on a loaded machine), so the phase is checked again for a
// minute and set again while it is not Failed.
func (n *Node) failPod(ctx context.Context, pod *corev1.Pod, msg string) {
	logger := klog.FromContext(ctx)
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pod.UID},
		"status":   map[string]any{"phase": corev1.PodFailed, "reason": admissionReason, "message": msg},
	})
	if err != nil {
		logger.Error(err, "Encoding the failed status", "pod", klog.KObj(pod))
		return
	}
	pods := n.client.CoreV1().Pods(pod.Namespace)
	deadline := time.Now().Add(time.Minute)
	for {
		cur, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || cur.UID != pod.UID || cur.DeletionTimestamp != nil {
			return // gone, replaced, or going
		}
		if cur.Status.Phase != corev1.PodFailed {
			if _, err := pods.Patch(ctx, pod.Name, types.MergePatchType, body, metav1.PatchOptions{}, "status"); err != nil {
				logger.Error(err, "Marking a rejected pod Failed", "pod", klog.KObj(pod))
			}
		}
		if !time.Now().Before(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}
