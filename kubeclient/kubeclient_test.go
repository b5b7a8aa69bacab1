package kubeclient

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: admin
  user: {token: secret}
contexts:
- name: local
  context: {cluster: local, user: admin}
current-context: local
`

func TestConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		kubeconfig string
		wantErr    string // substring; "" means success
	}{
		{name: "kubeconfig file", kubeconfig: path},
		{name: "missing file names it and the fix", kubeconfig: filepath.Join(t.TempDir(), "nope"), wantErr: "inside the cluster, omit --kubeconfig"},
		{name: "no file outside a cluster says to pass one", kubeconfig: "", wantErr: "outside the cluster, pass --kubeconfig"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.kubeconfig == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
				t.Skip("running inside a cluster")
			}
			c, err := Config(tt.kubeconfig, "agent/n1", 20, 40)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Host != "https://127.0.0.1:6443" || c.QPS != 20 || c.Burst != 40 || c.UserAgent != "agent/n1" {
				t.Errorf("config host %q qps %v burst %d agent %q", c.Host, c.QPS, c.Burst, c.UserAgent)
			}
			if _, err := New(tt.kubeconfig, "agent/n1", 20, 40); err != nil {
				t.Errorf("New: %v", err)
			}
		})
	}
}
