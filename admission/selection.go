package admission

import (
	"fmt"
	"strings"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// MatchConditionName names the webhook's only match condition.
const MatchConditionName = "vgpu-pods-only"

// MatchConditions are the CEL conditions of the webhook configuration:
// kube-apiserver sends a pod only when one of its containers or init
// containers names one of the resource names in its limits or requests, or
// it carries an annotation of ours (api.Prefix) or of Volcano deviceshare
// (api.DeviceSharePrefix). Every other pod is created without calling the
// webhook, so a webhook that is down cannot hold it up. The chart renders
// the same expression (installer tests compare them).
func MatchConditions(names api.ResourceNames) []admissionregv1.MatchCondition {
	quoted := make([]string, 0, 4)
	for _, n := range []string{names.Number, names.Memory, names.MemoryPercentage, names.Cores} {
		quoted = append(quoted, "'"+n+"'")
	}
	list := "[" + strings.Join(quoted, ", ") + "]"
	asks := fmt.Sprintf("c.?resources.?limits.orValue({}).exists(r, r in %[1]s) || c.?resources.?requests.orValue({}).exists(r, r in %[1]s)", list)
	expr := fmt.Sprintf("object.metadata.?annotations.orValue({}).exists(k, k.startsWith('%s') || k.startsWith('%s'))"+
		" || object.spec.containers.exists(c, %[3]s)"+
		" || object.spec.?initContainers.orValue([]).exists(c, %[3]s)", api.Prefix, api.DeviceSharePrefix, asks)
	return []admissionregv1.MatchCondition{{Name: MatchConditionName, Expression: expr}}
}

// OptOutSelector is the webhook's objectSelector and (together with the
// namespaces it never handles) namespaceSelector: objects labelled
// api.AdmissionOptOutLabel=api.AdmissionOptOutValue are left out.
func OptOutSelector() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: api.AdmissionOptOutLabel, Operator: metav1.LabelSelectorOpNotIn, Values: []string{api.AdmissionOptOutValue},
	}}}
}
