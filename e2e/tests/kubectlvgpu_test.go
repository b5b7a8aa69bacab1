//go:build e2e

package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/volcano-vgpu/volcano-vgpu/cmd/kubectl-vgpu/view"
)

// viewerRole is the ClusterRole docs/kubectl-vgpu.md documents, read from
// the doc itself, so the documented role is the tested one.
func viewerRole(t *testing.T) *rbacv1.ClusterRole {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(shared.cl.Config.Root, "docs", "kubectl-vgpu.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatal("docs/kubectl-vgpu.md: no yaml block with the viewer role")
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(m[1], &role); err != nil {
		t.Fatalf("docs/kubectl-vgpu.md's role: %v", err)
	}
	return &role
}

// kubectlVGPU runs the built plugin as user (impersonated by the admin
// kubeconfig) and returns its stdout.
func kubectlVGPU(t *testing.T, ctx context.Context, user string, args ...string) []byte {
	t.Helper()
	args = append(args, "--kubeconfig="+shared.cl.Config.Kubeconfig(), "--as="+user)
	cmd := exec.CommandContext(ctx, filepath.Join(shared.cl.Config.BinDir, "kubectl-vgpu"), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl vgpu %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.Bytes()
}

// TestKubectlVGPU: the plugin, run as a user with only the documented
// read-only role, lists a running Job's GPUs and pods with the memory and
// cores the scheduler booked, and explains a pod asking 999999 MiB with the
// GPU nearest to fitting, although Volcano refused it by its resource totals.
func TestKubectlVGPU(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := newNamespace(t, ctx)
	user := "viewer-" + ns
	role := viewerRole(t)
	role.Name = user
	if _, err := shared.kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := shared.kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = shared.kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), user, metav1.DeleteOptions{})
		_ = shared.kube.RbacV1().ClusterRoles().Delete(context.Background(), user, metav1.DeleteOptions{})
	})

	if _, err := shared.vc.BatchV1alpha1().Jobs(ns).Create(ctx, gpuJob(ns, "frac", 2, 1, 8192, 30, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := waitPodsRunning(t, ctx, ns, 2)
	if _, err := shared.vc.BatchV1alpha1().Jobs(ns).Create(ctx, gpuJob(ns, "big", 1, 1, 999999, 0, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var big corev1.Pod
	waitFor(t, ctx, "the 999999 MiB pod to be reported unschedulable", func() error {
		l, err := shared.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, p := range l.Items {
			if !strings.HasPrefix(p.Name, "big-") {
				continue
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
					big = p
					return nil
				}
			}
		}
		return fmt.Errorf("no unschedulable big-* pod yet")
	})

	var nodes view.NodesReport
	if err := json.Unmarshal(kubectlVGPU(t, ctx, user, "nodes", "-o", "json"), &nodes); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		a := podAssignment(t, p)
		uuid := a.Containers[0].Devices[0].UUID
		found := false
		for _, g := range nodes.GPUs {
			if g.UUID == uuid && g.Node == p.Spec.NodeName {
				found = true
				tenant := ns + "/" + p.Name + "/main"
				if !strings.Contains(strings.Join(g.Tenants, " "), tenant) || g.AllocatedMemoryMiB < 8192 || g.AllocatedCores < 30 {
					t.Errorf("nodes: GPU %s on %s: tenants %v, %d MiB, %d%% booked; want %s with at least 8192 MiB and 30%%",
						uuid, g.Node, g.Tenants, g.AllocatedMemoryMiB, g.AllocatedCores, tenant)
				}
			}
		}
		if !found {
			t.Errorf("nodes: no row for %s's GPU %s on %s", p.Name, uuid, p.Spec.NodeName)
		}
	}
	table := string(kubectlVGPU(t, ctx, user, "nodes"))
	if !strings.HasPrefix(table, "NODE ") {
		t.Errorf("nodes table:\n%s", table)
	}
	t.Logf("kubectl vgpu nodes:\n%s", table)

	podsTable := string(kubectlVGPU(t, ctx, user, "pods", "-n", ns))
	for _, p := range pods {
		row := regexp.MustCompile(`(?m)^` + ns + `\s+` + p.Name + `\s+Running\s+` + p.Spec.NodeName + `\s+main\s+\d+\s+8192\s+30%\s+default$`)
		if !row.MatchString(podsTable) {
			t.Errorf("pods: no row for %s on %s with 8192 MiB and 30%% in:\n%s", p.Name, p.Spec.NodeName, podsTable)
		}
	}
	if !regexp.MustCompile(`(?m)^` + ns + `\s+` + big.Name + `\s+Pending\s+-\s+main\s+asks 1\s+999999\s`).MatchString(podsTable) {
		t.Errorf("pods: no pending row for %s asking 999999 MiB in:\n%s", big.Name, podsTable)
	}

	t.Logf("kubectl vgpu pods -n %s:\n%s", ns, podsTable)
	var why view.WhyReport
	if err := json.Unmarshal(kubectlVGPU(t, ctx, user, "why", big.Name, "-n", ns, "-o", "json"), &why); err != nil {
		t.Fatal(err)
	}
	if why.Verdict != view.VerdictPending || !regexp.MustCompile(`^\S+ GPU-\S+ \(.+\): \d+ MiB free, container "main" asks 999999 MiB$`).MatchString(why.Nearest) {
		t.Errorf("why %s: verdict %q, nearest %q; want pending with the nearest GPU and its free MiB", big.Name, why.Verdict, why.Nearest)
	}
	if len(why.Scheduler) == 0 {
		t.Errorf("why %s: nothing from the scheduler (condition: %+v)", big.Name, big.Status.Conditions)
	}
	t.Logf("kubectl vgpu why %s:\n%s", big.Name, kubectlVGPU(t, ctx, user, "why", big.Name, "-n", ns))
}
