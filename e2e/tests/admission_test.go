//go:build e2e

package tests

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// The admission webhook's availability on the local kube-apiserver: each test
// runs its own vgpu-admission processes (the shipped binary) with its own
// certificates and MutatingWebhookConfiguration, scoped to the test's
// namespaces, and reads each process's review counter (/metrics), so the
// cluster's own webhook and other tests cannot move it.

// TestAdmissionOnlyVGPUPodsSent: kube-apiserver sends the webhook only the
// pods that ask for vGPU resources or carry a vGPU annotation: a CPU pod, a
// pod asking another extended resource and a pod with unrelated annotations
// are created without a review, as is a vGPU pod opted out by its label or
// its namespace's; the vGPU pod created after them is reviewed (exactly one
// review in all).
func TestAdmissionOnlyVGPUPodsSent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns, optedOut := newNamespace(t, ctx), newNamespace(t, ctx)
	nsObj, err := shared.kube.CoreV1().Namespaces().Get(ctx, optedOut, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nsObj.Labels[api.AdmissionOptOutLabel] = api.AdmissionOptOutValue
	if _, err := shared.kube.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ca, dir := newWebhookCA(t, "only-vgpu"), t.TempDir()
	ca.issue(t, dir, []net.IP{net.ParseIP("127.0.0.1")})
	w := startWebhook(t, ctx, "vgpu-admission-only-vgpu", "127.0.0.1", "127.0.0.1", dir, ca, testDrain)
	url := "https://" + w.addr + "/pods/mutate"
	admissionHook(t, ctx, "e2e-"+ns, admissionregv1.WebhookClientConfig{URL: &url, CABundle: ca.PEM}, ns, optedOut)
	waitCounted(t, ctx, ns, ca, w)

	before := w.reviews(t, ctx, ca)
	otherGPU := admissionPod(ns, "other-gpu", false)
	otherGPU.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"] = resource.MustParse("1")
	annotated := admissionPod(ns, "annotated", false)
	annotated.Annotations = map[string]string{"volcano.sh/job-name": "j", "example.io/owner": "team"}
	labelled := admissionPod(ns, "opted-out", true)
	labelled.Labels = map[string]string{api.AdmissionOptOutLabel: api.AdmissionOptOutValue}
	for _, p := range []*corev1.Pod{admissionPod(ns, "cpu", false), otherGPU, annotated, labelled, admissionPod(optedOut, "in-opted-out-ns", true)} {
		got, err := createPod(ctx, p)
		if err != nil {
			t.Fatalf("creating %s/%s: %v", p.Namespace, p.Name, err)
		}
		if _, ok := got.Annotations[api.RequestsKey]; ok {
			t.Errorf("%s/%s was rewritten by a webhook: %v", p.Namespace, p.Name, got.Annotations)
		}
	}
	gpu, err := createPod(ctx, admissionPod(ns, "gpu", true))
	if err != nil {
		t.Fatal(err)
	}
	if q := gpu.Spec.Containers[0].Resources.Limits[api.DefaultResourceMemory]; q.Value() != 2048 {
		t.Errorf("the vGPU pod carries vgpu-memory %s, want the total 2048 (2 × 1024)", q.String())
	}
	if n := w.reviews(t, ctx, ca) - before; n != 1 {
		t.Errorf("the webhook answered %d reviews for 5 pods that ask no vGPU (or opted out) and 1 that does; want 1", n)
	}
}

// TestAdmissionCertificateRotation: the serving certificate files are
// replaced under a running webhook by one from a new CA, the webhook
// configuration is moved to trust only the new CA (through a bundle of both,
// as a rotation does), and vGPU pods keep being created and reviewed by the
// same process, serving only the new certificate.
func TestAdmissionCertificateRotation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := newNamespace(t, ctx)
	oldCA, newCA, dir := newWebhookCA(t, "rotation-old"), newWebhookCA(t, "rotation-new"), t.TempDir()
	loopback := []net.IP{net.ParseIP("127.0.0.1")}
	oldCA.issue(t, dir, loopback)
	w := startWebhook(t, ctx, "vgpu-admission-rotation", "127.0.0.1", "127.0.0.1", dir, oldCA, testDrain)
	pid := w.cmd.Process.Pid
	url := "https://" + w.addr + "/pods/mutate"
	hook := func(bundle []byte) {
		admissionHook(t, ctx, "e2e-"+ns, admissionregv1.WebhookClientConfig{URL: &url, CABundle: bundle}, ns)
	}
	hook(oldCA.PEM)
	waitCounted(t, ctx, ns, oldCA, w)

	hook(append(append([]byte{}, oldCA.PEM...), newCA.PEM...))
	newCA.issue(t, dir, loopback)
	waitFor(t, ctx, "the webhook serving the new certificate", func() error {
		_, err := w.get(ctx, newCA, "/healthz")
		return err
	})
	if _, err := w.get(ctx, oldCA, "/healthz"); err == nil {
		t.Fatal("a client trusting only the old CA still connects: the old certificate is served too")
	}
	hook(newCA.PEM)
	waitCounted(t, ctx, ns, newCA, w)
	before := w.reviews(t, ctx, newCA)
	for i := range 5 {
		p, err := createPod(ctx, admissionPod(ns, fmt.Sprintf("after-%d", i), true))
		if err != nil {
			t.Fatalf("creating a vGPU pod after the rotation: %v", err)
		}
		if q := p.Spec.Containers[0].Resources.Limits[api.DefaultResourceMemory]; q.Value() != 2048 {
			t.Errorf("%s carries vgpu-memory %s, want the total 2048", p.Name, q.String())
		}
	}
	if n := w.reviews(t, ctx, newCA) - before; n != 5 {
		t.Errorf("the webhook reviewed %d of the 5 pods created after the rotation", n)
	}
	if !w.running() || w.cmd.Process.Pid != pid {
		t.Errorf("the webhook (pid %d) did not keep running through the rotation", pid)
	}
}

// TestAdmissionTwoReplicasOneStopped: two webhook processes behind one
// Service (two EndpointSlices, as the endpoint controller writes them for
// two pods; kube-apiserver picks a ready endpoint per connection). One is
// marked not ready, as the endpoint controller does when its pod
// terminates, then stopped: every vGPU pod created after that is reviewed by
// the other. With both stopped, vGPU pods are refused (failurePolicy Fail),
// so the pods before really went through the webhook.
func TestAdmissionTwoReplicasOneStopped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := newNamespace(t, ctx)
	host := hostIP(t)
	const svcName = "vgpu-admission"
	serverName := svcName + "." + ns + ".svc"
	ca, dir := newWebhookCA(t, "replicas"), t.TempDir()
	ca.issue(t, dir, nil, serverName)
	// the replica that goes drains as the chart's default does
	const drain = 10 * time.Second
	procs := []*webhookProc{
		startWebhook(t, ctx, "vgpu-admission-a", host, serverName, dir, ca, drain),
		startWebhook(t, ctx, "vgpu-admission-b", host, serverName, dir, ca, testDrain),
	}
	_, err := shared.kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svcName, Namespace: ns},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "https", Port: 443}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slice := func(w *webhookProc, ready bool) *discoveryv1.EndpointSlice {
		_, port, _ := net.SplitHostPort(w.addr)
		p, _ := strconv.Atoi(port)
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: ns, Labels: map[string]string{
				discoveryv1.LabelServiceName: svcName, discoveryv1.LabelManagedBy: "e2e.volcano-vgpu.io"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptrTo("https"), Port: ptrTo(int32(p))}},
		}
	}
	slices := shared.kube.DiscoveryV1().EndpointSlices(ns)
	for _, w := range procs {
		if _, err := slices.Create(ctx, slice(w, true), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	path := "/pods/mutate"
	port := int32(443)
	admissionHook(t, ctx, "e2e-"+ns, admissionregv1.WebhookClientConfig{CABundle: ca.PEM,
		Service: &admissionregv1.ServiceReference{Namespace: ns, Name: svcName, Path: &path, Port: &port}}, ns)
	waitCounted(t, ctx, ns, ca, procs...)

	// A rolling update's replica going: its endpoint marked not ready (as
	// the endpoint controller does for a terminating pod) and SIGTERM at
	// once. kube-apiserver learns of the first late and keeps its open
	// connection to the replica (all of 10 pods went to it for 3 minutes),
	// so the replica answers on for its drain delay, each connection closed
	// after one answer: no pod created meanwhile may be refused. Stopped at
	// once (before --shutdown-delay), a replica refused one here on a
	// loaded machine: "connection refused" under failurePolicy Fail.
	stopped, other := procs[0], procs[1]
	old, err := slices.Get(ctx, stopped.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	notReady := slice(stopped, false)
	notReady.ResourceVersion = old.ResourceVersion
	if _, err := slices.Update(ctx, notReady, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := stopped.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	signalled := time.Now()
	create := func(phase string, i, n int) {
		t.Helper()
		p, err := createPod(ctx, admissionPod(ns, fmt.Sprintf("%s-%d", phase, i), true))
		if err != nil {
			t.Fatalf("creating vGPU pod %d of %d %s: %v", i+1, n, phase, err)
		}
		if q := p.Spec.Containers[0].Resources.Limits[api.DefaultResourceMemory]; q.Value() != 2048 {
			t.Errorf("%s carries vgpu-memory %s, want the total 2048 (no webhook reviewed it)", p.Name, q.String())
		}
	}
	const n = 10
	for i := range n {
		create("draining", i, n)
	}
	if took := time.Since(signalled); took > drain {
		t.Logf("the %d pods took %v, longer than %s's drain delay %v: the last came after it stopped", n, took.Round(time.Millisecond), stopped.name, drain)
	}
	if err := stopped.cmd.Wait(); err != nil {
		t.Errorf("%s exited with %v after SIGTERM, want a clean shutdown", stopped.name, err)
	}
	if took := time.Since(signalled); took < drain {
		t.Errorf("%s exited %v after SIGTERM, before its drain delay %v", stopped.name, took.Round(time.Millisecond), drain)
	}
	before := other.reviews(t, ctx, ca)
	for i := range n {
		create("one-down", i, n)
	}
	if got := other.reviews(t, ctx, ca) - before; got != n {
		t.Errorf("%s reviewed %d of the %d pods created after %s stopped", other.name, got, n, stopped.name)
	}

	other.stop(t)
	if _, err := createPod(ctx, admissionPod(ns, "none-up", true)); err == nil || !strings.Contains(err.Error(), "pods.admission.volcano-vgpu.io") {
		t.Errorf("with both webhooks stopped a vGPU pod was created or refused for another reason (err %v): the pods before did not need the webhook", err)
	}
	if _, err := createPod(ctx, admissionPod(ns, "cpu-none-up", false)); err != nil {
		t.Errorf("with both webhooks stopped a pod asking no vGPU is refused: %v", err)
	}
}
