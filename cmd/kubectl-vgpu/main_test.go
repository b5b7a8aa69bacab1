package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: team-a}}]
current-context: x
`

func TestRun(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kc)
	denied := fake.NewSimpleClientset()
	denied.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New(`pods is forbidden: User "alice" cannot list resource "pods"`)
	})
	for _, tc := range []struct {
		name    string
		args    []string
		client  *fake.Clientset
		wantOut string
		wantErr string
	}{
		{name: "nodes on an empty cluster", args: []string{"nodes"}, wantOut: "No resources found.\n"},
		{name: "json", args: []string{"nodes", "-o", "json"}, wantOut: `"gpus": []`},
		{name: "unknown format", args: []string{"nodes", "-o", "wide"}, wantErr: "json or yaml"},
		{name: "unknown command", args: []string{"gpus"}, wantErr: "usage"},
		{name: "why needs a pod", args: []string{"why"}, wantErr: "usage"},
		{name: "why a missing pod", args: []string{"why", "nope", "-n", "x"}, wantErr: `pod x/nope: pods "nope" not found`},
		{name: "list refused names the role", args: []string{"pods", "-A"}, client: denied, wantErr: "docs/kubectl-vgpu.md"},
		{name: "namespace flag", args: []string{"pods", "-n", "team-a"}, wantOut: "No resources found.\n"},
		{name: "the kubeconfig's namespace", args: []string{"why", "p"}, wantErr: `pod team-a/p: pods "p" not found`},
		{name: "--namespace wins", args: []string{"why", "p", "--namespace", "b"}, wantErr: `pod b/p: pods "p" not found`},
		{name: "a broken kubeconfig is named", args: []string{"nodes", "--kubeconfig", "/nonexistent/kc"}, wantErr: "kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.client
			if c == nil {
				c = fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu-0"}})
			}
			var out, errOut bytes.Buffer
			err := run(context.Background(), tc.args, &out, &errOut, c)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), tc.wantOut) {
				t.Errorf("output %q, want it to contain %q", out.String(), tc.wantOut)
			}
		})
	}
}
