package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/volcano-vgpu/volcano-vgpu/admission"
	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/testcerts"
)

// Volcano's admission webhooks, served by vc-webhook-manager on 127.0.0.1.
// The manager only fills in the CA bundle of configurations that exist, so
// the harness creates them, with URLs instead of in-cluster Services. The
// table mirrors the manager's default --enabled-admission list.
var volcanoWebhooks = []struct {
	path       string
	mutating   bool
	group, ver string
	resource   string
	ops        []admissionv1.OperationType
}{
	{"/jobs/mutate", true, "batch.volcano.sh", "v1alpha1", "jobs", []admissionv1.OperationType{admissionv1.Create}},
	{"/jobs/validate", false, "batch.volcano.sh", "v1alpha1", "jobs", []admissionv1.OperationType{admissionv1.Create, admissionv1.Update}},
	{"/podgroups/mutate", true, "scheduling.volcano.sh", "v1beta1", "podgroups", []admissionv1.OperationType{admissionv1.Create}},
	{"/pods/validate", false, "", "v1", "pods", []admissionv1.OperationType{admissionv1.Create}},
	{"/pods/mutate", true, "", "v1", "pods", []admissionv1.OperationType{admissionv1.Create}},
	{"/queues/mutate", true, "scheduling.volcano.sh", "v1beta1", "queues", []admissionv1.OperationType{admissionv1.Create}},
	{"/queues/validate", false, "scheduling.volcano.sh", "v1beta1", "queues", []admissionv1.OperationType{admissionv1.Create, admissionv1.Update, admissionv1.Delete}},
}

// webhookTLS is the CA and serving certificate of vc-webhook-manager.
type webhookTLS struct{ ca, cert, key string }

// ensureWebhookTLS creates a CA and a serving certificate for 127.0.0.1
// once per cluster state directory.
func (c Config) ensureWebhookTLS() (webhookTLS, error) {
	dir := c.certDir()
	t := webhookTLS{ca: filepath.Join(dir, "webhook-ca.crt"), cert: filepath.Join(dir, "webhook.crt"), key: filepath.Join(dir, "webhook.key")}
	if _, err := os.Stat(t.key); err == nil {
		return t, nil
	}
	ca, err := testcerts.NewCA("volcano-vgpu local webhook CA", 10*365*24*time.Hour)
	if err != nil {
		return t, err
	}
	cert, key, err := ca.Issue("127.0.0.1", 10*365*24*time.Hour, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		return t, err
	}
	if err := testcerts.WriteSwapped(map[string][]byte{t.ca: ca.PEM, t.cert: cert, t.key: key}); err != nil {
		return t, err
	}
	return t, nil
}

// ensureWebhookConfigs creates Volcano's webhook configurations pointing at
// the local vc-webhook-manager.
func (c Config) ensureWebhookConfigs(ctx context.Context, kube kubernetes.Interface, t webhookTLS) error {
	ca, err := os.ReadFile(t.ca)
	if err != nil {
		return err
	}
	fail := admissionv1.Fail
	none := admissionv1.SideEffectClassNone
	timeout := int32(10)
	nsSel := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system", "volcano-system"},
	}}}
	for _, w := range volcanoWebhooks {
		name := "volcano-admission-service" + strings.ReplaceAll(w.path, "/", "-")
		url := fmt.Sprintf("https://127.0.0.1:%d%s", c.Ports.Webhook, w.path)
		rule := admissionv1.RuleWithOperations{Operations: w.ops, Rule: admissionv1.Rule{
			APIGroups: []string{w.group}, APIVersions: []string{w.ver}, Resources: []string{w.resource},
		}}
		cc := admissionv1.WebhookClientConfig{URL: &url, CABundle: ca}
		var err error
		if w.mutating {
			_, err = kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionv1.MutatingWebhookConfiguration{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Webhooks: []admissionv1.MutatingWebhook{{Name: "mutate" + strings.ReplaceAll(w.path, "/", ".") + ".volcano.sh", ClientConfig: cc,
					Rules: []admissionv1.RuleWithOperations{rule}, FailurePolicy: &fail, SideEffects: &none,
					AdmissionReviewVersions: []string{"v1"}, NamespaceSelector: nsSel, TimeoutSeconds: &timeout}},
			}, metav1.CreateOptions{})
		} else {
			_, err = kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionv1.ValidatingWebhookConfiguration{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Webhooks: []admissionv1.ValidatingWebhook{{Name: "validate" + strings.ReplaceAll(w.path, "/", ".") + ".volcano.sh", ClientConfig: cc,
					Rules: []admissionv1.RuleWithOperations{rule}, FailurePolicy: &fail, SideEffects: &none,
					AdmissionReviewVersions: []string{"v1"}, NamespaceSelector: nsSel, TimeoutSeconds: &timeout}},
			}, metav1.CreateOptions{})
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("webhook configuration %s: %w", name, err)
		}
	}
	if c.DevicePluginHAMi {
		// deviceshare reads vgpu-memory per GPU: no totals beside it.
		return nil
	}
	url := fmt.Sprintf("https://127.0.0.1:%d/pods/mutate", c.Ports.Admission)
	_, err = kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: AdmissionName},
		Webhooks: []admissionv1.MutatingWebhook{{Name: "pods.admission.volcano-vgpu.io",
			ClientConfig: admissionv1.WebhookClientConfig{URL: &url, CABundle: ca},
			Rules: []admissionv1.RuleWithOperations{{Operations: []admissionv1.OperationType{admissionv1.Create},
				Rule: admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			FailurePolicy: &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"},
			MatchConditions: admission.MatchConditions(api.DefaultResourceNames()), ObjectSelector: admission.OptOutSelector(),
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: append(slices.Clone(nsSel.MatchExpressions), admission.OptOutSelector().MatchExpressions...)},
			TimeoutSeconds:    &timeout}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("webhook configuration %s: %w", AdmissionName, err)
	}
	return nil
}
