//go:build e2e

package tests

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volcano-vgpu/volcano-vgpu/admission"
	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/testcerts"
)

// webhookCA is a test's CA.
type webhookCA struct{ *testcerts.CA }

func newWebhookCA(t *testing.T, name string) webhookCA {
	t.Helper()
	ca, err := testcerts.NewCA(name, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return webhookCA{ca}
}

func (ca webhookCA) pool() *x509.CertPool { return ca.Pool() }

// issue writes a serving certificate for the IPs and DNS names, signed by
// ca, to dir/tls.crt and dir/tls.key, each through a rename (as a Secret
// volume's update swaps files).
func (ca webhookCA) issue(t *testing.T, dir string, ips []net.IP, dns ...string) {
	t.Helper()
	cert, key, err := ca.Issue("vgpu-admission", 24*time.Hour, ips, dns...)
	if err != nil {
		t.Fatal(err)
	}
	if err := testcerts.WriteSwapped(map[string][]byte{filepath.Join(dir, "tls.crt"): cert, filepath.Join(dir, "tls.key"): key}); err != nil {
		t.Fatal(err)
	}
}

// webhookProc is one vgpu-admission process started by a test.
type webhookProc struct {
	name, addr, serverName string
	cmd                    *exec.Cmd
}

// freePort returns a TCP port on host that nothing listens on now.
func freePort(t *testing.T, host string) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// testDrain: the webhooks' --shutdown-delay in the tests that do not
// measure it (a stop then takes this long).
const testDrain = time.Second

// startWebhook runs vgpu-admission on host with the certificate in dir and
// waits until it answers /healthz over TLS trusted by ca. It is stopped when
// the test ends. drain is its --shutdown-delay.
func startWebhook(t *testing.T, ctx context.Context, name, host, serverName, dir string, ca webhookCA, drain time.Duration) *webhookProc {
	t.Helper()
	w := &webhookProc{name: name, addr: net.JoinHostPort(host, strconv.Itoa(freePort(t, host))), serverName: serverName}
	logf, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	w.cmd = exec.Command(filepath.Join(shared.cl.Config.BinDir, "vgpu-admission"), "--kubeconfig="+shared.cl.Config.Kubeconfig(),
		"--listen="+w.addr, "--tls-cert-file="+filepath.Join(dir, "tls.crt"), "--tls-key-file="+filepath.Join(dir, "tls.key"), "--shutdown-delay="+drain.String(), "-v=4")
	w.cmd.Stdout, w.cmd.Stderr = logf, logf
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.stop(t)
		logf.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logf.Name()); err == nil {
				t.Logf("%s log:\n%s", name, tail(string(b), 3000))
			}
		}
	})
	waitFor(t, ctx, name+" serving /healthz", func() error {
		_, err := w.get(ctx, ca, "/healthz")
		return err
	})
	return w
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// stop sends SIGTERM and waits for the process to exit (once).
func (w *webhookProc) stop(t *testing.T) {
	t.Helper()
	if w.cmd.ProcessState != nil {
		return
	}
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Errorf("stopping %s: %v", w.name, err)
	}
	_ = w.cmd.Wait()
}

// running reports whether the process started by the test still runs.
func (w *webhookProc) running() bool {
	return w.cmd.ProcessState == nil && w.cmd.Process.Signal(syscall.Signal(0)) == nil
}

// get fetches path over TLS trusting only ca.
func (w *webhookProc) get(ctx context.Context, ca webhookCA, path string) ([]byte, error) {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: ca.pool(), ServerName: w.serverName, MinVersion: tls.VersionTLS12}}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+w.addr+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s%s: HTTP %d", w.addr, path, resp.StatusCode)
	}
	return buf.Bytes(), nil
}

// reviews reads the process's count of answered reviews (all results).
func (w *webhookProc) reviews(t *testing.T, ctx context.Context, ca webhookCA) int {
	t.Helper()
	body, err := w.get(ctx, ca, "/metrics")
	if err != nil {
		t.Fatalf("%s /metrics: %v", w.name, err)
	}
	total, seen := 0, false
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "volcano_vgpu_admission_reviews_total{") {
			continue
		}
		f := strings.Fields(line)
		n, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("%s /metrics: %q: %v", w.name, line, err)
		}
		total, seen = total+int(n), true
	}
	if !seen {
		t.Fatalf("%s /metrics has no volcano_vgpu_admission_reviews_total:\n%s", w.name, body)
	}
	return total
}

// admissionHook is the chart's webhook (admission.MatchConditions, the
// opt-out label) with the test's client config, sent only pods of the
// namespaces named.
func admissionHook(t *testing.T, ctx context.Context, name string, cc admissionregv1.WebhookClientConfig, namespaces ...string) {
	t.Helper()
	fail := admissionregv1.Fail
	none := admissionregv1.SideEffectClassNone
	timeout := int32(5)
	nsSel := &metav1.LabelSelector{MatchExpressions: append([]metav1.LabelSelectorRequirement{{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: namespaces,
	}}, admission.OptOutSelector().MatchExpressions...)}
	cfg := &admissionregv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregv1.MutatingWebhook{{Name: "pods.admission.volcano-vgpu.io", ClientConfig: cc,
			Rules: []admissionregv1.RuleWithOperations{{Operations: []admissionregv1.OperationType{admissionregv1.Create},
				Rule: admissionregv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			FailurePolicy: &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}, TimeoutSeconds: &timeout,
			MatchConditions: admission.MatchConditions(api.DefaultResourceNames()),
			ObjectSelector:  admission.OptOutSelector(), NamespaceSelector: nsSel}},
	}
	hooks := shared.kube.AdmissionregistrationV1().MutatingWebhookConfigurations()
	old, err := hooks.Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		cfg.ResourceVersion = old.ResourceVersion
		_, err = hooks.Update(ctx, cfg, metav1.UpdateOptions{})
	} else {
		_, err = hooks.Create(ctx, cfg, metav1.CreateOptions{})
		t.Cleanup(func() {
			_ = hooks.Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	if err != nil {
		t.Fatalf("webhook configuration %s: %v", name, err)
	}
}

// admissionPod is a pod no scheduler takes (the tests only create pods),
// asking vGPU resources when gpu is set.
func admissionPod(ns, name string, gpu bool) *corev1.Pod {
	limits := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
	if gpu {
		limits[api.DefaultResourceNumber] = resource.MustParse("2")
		limits[api.DefaultResourceMemory] = resource.MustParse("1024")
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{SchedulerName: "e2e-nobody", RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "main", Image: "busybox", Resources: corev1.ResourceRequirements{Limits: limits}}}},
	}
}

func createPod(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
	return shared.kube.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
}

// waitCounted creates vGPU probe pods until one is counted by one of procs:
// kube-apiserver has the webhook configuration and reaches a process.
func waitCounted(t *testing.T, ctx context.Context, ns string, ca webhookCA, procs ...*webhookProc) {
	t.Helper()
	count := func() int {
		n := 0
		for _, w := range procs {
			if w.running() {
				n += w.reviews(t, ctx, ca)
			}
		}
		return n
	}
	before, i := count(), 0
	waitFor(t, ctx, "kube-apiserver sending a vGPU pod to the test's webhook", func() error {
		i++
		if _, err := createPod(ctx, admissionPod(ns, fmt.Sprintf("probe-%d", i), true)); err != nil {
			return err
		}
		if count() == before {
			return fmt.Errorf("probe-%d created without a review", i)
		}
		return nil
	})
}

// hostIP is an IPv4 address of this machine outside the loopback range:
// EndpointSlices refuse loopback addresses.
func hostIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Fatalf("no non-loopback IPv4 address on this machine (%v): EndpointSlices refuse 127.0.0.0/8, so the webhook Service cannot have endpoints here", addrs)
	return ""
}

func ptrTo[T any](v T) *T { return &v }
