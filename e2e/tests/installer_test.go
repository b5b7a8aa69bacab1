//go:build e2e

package tests

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// The plain manifests are rendered for this namespace; the test moves them.
const (
	manifestPath      = "installer/manifests/volcano-vgpu.yaml"
	manifestNamespace = "volcano-system"
	nodeNameExtra     = "authentication.kubernetes.io/node-name"
	// assignmentPolicySuffix ends the name of the policy that lets only the
	// scheduler write the assignment annotation.
	assignmentPolicySuffix = "-assignment-writers"
)

// TestInstallerManifests creates the plain manifests for real on the
// apiserver (in a namespace of their own, cluster-scoped names suffixed, the
// DaemonSet selecting no node and the scheduler at 0 replicas, so nothing
// competes with the running cluster), then checks that RBAC gives each
// ServiceAccount what it needs and nothing more, and that the admission
// policies keep the device plugin to its own node. Writes aimed at the real
// nodes are dry runs.
func TestInstallerManifests(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := newNamespace(t, ctx)
	suffix := ns[strings.LastIndex(ns, "-")+1:]
	objs := installerObjects(t, ns, suffix)
	createAll(t, ctx, objs)

	dpSA := "volcano-vgpu-device-plugin"
	schedSA := "volcano-vgpu-scheduler"
	t.Run("device plugin RBAC", func(t *testing.T) {
		checkAccess(t, ctx, ns, dpSA, []access{
			{verb: "get", resource: "pods"}, {verb: "list", resource: "pods"}, {verb: "watch", resource: "pods"},
			{verb: "get", resource: "nodes"}, {verb: "list", resource: "nodes"}, {verb: "watch", resource: "nodes"},
			{verb: "patch", resource: "nodes"}, {verb: "patch", resource: "nodes", sub: "status"},
			{verb: "create", resource: "events", namespace: "any"},
		}, []access{
			{verb: "patch", resource: "pods", namespace: "any"},
			{verb: "delete", resource: "pods", namespace: "any"}, {verb: "create", resource: "pods", namespace: "any"},
			{verb: "update", resource: "pods", namespace: "any"}, {verb: "create", resource: "pods", sub: "exec", namespace: "any"},
			{verb: "create", resource: "pods", sub: "eviction", namespace: "any"}, {verb: "update", resource: "pods", sub: "status", namespace: "any"},
			{verb: "create", resource: "pods", sub: "binding", namespace: "any"},
			{verb: "get", resource: "secrets", namespace: ns}, {verb: "list", resource: "secrets"},
			{verb: "get", resource: "configmaps", namespace: "kube-system"},
			{verb: "update", resource: "nodes"}, {verb: "delete", resource: "nodes"}, {verb: "create", resource: "nodes"},
			{verb: "update", resource: "nodes", sub: "status"},
			{verb: "create", resource: "serviceaccounts", sub: "token", namespace: ns},
		})
	})
	t.Run("scheduler RBAC", func(t *testing.T) {
		checkAccess(t, ctx, ns, schedSA, []access{
			{verb: "create", resource: "pods", sub: "binding", namespace: "any"},
			{verb: "patch", resource: "pods", namespace: "any"}, {verb: "update", resource: "pods", sub: "status", namespace: "any"},
			{verb: "delete", resource: "pods", namespace: "any"}, {verb: "list", resource: "nodes"},
			{verb: "create", resource: "events", namespace: "any"},
			{group: "scheduling.volcano.sh", verb: "update", resource: "podgroups", namespace: "any"},
			{group: "scheduling.volcano.sh", verb: "update", resource: "queues", sub: "status"},
			{group: "coordination.k8s.io", verb: "create", resource: "leases", namespace: ns},
			{group: "coordination.k8s.io", verb: "update", resource: "leases", name: "volcano", namespace: ns},
		}, []access{
			{verb: "get", resource: "secrets", namespace: ns}, {verb: "list", resource: "secrets"},
			{verb: "patch", resource: "nodes"}, {verb: "update", resource: "nodes"}, {verb: "delete", resource: "nodes"},
			{verb: "create", resource: "configmaps", namespace: ns}, {verb: "create", resource: "pods", sub: "exec", namespace: "any"},
			{group: "apiextensions.k8s.io", verb: "create", resource: "customresourcedefinitions"},
			{group: "scheduling.volcano.sh", verb: "delete", resource: "queues"},
			{group: "coordination.k8s.io", verb: "update", resource: "leases", name: "volcano", namespace: "kube-system"},
			{group: "coordination.k8s.io", verb: "update", resource: "leases", name: "kube-scheduler", namespace: ns},
		})
	})
	t.Run("device plugin only on its own node", func(t *testing.T) {
		testOwnNodePolicy(t, ctx, ns, dpSA, schedSA)
	})
	t.Run("only the scheduler writes assignments", func(t *testing.T) {
		testAssignmentWriters(t, ctx, ns, schedSA)
	})
}

// installerObjects reads the plain manifests and moves them into ns:
// namespaced objects by text (the manifests name the namespace only as
// such and in the ServiceAccount user names), cluster-scoped ones by suffix.
func installerObjects(t *testing.T, ns, suffix string) []*unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(shared.cl.Config.Root, manifestPath))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(raw), manifestNamespace, ns)
	var objs []*unstructured.Unstructured
	d := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(text), 4096)
	for {
		var m map[string]any
		if err := d.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if m == nil {
			continue
		}
		o := &unstructured.Unstructured{Object: m}
		switch o.GetKind() {
		case "ClusterRole", "ValidatingAdmissionPolicy":
			o.SetName(o.GetName() + "-" + suffix)
		case "ClusterRoleBinding":
			o.SetName(o.GetName() + "-" + suffix)
			name, _, _ := unstructured.NestedString(m, "roleRef", "name")
			_ = unstructured.SetNestedField(m, name+"-"+suffix, "roleRef", "name")
		case "ValidatingAdmissionPolicyBinding":
			o.SetName(o.GetName() + "-" + suffix)
			name, _, _ := unstructured.NestedString(m, "spec", "policyName")
			_ = unstructured.SetNestedField(m, name+"-"+suffix, "spec", "policyName")
			if strings.HasSuffix(name, assignmentPolicySuffix) {
				// It binds every writer but the test's scheduler: kept to the
				// test's namespace, it never refuses the running cluster's.
				_ = unstructured.SetNestedStringMap(m, map[string]string{"kubernetes.io/metadata.name": ns},
					"spec", "matchResources", "namespaceSelector", "matchLabels")
			}
		case "DaemonSet": // never on a simulated GPU node, should a DaemonSet controller ever run
			_ = unstructured.SetNestedStringMap(m, map[string]string{"volcano-vgpu.io/e2e-no-such-node": "true"}, "spec", "template", "spec", "nodeSelector")
		case "Deployment": // never a second scheduler named volcano
			_ = unstructured.SetNestedField(m, int64(0), "spec", "replicas")
		}
		objs = append(objs, o)
	}
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
	}
	for _, k := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "Deployment", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		if kinds[k] == 0 {
			t.Fatalf("%s has no %s (kinds: %v)", manifestPath, k, kinds)
		}
	}
	return objs
}

// createAll creates every object and deletes them all when the test ends.
func createAll(t *testing.T, ctx context.Context, objs []*unstructured.Unstructured) {
	t.Helper()
	dc, err := dynamic.NewForConfig(shared.cl.RestConfig)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(shared.cl.RestConfig)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	resource := func(o *unstructured.Unstructured) dynamic.ResourceInterface {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", gvk, err)
		}
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			return dc.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		return dc.Resource(m.Resource)
	}
	for _, o := range objs {
		r := resource(o)
		t.Cleanup(func() {
			if err := r.Delete(context.Background(), o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		})
		if _, err := r.Create(ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
}

// access is one SubjectAccessReview; namespace "any" means all namespaces
// ("" is a cluster-scoped resource or a cluster-wide list).
type access struct {
	group, verb, resource, sub, name, namespace string
}

func (a access) String() string {
	r := a.resource
	if a.sub != "" {
		r += "/" + a.sub
	}
	if a.group != "" {
		r += "." + a.group
	}
	if a.name != "" {
		r += " " + a.name
	}
	if a.namespace != "" {
		r += " in " + a.namespace
	}
	return a.verb + " " + r
}

func checkAccess(t *testing.T, ctx context.Context, ns, sa string, allowed, denied []access) {
	t.Helper()
	user := "system:serviceaccount:" + ns + ":" + sa
	for _, want := range []bool{true, false} {
		list := allowed
		if !want {
			list = denied
		}
		for _, a := range list {
			namespace := a.namespace
			if namespace == "any" {
				namespace = ""
			}
			sar := &authv1.SubjectAccessReview{Spec: authv1.SubjectAccessReviewSpec{
				User:   user,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
				ResourceAttributes: &authv1.ResourceAttributes{
					Group: a.group, Verb: a.verb, Resource: a.resource, Subresource: a.sub, Name: a.name, Namespace: namespace,
				},
			}}
			got, err := shared.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.Allowed != want {
				t.Errorf("%s: %s allowed=%v, want %v", sa, a, got.Status.Allowed, want)
			}
		}
	}
}

// testOwnNodePolicy exercises the ValidatingAdmissionPolicies with the
// device plugin's ServiceAccount impersonated, its token's node name given
// as the user extra a pod-bound token carries.
func testOwnNodePolicy(t *testing.T, ctx context.Context, ns, dpSA, schedSA string) {
	nodes, err := shared.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "volcano-vgpu.io/simulated=true"})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) < 2 {
		t.Fatalf("need 2 simulated nodes, found %d", len(nodes.Items))
	}
	names := []string{nodes.Items[0].Name, nodes.Items[1].Name}
	slices.Sort(names)
	own, other := names[0], names[1]
	// Pods bound (by name only) to nodes that do not exist: no kubelet or
	// kwok ever runs them.
	ghostA, ghostB := "installer-e2e-ghost-a", "installer-e2e-ghost-b"
	podA := ghostPod(t, ctx, ns, "on-a", ghostA)
	podB := ghostPod(t, ctx, ns, "on-b", ghostB)
	unbound := ghostPod(t, ctx, ns, "unbound", "")

	asDP := func(node string) kubernetes.Interface { return impersonate(t, ns, dpSA, node) }
	dryRun := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	patchNode := func(c kubernetes.Interface, node, body string, sub ...string) error {
		_, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(body), dryRun, sub...)
		return err
	}
	patchPod := func(c kubernetes.Interface, pod, body string) error {
		_, err := c.CoreV1().Pods(ns).Patch(ctx, pod, types.MergePatchType, []byte(body), dryRun)
		return err
	}
	inventory := `{"metadata":{"annotations":{"` + api.InventoryKey + `":"{}"}}}`
	// The policies take effect when the apiserver's informers see them.
	waitFor(t, ctx, "the device plugin policies to take effect", func() error {
		if err := patchNode(asDP(own), other, inventory); !isPolicyDenial(err) {
			return fmt.Errorf("patching another node: %v", err)
		}
		return nil
	})

	assignment := func(node string) string { return assignmentPatch(t, node) }
	for _, c := range []struct {
		name string
		do   func() error
		deny string // "" allowed; else part of the policy's message
	}{
		{"own node: inventory annotation", func() error { return patchNode(asDP(own), own, inventory) }, ""},
		{"own node: vgpu-memory and vgpu-cores capacity", func() error {
			return patchNode(asDP(own), own, `{"status":{"capacity":{"volcano.sh/vgpu-memory":"40960","volcano.sh/vgpu-cores":"400"},"allocatable":{"volcano.sh/vgpu-memory":"40960","volcano.sh/vgpu-cores":"400"}}}`, "status")
		}, ""},
		{"another node", func() error { return patchNode(asDP(own), other, inventory) }, "may change only its own node, not " + other},
		{"another node's status", func() error {
			return patchNode(asDP(own), other, `{"status":{"capacity":{"volcano.sh/vgpu-memory":"1"}}}`, "status")
		}, "may change only its own node"},
		{"a token without node name", func() error { return patchNode(asDP(""), own, inventory) }, "token names no node"},
		{"own node: another annotation", func() error {
			return patchNode(asDP(own), own, `{"metadata":{"annotations":{"`+api.ComputePolicyNodeKey+`":"none"}}}`)
		}, "not " + api.ComputePolicyNodeKey},
		{"own node: a label", func() error { return patchNode(asDP(own), own, `{"metadata":{"labels":{"gpu":"no"}}}`) }, "may not change labels"},
		{"own node: cordon", func() error { return patchNode(asDP(own), own, `{"spec":{"unschedulable":true}}`) }, "may not change a spec"},
		{"own node: cpu capacity", func() error {
			return patchNode(asDP(own), own, `{"status":{"capacity":{"cpu":"1000"}}}`, "status")
		}, "in its node status, not cpu"},
		{"own node: addresses", func() error {
			return patchNode(asDP(own), own, `{"status":{"addresses":[{"type":"InternalIP","address":"192.0.2.1"}]}}`, "status")
		}, "may not change node conditions, addresses"},
		{"the scheduler is not restricted", func() error {
			return patchPod(impersonate(t, ns, schedSA, ""), podB, assignment(ghostB))
		}, ""},
	} {
		t.Run(c.name, func(t *testing.T) { checkPolicyOutcome(t, c.do(), c.deny) })
	}
	t.Run("RBAC refuses pod writes", func(t *testing.T) {
		err := asDP(ghostA).CoreV1().Pods(ns).Delete(ctx, podA, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		if !apierrors.IsForbidden(err) || isPolicyDenial(err) {
			t.Errorf("delete of a pod on its own node: want RBAC's refusal, got %v", err)
		}
		if err := patchPod(asDP(ghostA), podA, assignment(ghostA)); !apierrors.IsForbidden(err) || isPolicyDenial(err) {
			t.Errorf("assignment on a pod of its own node: want RBAC's refusal, got %v", err)
		}
	})
	t.Run("the scheduler binds", func(t *testing.T) {
		sched := impersonate(t, ns, schedSA, "")
		b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: unbound}, Target: corev1.ObjectReference{Kind: "Node", Name: ghostA}}
		if err := sched.CoreV1().Pods(ns).Bind(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatalf("binding as %s: %v", schedSA, err)
		}
	})
}

// assignmentPatch is a merge patch setting a valid assignment for node.
func assignmentPatch(t *testing.T, node string) string {
	t.Helper()
	return fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, api.AssignmentKey, assignmentValue(t, node))
}

func assignmentValue(t *testing.T, node string) string {
	t.Helper()
	v, err := api.EncodeAssignment(api.Assignment{
		PodUID: "0a1b", Node: node, Time: time.Unix(1700000000, 0).UTC(), Phase: api.PhaseAssigned,
		Containers: []api.ContainerAssignment{{Name: "main", Devices: []api.DeviceShare{{UUID: "GPU-e2e", MemoryMiB: 1024, Cores: 10}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// checkPolicyOutcome: deny "" wants err nil; otherwise a policy's refusal
// whose message contains deny.
func checkPolicyOutcome(t *testing.T, err error, deny string) {
	t.Helper()
	switch {
	case deny == "" && err != nil:
		t.Errorf("refused: %v", err)
	case deny != "" && !isPolicyDenial(err):
		t.Errorf("want the policy to refuse (%q), got %v", deny, err)
	case deny != "" && !strings.Contains(err.Error(), deny):
		t.Errorf("refused without saying %q: %v", deny, err)
	}
}

func isPolicyDenial(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy")
}

// impersonate returns a client acting as a ServiceAccount of ns, with the
// node name a pod-bound token carries ("" for none).
func impersonate(t *testing.T, ns, sa, node string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(shared.cl.RestConfig)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + sa,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	if node != "" {
		cfg.Impersonate.Extra = map[string][]string{nodeNameExtra: {node}}
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ghostPod creates a pod bound to node (which does not exist; "" leaves it
// unbound, with a scheduler name nobody serves) and force-deletes it at the
// end: no kubelet would ever confirm a graceful delete.
func ghostPod(t *testing.T, ctx context.Context, ns, name, node string) string {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName: node, SchedulerName: "volcano-vgpu-e2e-nobody",
			Containers: []corev1.Container{{Name: "main", Image: "busybox"}},
		},
	}
	if _, err := shared.kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = shared.kube.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	return name
}
