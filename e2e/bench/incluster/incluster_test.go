package incluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const envChild = "INCLUSTER_TEST_CHILD"

// TestMain lets the test binary act as the wrapper: with envChild set it
// runs Exec on its own arguments.
func TestMain(m *testing.M) {
	if dir := os.Getenv(envChild); dir != "" {
		err := Exec(dir, []string{"/bin/cat", filepath.Join(ServiceAccountDir, "token")})
		os.Stderr.WriteString(err.Error())
		os.Exit(3)
	}
	os.Exit(m.Run())
}

func TestEnv(t *testing.T) {
	want := []string{"KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=6443"}
	if diff := cmp.Diff(want, Env("127.0.0.1", 6443)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestWrite(t *testing.T) {
	src := t.TempDir()
	tok, ca := filepath.Join(src, "admin.token"), filepath.Join(src, "apiserver.crt")
	_ = os.WriteFile(tok, []byte("secret"), 0o600)
	_ = os.WriteFile(ca, []byte("PEM"), 0o600)
	dir := filepath.Join(t.TempDir(), "sa")
	if err := Write(dir, tok, ca); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"token": "secret", "ca.crt": "PEM"} {
		if got, _ := os.ReadFile(filepath.Join(dir, name)); string(got) != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

// TestExecShowsTheTokenOnlyInside runs the test binary through Exec: the
// child sees the token, this process and the machine do not.
func TestExecShowsTheTokenOnlyInside(t *testing.T) {
	if _, err := os.Stat(ServiceAccountDir); err == nil {
		t.Skipf("%s exists on this machine", ServiceAccountDir)
	}
	dir := filepath.Join(t.TempDir(), "sa")
	_ = os.MkdirAll(dir, 0o700)
	_ = os.WriteFile(filepath.Join(dir, "token"), []byte("inside"), 0o600)
	_ = os.WriteFile(filepath.Join(dir, "ca.crt"), []byte("PEM"), 0o600)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envChild+"="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "mount namespace") || strings.Contains(string(out), "operation not permitted") {
			t.Skipf("mount namespaces not permitted here: %s", out)
		}
		t.Fatalf("%v: %s", err, out)
	}
	if string(out) != "inside" {
		t.Errorf("child read %q, want the token", out)
	}
	if _, err := os.Stat(ServiceAccountDir); err == nil {
		t.Errorf("%s appeared on the machine", ServiceAccountDir)
	}
}
